"""Shared-stack backward at 4 bytes per pair-element: no call re-reads its sources.

Notation as `bwd.py` (call c, source j, per head h of call c; khat0_j = round(v_j r_j)):

    shift_c   = <dout_c, out_c>                          (per head; O(1) rows per call)
    S'_c      = <dout_c, mix_c - out_c>                  (0 for an fp32 output; else the forward's
                                                          stored rounding residual res_c)
    D'_{c,j}  = <dout_c, v_j> - shift_c                  (formed in the gather of source j)
    dl_{c,j}  = w_{c,j} (D'_{c,j} - S'_c)                (stored: [P, H_c] fp32 per pair)
    dv_j      = sum_c w_{c,j} dout_c + r_j a_j - (r_j^3/d) <a_j, v_j> v_j,
    a_j       = sum_c dl_{c,j} (q_c * g_c)
    E_{c,j}   = sum_p dl_{c,j,p} khat0_{j,p}             (per column, its head's dl)
    dq_c      = g_c * sum_j E_{c,j},   dg_c = q_c * sum_j E_{c,j}

S'_c is the exact identity sum_j w_{c,j} D'_{c,j} = <dout_c, sum_j w_{c,j} v_j - out_c> (the
weights sum to one), so the gather needs no pass over call c's sources. Three kernels:

* `stack_gather_kernel` (one launch per call c, one program per position block): stores dout_c, shift_c and
  S'_c for a block of positions, then (block barrier, same positions) gathers every source
  first read by call c from the stored douts of all calls that read it, storing dl_{c',j}.
  Source rows are read once here (and once in the forward): fwd 2 + gather 2 bytes per
  pair-element for bf16 douts (4 for the fp32 douts of autocast's fp32 outputs).
* `pair_e_kernel` (once per backward, after source 0's gather): E_{c,j} for every pair, one
  program per (source j, block of BLOCK_C of its readers, column block, split of the positions),
  each summing its positions in a fixed order; it reads each source row once more per reader
  block (ceil(readers / BLOCK_C) times: with the default 16, 5 at most at 1B, not once per reader).
* `collect_dqdg_kernel`: dq_c, dg_c for every call from the E_{c,j}, the position splits and
  sources summed in a fixed order.
No atomics: bitwise repeatable. The gradients of every call's query and key-norm weight are
complete only after source 0's gather, so the autograd node that runs last (the first call's)
returns them all; see `autograd.py` (`TritonSourceStack(capacity, params=...)`).
`naive.collect_reference` is the plain torch reading of the decomposition, used by the tests.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from mhar_probe.kernels.config import DEFAULT
from mhar_probe.kernels.launch import Launcher, cdiv, next_pow2
from mhar_probe.kernels.launch_tables import LaunchTables, tables_for
from mhar_probe.kernels.route.bwd import source_grad_split
from mhar_probe.kernels.route.fwd import block_rows, head_split, rsqrt_acc


@triton.jit
def _tile_cols(HM: tl.constexpr, KM: tl.constexpr, KA: tl.constexpr, BLOCK_KA: tl.constexpr,
               KB: tl.constexpr, BLOCK_KB: tl.constexpr, VEC_B: tl.constexpr = 0):
    """Columns and masks of a row of HM sub-heads of width KM = KA + KB as two tiles,
    [HM, BLOCK_KA] (columns [0, KA) of each sub-head) and [HM, BLOCK_KB] ([KA, KM)). One padded
    tile per head is KA = KM, KB = 0 (BLOCK_KB = 1, all masked); a width like 160 is 128 + 32.

    VEC_B > 0 writes the narrow tile's columns so that the compiler can prove runs of only VEC_B
    contiguous elements (the same values): its loads are then VEC_B wide, and Triton lays the
    tile out with as many lanes along a head's columns as the wide tile has. Both tiles then
    hold each head's per-head sums in the same lanes, so the sum of the two tiles' parts needs
    no exchange through shared memory (see `narrow_tile_vec`)."""
    offs_h = tl.arange(0, HM)
    offs_a = tl.arange(0, BLOCK_KA)
    offs_b = tl.arange(0, BLOCK_KB)
    if VEC_B > 0:
        offs_b = (offs_b // VEC_B) * VEC_B + offs_b % VEC_B
    cola = offs_h[:, None] * KM + offs_a[None, :]
    colb = offs_h[:, None] * KM + KA + offs_b[None, :]
    cmaska = (offs_a < KA)[None, :] & (offs_h < HM)[:, None]
    cmaskb = (offs_b < KB)[None, :] & (offs_h < HM)[:, None]
    return cola, colb, cmaska, cmaskb


@triton.jit
def _head_sum(x, hc, HM: tl.constexpr):
    """x [BP, HM] of sub-head partial sums -> every sub-head holds its call head's total
    (the call has hc heads, hc divides HM, head of sub-head a = a * hc // HM)."""
    grp = (tl.arange(0, HM) * hc) // HM
    same = (grp[:, None] == grp[None, :]).to(tl.float32)  # [HM, HM]
    return tl.sum(x[:, None, :] * same[None, :, :], axis=2)


@triton.jit
def _reader_index(c, offs_p, offs_hm, CALL_H, HM: tl.constexpr, SAME_H: tl.constexpr):
    """Reader call c's head count and the (position, head of c) index [BP, HM] of its per-head
    rows (weights, shift, S', dl). SAME_H: every call has HM heads (no table load, constant
    index arithmetic); else head of sub-head a = a * hc // HM."""
    if SAME_H:
        hc = HM
        pidx = offs_p[:, None] * HM + offs_hm[None, :]
    else:
        hc = tl.load(CALL_H + c)
        pidx = offs_p[:, None] * hc + ((offs_hm * hc) // HM)[None, :]
    return hc, pidx


@triton.jit
def _gather_collect(VSRC, j, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                    cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SHALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D: tl.constexpr, HM: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_KA: tl.constexpr, BLOCK_KB: tl.constexpr,
                    PREFETCH: tl.constexpr, SAME_H: tl.constexpr, LOADS_FIRST: tl.constexpr = False,
                    dbase=0, FOLD: tl.constexpr = False, V0=None, PICK0: tl.constexpr = False):
    """dv_j (two tiles) and r_j for one block of positions of source j (its row at VSRC) from
    every stored dout of the calls c >= call that read it; stores dl_{c,j}:

        dl_{c,j} = w_{c,j} ((<dout_c, v_j> - shift_c) - S'_c)     (0 where call c reads one source)
        dv_j     = sum_c w_{c,j} dout_c + r_j a_j - (r_j^3/d) <a_j, v_j> v_j,  a_j = sum_c dl_{c,j} q_c g_c

    PREFETCH keeps the next call's dout in flight (more registers per thread, fewer resident
    warps).

    LOADS_FIRST loads the reader's q * g tiles and call-table entry with its dout, before the dl
    store: the compiler may not move a load above a store it cannot prove disjoint, so in
    program order each reader waited on its dout and then, after the store, on q * g (two
    memory round trips per reader instead of one; more registers live across the dot).

    SAME_H (every call of the stack has HM heads, the model's case): each reader's head count is
    the constant HM, so its (position, head) index needs no table load and no division, and the
    per-head sums need no regrouping; the same sums as the general path.

    Call c's stored dout is at DOUT_BUF + dbase + c * stride_dc (the gather backward: dbase 0,
    one slot per call; the fold-block backward: slot F - 1 - c of a few, dbase = (F - 1) * P * d
    and a negative stride, still linear in c, so no index arithmetic per reader).

    FOLD (the fold-block backward, `bwd_fold.py`): the readers are the calls [call, top1)
    only, top1 possibly below the stack's top (the later ones are folded into accumulators), so
    the prefetch past the last reader is masked off (that slot may lie outside the buffer).

    PICK0: source 0 is read at V0 where j == 0 (VSRC otherwise; two loads, one masked off), so a
    loop over sources that includes source 0 (another dtype under autocast: the fp32 embedding)
    is one copy of this code instead of two (the fold kernel: 128 instead of 168 registers per
    thread at 1B, sm_90 offline)."""
    if PICK0:
        is0a = (rowa * 0 + j) == 0
        is0b = (rowb * 0 + j) == 0
        vga = tl.where(is0a, tl.load(V0 + rowa, mask=maska & is0a, other=0.0).to(tl.float32),
                       tl.load(VSRC + rowa, mask=maska & ~is0a, other=0.0).to(tl.float32))
        vgb = tl.where(is0b, tl.load(V0 + rowb, mask=maskb & is0b, other=0.0).to(tl.float32),
                       tl.load(VSRC + rowb, mask=maskb & ~is0b, other=0.0).to(tl.float32))
    else:
        vga = tl.load(VSRC + rowa, mask=maska, other=0.0).to(tl.float32)
        vgb = tl.load(VSRC + rowb, mask=maskb, other=0.0).to(tl.float32)
    ss = tl.sum(tl.sum(vga * vga, axis=2), axis=1) + tl.sum(tl.sum(vgb * vgb, axis=2), axis=1)
    rg = rsqrt_acc(ss / D + eps)  # [BP]
    acc_va = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
    acc_vb = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    acc_ka = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
    acc_kb = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    zero_h = tl.zeros([HM], tl.int64)
    rd = (zero_h + tl.load(CALL_N + call)) > j  # [HM]: does call c read source j
    if PREFETCH:
        dslot = dbase + call * stride_dc
        dna = tl.load(DOUT_BUF + dslot + rowa, mask=maska & rd[None, :, None], other=0.0)
        dnb = tl.load(DOUT_BUF + dslot + rowb, mask=maskb & rd[None, :, None], other=0.0)
    for c in range(call, top1):
        m2 = pmask[:, None] & rd[None, :]  # [BP, HM]
        if PREFETCH:
            doga = dna.to(tl.float32)
            dogb = dnb.to(tl.float32)
            rd = (zero_h + tl.load(CALL_N + c + 1)) > j  # the next call's (sentinel after the last)
            if FOLD:  # the next call may be past this range's end (folded, or not yet stored)
                rd = rd & ((zero_h + c + 1) < top1)
            dslot = dbase + (c + 1) * stride_dc
            dna = tl.load(DOUT_BUF + dslot + rowa, mask=maska & rd[None, :, None], other=0.0)
            dnb = tl.load(DOUT_BUF + dslot + rowb, mask=maskb & rd[None, :, None], other=0.0)
        else:
            dslot = dbase + c * stride_dc
            doga = tl.load(DOUT_BUF + dslot + rowa, mask=maska & rd[None, :, None],
                           other=0.0).to(tl.float32)
            dogb = tl.load(DOUT_BUF + dslot + rowb, mask=maskb & rd[None, :, None],
                           other=0.0).to(tl.float32)
            rd = (zero_h + tl.load(CALL_N + c + 1)) > j
        if LOADS_FIRST:  # before the dl store below, which they may not pass
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
            nc = tl.load(CALL_N + c)
        hc, pidx = _reader_index(c, offs_p, offs_hm, CALL_H, HM, SAME_H)
        wo = tl.load(CALL_WOFF + c) + j * P * hc
        so = tl.load(CALL_SOFF + c)
        wg = tl.load(WALL + wo + pidx, mask=m2, other=0.0)
        sh = tl.load(SHALL + so + pidx, mask=m2, other=0.0)
        sr = tl.load(SALL + so + pidx, mask=m2, other=0.0)
        ds = tl.sum(doga * vga, axis=2) + tl.sum(dogb * vgb, axis=2)  # [BP, HM] per sub-head
        if not SAME_H:
            if hc != HM:
                ds = _head_sum(ds, hc, HM)
        dl = wg * ((ds - sh) - sr)
        # a call over one source has a one-way softmax: dl is exactly 0 (shift and D' are the same
        # dot product summed in two layouts, whose rounding would otherwise leave noise in dq, dg)
        if LOADS_FIRST:
            dl = tl.where((zero_h + nc)[None, :] > 1, dl, 0.0)
        else:
            dl = tl.where((zero_h + tl.load(CALL_N + c))[None, :] > 1, dl, 0.0)
        tl.store(DALL + wo + pidx, dl, mask=m2)
        if not LOADS_FIRST:
            # q*g of call c as [1, HM, BK] tiles: loaded in the row tiles' layout (a 2-D load would
            # be converted through shared memory, with a block barrier, on every reader)
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
        acc_va += wg[:, :, None] * doga
        acc_vb += wg[:, :, None] * dogb
        acc_ka += dl[:, :, None] * ua
        acc_kb += dl[:, :, None] * ub
    dxa, dxb = source_grad_split(acc_va, acc_vb, acc_ka, acc_kb, vga, vgb, rg, D)
    return dxa, dxb, rg


@triton.jit
def stack_gather_kernel(
    V0, V, stride_vn,  # source row 0 [P, D] (its own tensor); buffer [cap, P, D] (rows >= 1)
    DOUT, OUT, RES,  # [P, D] this call's dout, output and (HAS_RES) rounding residual
    DOUT_BUF, stride_dc,  # [calls, P, D] stored douts; this call's slot is written here
    WALL, DALL,  # flat fp32, per call [n_c, P, H_c]: weights (read) / dl (written by gathers)
    SHALL, SALL,  # flat fp32, per call [P, H_c]: shift_c and S'_c (this call's written here)
    U,  # [calls, D] fp32: q_c * g_c
    RALL,  # [cap, P] fp32: r_j of every gathered source (read by pair_e_kernel)
    CALL_N, CALL_H, CALL_WOFF, CALL_SOFF,  # int64 tables, one entry per call + sentinel (n = 0)
    DX,  # [j1 - j0, P, D]: gradients of the sources first read by this call
    call, top1, soff, j0, j1, P, eps,
    ACC,  # FOLD, HAS_ACC: [>= j1, P, D] fp32, source j's folded gradient at ACC + j * P * D
    dbase,  # call c's stored dout at DOUT_BUF + dbase + c * stride_dc (see _gather_collect)
    D: tl.constexpr, H: tl.constexpr, HM: tl.constexpr, KM: tl.constexpr, KA: tl.constexpr,
    BLOCK_KA: tl.constexpr, KB: tl.constexpr, BLOCK_KB: tl.constexpr, BLOCK_P: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_GATHER: tl.constexpr, GATHER0: tl.constexpr,
    PREFETCH: tl.constexpr, SAME_H: tl.constexpr, VEC_B: tl.constexpr = 0,
    LOADS_FIRST: tl.constexpr = False, FOLD: tl.constexpr = False, HAS_ACC: tl.constexpr = False,
):
    """Call `call`'s part (store dout, shift, S') and, after a block barrier, the gradients of
    the sources [j0, j1) it reads first, from the readers [call, top1) (`_gather_collect`).
    FOLD (the fold-block backward, `bwd_fold.py`): douts in slots counted down from the
    fold frontier top1 (dbase, a negative stride_dc); HAS_ACC adds each gathered source's accumulator (the folded readers >= top1):
    dx_j = ACC_j + gather_j."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    # one tile layout throughout: HM sub-heads (the most heads of any call; each call's H divides it)
    offs_hm = tl.arange(0, HM)
    cola, colb, cmaska, cmaskb = _tile_cols(HM, KM, KA, BLOCK_KA, KB, BLOCK_KB, VEC_B)
    own = (offs_hm * H) // HM  # this call's head of each sub-head
    num_blocks = tl.cdiv(P, BLOCK_P)
    for blk in range(pid, num_blocks, nprog):
        offs_p, pmask, maska, maskb, _, rowa, rowb = block_rows(blk, P, D, BLOCK_P, cola, colb, cmaska, cmaskb)
        doa_raw = tl.load(DOUT + rowa, mask=maska, other=0.0)
        dob_raw = tl.load(DOUT + rowb, mask=maskb, other=0.0)
        own_slot = dbase + call * stride_dc
        tl.store(DOUT_BUF + own_slot + rowa, doa_raw.to(DOUT_BUF.dtype.element_ty), mask=maska)
        tl.store(DOUT_BUF + own_slot + rowb, dob_raw.to(DOUT_BUF.dtype.element_ty), mask=maskb)
        doa = doa_raw.to(tl.float32)
        dob = dob_raw.to(tl.float32)
        sh = tl.sum(doa * tl.load(OUT + rowa, mask=maska, other=0.0).to(tl.float32), axis=2) + \
            tl.sum(dob * tl.load(OUT + rowb, mask=maskb, other=0.0).to(tl.float32), axis=2)
        if H != HM:
            sh = _head_sum(sh, H, HM)
        hidx = offs_p[:, None] * H + own[None, :]  # [BP, HM]
        tl.store(SHALL + soff + hidx, sh, mask=pmask[:, None])
        if HAS_RES:
            sr = tl.sum(doa * tl.load(RES + rowa, mask=maska, other=0.0).to(tl.float32), axis=2) + \
                tl.sum(dob * tl.load(RES + rowb, mask=maskb, other=0.0).to(tl.float32), axis=2)
            if H != HM:
                sr = _head_sum(sr, H, HM)
        else:
            sr = tl.zeros([BLOCK_P, HM], tl.float32)
        tl.store(SALL + soff + hidx, sr, mask=pmask[:, None])
        if HAS_GATHER:
            tl.debug_barrier()  # this block's dout slot, shift and S' stores, read below by other threads
            jlo = j0
            if GATHER0:  # source 0 lives in V0 (only the first call gathers it)
                dxa, dxb, rg = _gather_collect(
                    V0, 0, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                    cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SHALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, BLOCK_KA, BLOCK_KB, PREFETCH,
                    SAME_H, LOADS_FIRST, dbase, FOLD, None, False)
                if HAS_ACC:
                    dxa = tl.load(ACC + rowa, mask=maska, other=0.0) + dxa
                    dxb = tl.load(ACC + rowb, mask=maskb, other=0.0) + dxb
                tl.store(DX + rowa, dxa.to(DX.dtype.element_ty), mask=maska)
                tl.store(DX + rowb, dxb.to(DX.dtype.element_ty), mask=maskb)
                tl.store(RALL + offs_p, rg, mask=pmask)
                jlo = j0 + 1
            for j in range(jlo, j1):
                dxa, dxb, rg = _gather_collect(
                    V + j * stride_vn, j, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                    cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SHALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, BLOCK_KA, BLOCK_KB, PREFETCH,
                    SAME_H, LOADS_FIRST, dbase, FOLD, None, False)
                if HAS_ACC:
                    aoff = j * P * D
                    dxa = tl.load(ACC + aoff + rowa, mask=maska, other=0.0) + dxa
                    dxb = tl.load(ACC + aoff + rowb, mask=maskb, other=0.0) + dxb
                tl.store(DX + (j - j0) * P * D + rowa, dxa.to(DX.dtype.element_ty), mask=maska)
                tl.store(DX + (j - j0) * P * D + rowb, dxb.to(DX.dtype.element_ty), mask=maskb)
                tl.store(RALL + j * P + offs_p, rg, mask=pmask)


@triton.jit
def _e_dot(dl, v, r, acc, ROUND: tl.constexpr, SPLIT_DOT: tl.constexpr, R_IN_DL: tl.constexpr):
    """acc + dl @ khat ([BC, BP] x [BP, BK]) for one column tile of `pair_e_kernel`'s dot paths,
    khat = v r (per position), rounded as the readers round their keys (ROUND)."""
    kh = v * r[:, None]  # [BP, BK]
    if ROUND == 1:
        kh = kh.to(tl.bfloat16).to(tl.float32)
    if ROUND == 2:
        kh = kh.to(tl.float16).to(tl.float32)
    # exact fp32: a broadcast multiply-and-sum here is turned into a TF32 dot by Triton's
    # compiler (measured on an H100: dq and dg off by 7e-4), so the dot is explicit
    if SPLIT_DOT:
        if R_IN_DL:  # v is a bf16/fp16 value, exact in TF32; r goes with dl: see pair_e_plan
            return tl.dot(dl * r[None, :], v, acc, input_precision="tf32x3")
        return tl.dot(dl, kh, acc, input_precision="tf32x3")  # kh exact in TF32: see pair_e_plan
    return tl.dot(dl, kh, acc, input_precision="ieee")


@triton.jit
def _e_block(b, hc, dl0, D: tl.constexpr, BLOCK_K: tl.constexpr, K_STEP: tl.constexpr, KB: tl.constexpr,
             BLOCK_KB: tl.constexpr):
    """Column block b of `pair_e_kernel`: its wide tile's columns and mask, its narrow tile's
    (KB > 0), and each reader's dl offset of the head holding it (dl0: the pair's [BC] base)."""
    offs_k = tl.arange(0, BLOCK_K)
    cols = b * K_STEP + offs_k
    colmask = (offs_k < K_STEP - KB) & (cols < D)
    offs_kb = tl.arange(0, BLOCK_KB)
    colsb = b * K_STEP + (K_STEP - KB) + offs_kb
    colmaskb = (offs_kb < KB) & (colsb < D)
    return cols, colmask, colsb, colmaskb, dl0 + (b * K_STEP * hc) // D  # [BC]: the head of call c holding b


@triton.jit
def _e_step(vrow, prow, pm, r, dlp, dlmask, cols, colmask, colsb, colmaskb, acc, accb,
            ROUND: tl.constexpr, SPLIT_DOT: tl.constexpr, R_IN_DL: tl.constexpr, KB: tl.constexpr):
    """One step of BLOCK_P positions of one column block's dot paths: v's tiles and the readers'
    dl loaded, each tile's dot accumulated (acc, accb: the wide and narrow tiles)."""
    v = tl.load(vrow + prow[:, None] + cols[None, :], mask=pm[:, None] & colmask[None, :],
                other=0.0).to(tl.float32)  # [BP, BK]
    dl = tl.load(dlp, mask=dlmask, other=0.0)  # [BC, BP]
    acc = _e_dot(dl, v, r, acc, ROUND, SPLIT_DOT, R_IN_DL)
    if KB > 0:  # the second tile, the same dot
        vb = tl.load(vrow + prow[:, None] + colsb[None, :], mask=pm[:, None] & colmaskb[None, :],
                     other=0.0).to(tl.float32)  # [BP, BKB]
        accb = _e_dot(dl, vb, r, accb, ROUND, SPLIT_DOT, R_IN_DL)
    return acc, accb


@triton.jit
def pair_e_kernel(
    VB, stride_vn,  # rows of the sources named in ITEMS: source j at VB + j * stride_vn
    RALL,  # [cap, P] fp32 r_j
    DALL,  # flat fp32 dl_{c,j} (per call [n_c, P, H_c])
    ITEMS,  # int64 [items, 2]: (source j, first reader call of the block)
    CALL_N, CALL_H, CALL_WOFF, CALL_POFF, CALL_RMODE,  # int64 tables (+ sentinel)
    EPART,  # [splits, pairs, D] fp32: split s's share of E_{c,j} at [s, poff_c + j]
    top1, P, chunk, stride_es,  # positions per split; elements per split of EPART
    D: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
    K_STEP: tl.constexpr,  # columns per block (<= BLOCK_K; the rest of the tile is masked)
    ROUND: tl.constexpr,  # the readers' key rounding when they agree: 0 none, 1 bf16, 2 fp16
    MIXED: tl.constexpr,  # readers round differently: per-reader rounding (no dot)
    SPLIT_DOT: tl.constexpr,  # the dot in three TF32 products (`pair_e_plan`)
    R_IN_DL: tl.constexpr = False,  # SPLIT_DOT with unrounded keys over 16-bit rows: (dl r) . v
    KB: tl.constexpr = 0,  # the block's last KB columns as a second tile (0: one tile)
    BLOCK_KB: tl.constexpr = 1,  # that tile's width (a power of two >= KB)
    HB: tl.constexpr = 1,  # column blocks a program: 1, or 2 (the dot paths only)
):
    """E_{c,j}[cols] = sum_p dl_{c,j,p,head(col)} khat0_{j,p}[cols] for a block of readers c
    over one split of the positions (grid: items x column blocks / HB x splits); K_STEP divides
    every call's head width, so a column block lies in one head of each call.

    HB = 2: one program takes two adjacent column blocks, each its own dot, one after the other
    at every step of positions. A reader's dl of a position is one 32-byte sector holding every
    head: the second block's dl load finds the sector the first brought into L1, so L2 sends each
    sector to half as many programs. The same terms in the same order: each column's sum is the
    HB = 1 program's.

    KB > 0 (`e_tiles`; the dot paths only): the block's K_STEP columns are two exact tiles, the
    first K_STEP - KB (BLOCK_K wide) and the last KB (BLOCK_KB wide), each its own dot with the
    same dl, instead of one tile padded to a power of two (1B: 160 = 128 + 32 columns, where a
    256-wide tile masks 37.5% of the dot's columns). Same terms, each column its own sum."""
    item = tl.program_id(0)
    cb = tl.program_id(1)
    split = tl.program_id(2)
    j = tl.load(ITEMS + 2 * item)
    c0 = tl.load(ITEMS + 2 * item + 1)
    offs_c = c0 + tl.arange(0, BLOCK_C)
    in_range = offs_c < top1
    n_c = tl.load(CALL_N + offs_c, mask=in_range, other=0)
    reads = in_range & (n_c > j)  # [BC]
    hc = tl.load(CALL_H + offs_c, mask=in_range, other=1)
    mode = tl.load(CALL_RMODE + offs_c, mask=in_range, other=0)[:, None, None]  # 0 fp32, 1 bf16, 2 fp16
    dl0 = tl.load(CALL_WOFF + offs_c, mask=in_range, other=0) + j * P * hc  # [BC]
    cols, colmask, colsb, colmaskb, dbase = _e_block(cb * HB, hc, dl0, D, BLOCK_K, K_STEP, KB, BLOCK_KB)
    acc = tl.zeros([BLOCK_C, BLOCK_K], tl.float32)
    accb = tl.zeros([BLOCK_C, BLOCK_KB], tl.float32)
    if HB == 2:
        cols2, colmask2, colsb2, colmaskb2, dbase2 = _e_block(cb * HB + 1, hc, dl0, D, BLOCK_K, K_STEP, KB, BLOCK_KB)
        # an odd count of blocks: the last program's second is none (a tensor: the interpreter's scalars are ints)
        reads2 = reads & (offs_c * 0 + (cb * HB + 1) * K_STEP < D)
        acc2 = tl.zeros([BLOCK_C, BLOCK_K], tl.float32)
        accb2 = tl.zeros([BLOCK_C, BLOCK_KB], tl.float32)
    vrow = VB + j * stride_vn
    p_end = tl.minimum(P, (split + 1) * chunk)
    for p0 in range(split * chunk, p_end, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        pm = offs_p < p_end
        prow = offs_p.to(tl.int64) * D
        r = tl.load(RALL + j * P + offs_p, mask=pm, other=0.0)
        dlstep = offs_p[None, :] * hc[:, None]  # [BC, BP]
        if MIXED:  # [BC, BP, BK]: each reader's own rounding of the key
            v = tl.load(vrow + prow[:, None] + cols[None, :], mask=pm[:, None] & colmask[None, :],
                        other=0.0).to(tl.float32)  # [BP, BK]
            dl = tl.load(DALL + dbase[:, None] + dlstep, mask=reads[:, None] & pm[None, :], other=0.0)  # [BC, BP]
            kh = v * r[:, None]  # [BP, BK]
            kh3 = tl.where(mode == 2, kh.to(tl.float16).to(tl.float32)[None, :, :], kh[None, :, :])
            kh3 = tl.where(mode == 1, kh.to(tl.bfloat16).to(tl.float32)[None, :, :], kh3)
            acc += tl.sum(dl[:, :, None] * kh3, axis=1)
        else:
            acc, accb = _e_step(vrow, prow, pm, r, DALL + dbase[:, None] + dlstep, reads[:, None] & pm[None, :],
                                cols, colmask, colsb, colmaskb, acc, accb, ROUND, SPLIT_DOT, R_IN_DL, KB)
            if HB == 2:  # the next block: its dl sectors are the ones just loaded
                acc2, accb2 = _e_step(vrow, prow, pm, r, DALL + dbase2[:, None] + dlstep,
                                      reads2[:, None] & pm[None, :], cols2, colmask2, colsb2, colmaskb2,
                                      acc2, accb2, ROUND, SPLIT_DOT, R_IN_DL, KB)
    prow = tl.load(CALL_POFF + offs_c, mask=in_range, other=0) + j
    erow = EPART + split.to(tl.int64) * stride_es + prow.to(tl.int64)[:, None] * D
    tl.store(erow + cols[None, :], acc, mask=reads[:, None] & colmask[None, :])
    if KB > 0:
        tl.store(erow + colsb[None, :], accb, mask=reads[:, None] & colmaskb[None, :])
    if HB == 2:
        tl.store(erow + cols2[None, :], acc2, mask=reads2[:, None] & colmask2[None, :])
        if KB > 0:
            tl.store(erow + colsb2[None, :], accb2, mask=reads2[:, None] & colmaskb2[None, :])


@triton.jit
def collect_dqdg_kernel(EPART, QG, CALL_N, CALL_POFF, DQ, DG, splits, stride_es, D: tl.constexpr,
                        BLOCK_D: tl.constexpr):
    """E_c = sum_j sum_s E_{c,j} (j, then the position splits s, ascending); dq_c = g_c * E_c,
    dg_c = q_c * E_c (fp32 [calls, D])."""
    c = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cm = cols < D
    n = tl.load(CALL_N + c)
    prow = tl.load(CALL_POFF + c)
    E = tl.zeros([BLOCK_D], tl.float32)
    for j in range(0, n):
        for sp in range(0, splits):
            E += tl.load(EPART + sp * stride_es + (prow + j) * D + cols, mask=cm, other=0.0)
    q = tl.load(QG + (2 * c) * D + cols, mask=cm, other=0.0)
    g = tl.load(QG + (2 * c + 1) * D + cols, mask=cm, other=0.0)
    tl.store(DQ + c * D + cols, E * g, mask=cm)
    tl.store(DG + c * D + cols, E * q, mask=cm)


def narrow_tile_vec(block_p: int, num_warps: int, hm: int, block_ka: int, block_kb: int,
                    elem_bytes: int) -> int:
    """VEC_B of stack_gather_kernel: the narrow tile's load width that puts as many lanes of a
    warp along a head's columns as the wide tile has, or 0 where its own layout already does
    (or there is no narrow tile).

    Why: head widths like 160 are two column tiles (128 + 32). Triton lays the narrow tile out
    with fewer lanes along a head's columns than the wide one (128-bit loads: 4 lanes cover 32
    bf16 columns, 16 cover 128), so each head's dot product, summed over both tiles, crossed
    between two layouts through shared memory on every reader. Loading the narrow tile in
    narrower vectors (`_tile_cols`, VEC_B) puts each head in the same lanes of both tiles (SASS,
    Triton 3.6, sm_90: one shared-memory round trip per reader left; 157 instead of 204
    registers at d = 1280, H = 8, two warps). The same terms; the narrow tile's columns are
    added in another order than Triton's own layout would add them (within fp32 rounding).

    Triton gives a tile of e elements per thread vectors of v = min(16 / elem_bytes, e) elements
    and min(32, columns / v) lanes along the columns (the rest of the warp along the heads). The
    wide tile [BP, HM, BLOCK_KA] gets l = min(32, BLOCK_KA / v_a) lanes there; the narrow one
    needs BLOCK_KB / l elements per vector for the same l. `elem_bytes`: the narrowest element
    among the rows the gather loads (sources, douts). Checked offline for 16-bit rows (the
    kernel table's bf16 chains and autocast's bf16 buffer). For all-fp32 rows the rule gives 1,
    which changes nothing (the compiler folds the rewrite away): Triton lays fp32 tiles out
    otherwise, and an fp32 chain keeps the compiler's layout."""
    if block_kb <= 1:
        return 0
    widest = 16 // elem_bytes

    def lanes(cols: int) -> int:
        per_thread = max(1, block_p * hm * cols // (32 * num_warps))
        return min(32, max(1, cols // min(widest, per_thread)))

    want = lanes(block_ka)
    if lanes(block_kb) == want:
        return 0
    return min(widest, max(1, block_kb // want))


STACK_GATHER = Launcher(stack_gather_kernel)
PAIR_E = Launcher(pair_e_kernel)
COLLECT_DQDG = Launcher(collect_dqdg_kernel)


def tile_split(KM: int) -> tuple[int, int, int, int]:
    """(KA, BLOCK_KA, KB, BLOCK_KB) of a sub-head of width KM: two exact tiles where that saves
    lanes (160 = 128 + 32; `fwd.head_split`), else one tile padded to a power of two."""
    split = head_split(KM)
    if split is None:
        return KM, next_pow2(KM), 0, 1
    return split[0], split[0], split[1], split[2]


def e_block_k(d: int, max_heads: int) -> int:
    """Narrow column block of `pair_e_kernel` (its per-reader path, where readers round their
    keys differently): the largest power of two (at most 64) dividing the narrowest head width
    d / max_heads, so that a block never straddles a head."""
    km = d // max_heads
    return min(64, km & -km)


# Wide column blocks of pair_e_kernel: one block per narrowest head (its width padded to a power
# of two, masked) up to E_WIDE_MAX columns; wider heads in blocks of the largest power of two
# dividing them, at most E_WIDE_MAX. Each program loads its readers' dl_{c,j} (a [P, H] layout:
# one 32-byte sector per position and reader at H = 8) once per block, so narrow blocks would
# multiply that traffic (at 1B, d/H = 160, 32-column blocks read every dl five times).
E_WIDE_MAX = 256


def e_blocks(d: int, max_heads: int) -> tuple[int, int]:
    """(BLOCK_K, K_STEP) of pair_e_kernel's wide column blocks: the tile width (a power of two)
    and the columns each block covers (K_STEP divides the narrowest head width, so no block
    straddles a head)."""
    km = d // max_heads
    if km <= E_WIDE_MAX:
        return next_pow2(km), km
    bk = min(E_WIDE_MAX, km & -km)
    return bk, bk


def e_tiles(d: int, max_heads: int, cuda: bool) -> tuple[int, int, int, int]:
    """(BLOCK_K, K_STEP, KB, BLOCK_KB) of pair_e_kernel's wide column blocks (`e_blocks`): a block
    of one narrowest head whose width is not a power of two is two exact tiles where that saves
    columns (`fwd.head_split`: 160 = 128 + 32), the first BLOCK_K = K_STEP - KB wide; on a GPU
    only where the second is wide enough for tl.dot (16 columns). Else one tile (KB 0)."""
    block_k, k_step = e_blocks(d, max_heads)
    split = head_split(k_step)  # None where k_step is a power of two (every block of a wide head)
    if split is None or (cuda and split[2] < 16):
        return block_k, k_step, 0, 1
    return split[0], k_step, split[1], split[2]


# Positions per program of pair_e_kernel: each program's loop is serial, so long position
# ranges are split (partials summed in a fixed order by collect_dqdg_kernel).
E_CHUNK = 1024


def e_splits(P: int) -> int:
    return cdiv(P, E_CHUNK)


def pair_e_plan(d: int, max_heads: int, modes: frozenset[int], cuda: bool,
                tables: LaunchTables | None = None, narrow_rows: bool = False) -> tuple[int, dict, int]:
    """(BLOCK_C, constexprs, num_warps) of every pair_e_kernel launch of one backward; BLOCK_C is
    also the reader-block step of its work items (`_StackState._build_items`); `tables`: the
    launch tables (default: the built-in ones, `KernelConfig()`'s).

    tl.dot needs 16 rows, columns and reduction steps on a GPU. Column blocks narrower than 16
    (d/H = 40 at H = 32, d = 1280) and readers that round their keys differently take the
    per-reader path, which Triton does not turn into a dot; its [BLOCK_C, BLOCK_P, BLOCK_K]
    product stays at the default (16, 16) blocks and at the narrow column blocks. Readers that
    agree take the wide column blocks (`e_blocks`).

    SPLIT_DOT: readers whose keys are rounded to bf16 or fp16 (a pure 16-bit chain) form
    E_{c,j} as a dot of fp32 dl with a key that TF32 holds exactly (8 or 10 mantissa bits), so
    Triton's three-product TF32 dot ("tf32x3": dl split into two TF32 parts) is the fp32 dot up
    to dl's bits below 2^-22 and the order of the fp32 sums, on tensor cores instead of FMAs
    (within 2.9e-7 of the IEEE dot on an H100).

    R_IN_DL: readers that do not round their keys (fp32 outputs: autocast's layout) over source
    rows stored in 16 bits (`narrow_rows`: the bf16 buffer) take the same dot with r_j moved from
    the key to dl: E_{c,j} = sum_p (dl_{c,j,p} r_{j,p}) v_{j,p}, v exact in TF32 (the products
    rounded once in another order, about an fp32 ulp each). Unrounded keys over fp32 rows (the
    fp32 embedding, fp32 chains) keep the IEEE dot."""
    if tables is None:
        tables = tables_for(DEFAULT)
    block_c, block_p, num_warps, hb = tables.pair_e_config(d, max_heads)
    block_k, k_step, kb, block_kb = e_tiles(d, max_heads, cuda)
    mixed = len(modes) > 1 or (cuda and block_k < 16)
    if mixed:
        block_c, block_p, num_warps, hb = 16, 16, 4, 1
        block_k = k_step = e_block_k(d, max_heads)
        kb, block_kb = 0, 1
    elif cuda:
        block_c, block_p = max(block_c, 16), max(block_p, 16)
    hb = 2 if hb >= 2 and cdiv(d, k_step) >= 2 else 1  # 1 or 2 column blocks a program
    rnd = 0 if mixed else min(modes)
    r_in_dl = not mixed and rnd == 0 and narrow_rows
    consts = dict(D=d, BLOCK_C=block_c, BLOCK_P=block_p, BLOCK_K=block_k, K_STEP=k_step,
                  ROUND=rnd, MIXED=mixed, SPLIT_DOT=rnd > 0 or r_in_dl, R_IN_DL=r_in_dl, KB=kb, BLOCK_KB=block_kb,
                  HB=hb)
    return block_c, consts, num_warps


def launch_pair_e(rows: Tensor, items: Tensor, nitems: int, rall: Tensor, dall: Tensor,
                  tables: Tensor, epart: Tensor, top1: int, P: int, plan: tuple[int, dict, int]) -> None:
    """E_{c,j} of the sources named in `items` (all in `rows`: the buffer, or row 0 alone);
    epart: [splits, pairs, D]; plan: `pair_e_plan`."""
    if nitems == 0:
        return
    _, consts, num_warps = plan
    stride = rows.stride(0) if rows.dim() == 3 else 0
    splits = epart.shape[0]
    t = tables  # rows: n, H, woff, soff, poff, rounding mode
    PAIR_E((nitems, cdiv(cdiv(consts["D"], consts["K_STEP"]), consts["HB"]), splits),
           (rows, stride, rall, dall, items, t[0], t[1], t[2], t[4], t[5], epart, top1, P,
            cdiv(P, splits), epart.stride(0)), consts, num_warps)


def launch_collect_dqdg(epart: Tensor, qg: Tensor, tables: Tensor, dq: Tensor, dg: Tensor,
                        ncalls: int, D: int) -> None:
    block_d = min(256, next_pow2(D))
    COLLECT_DQDG((ncalls, cdiv(D, block_d)), (epart, qg, tables[0], tables[4], dq, dg, epart.shape[0],
                                              epart.stride(0)),
                 dict(D=D, BLOCK_D=block_d), 4)
