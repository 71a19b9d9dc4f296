"""Shared-stack backward at 4 bytes per pair-element: no call re-reads its sources.

Notation as `route_bwd.py` (call c, source j, per head h of call c; khat0_j = round(v_j r_j)):

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
`collect_reference` is the plain torch reading of the decomposition, used by the tests.
"""

from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from mhar_probe.kernels import launch
from mhar_probe.kernels.launch import Launcher, cdiv, next_pow2
from mhar_probe.kernels.route_bwd import source_grad_split
from mhar_probe.kernels import route_fwd
from mhar_probe.kernels.route_fwd import block_rows, rsqrt_acc


def collect_reference(sources: list[Tensor], calls: list[tuple[int, Tensor, Tensor, int]],
                      weights: list[Tensor], douts: list[Tensor], outs: list[Tensor],
                      residuals: list[Tensor | None], eps: float, round_to: list[torch.dtype | None]
                      ) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """The decomposition above in float64: (dv_j [P, d] per source, dq_c, dg_c per call).

    sources: [P, d] rows; calls: (n, q, g, H) in call order; weights[c]: [n, P, H];
    douts/outs/residuals[c]: [P, d] (residual None: S'_c = 0); round_to[c]: key rounding."""
    f = torch.float64
    P, D = sources[0].shape
    dv = [torch.zeros(P, D, dtype=f) for _ in sources]
    dq, dg = [], []
    for c, (n, q, g, H) in enumerate(calls):
        K = D // H
        do = douts[c].to(f).view(P, H, K)
        shift = (do * outs[c].to(f).view(P, H, K)).sum(-1)  # [P, H]
        s = 0.0 if residuals[c] is None else (do * residuals[c].to(f).view(P, H, K)).sum(-1)
        u = (q.to(f) * g.to(f)).view(H, K)
        E = torch.zeros(H, K, dtype=f)
        for j in range(n):
            v = sources[j].to(f)
            w = weights[c][j].to(f)  # [P, H]
            dl = w * ((do * v.view(P, H, K)).sum(-1) - shift - s)
            r = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
            kh = v * r
            if round_to[c] is not None:
                kh = kh.to(round_to[c]).to(f)
            E += torch.einsum("ph,phk->hk", dl, kh.view(P, H, K))
            dk = (dl[..., None] * u).reshape(P, D)
            dv[j] += r * dk - r.pow(3) / D * (dk * v).sum(-1, keepdim=True) * v \
                + (w[..., None] * do).reshape(P, D)
        dq.append(g.to(f) * E.reshape(D))
        dg.append(q.to(f) * E.reshape(D))
    return dv, dq, dg


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
def _reader_meta(c, j, offs_p, offs_hm, pmask, rd, WALL, SHALL, SALL, CALL_N, CALL_H, CALL_WOFF,
                 CALL_SOFF, P, HM: tl.constexpr, SAME_H: tl.constexpr):
    """What the gather needs of reader call c besides its dout, for source j and a block of
    positions: its head count, the (position, head of c) index, the store mask and offset of
    dl_{c,j}, whether c has more than one source, and w_{c,j}, shift_c, S'_c ([BP, HM] each)."""
    hc, pidx = _reader_index(c, offs_p, offs_hm, CALL_H, HM, SAME_H)
    m2 = pmask[:, None] & rd[None, :]  # [BP, HM]
    wo = tl.load(CALL_WOFF + c) + j * P * hc
    so = tl.load(CALL_SOFF + c)
    multi = tl.load(CALL_N + c) > 1
    wg = tl.load(WALL + wo + pidx, mask=m2, other=0.0)
    sh = tl.load(SHALL + so + pidx, mask=m2, other=0.0)
    sr = tl.load(SALL + so + pidx, mask=m2, other=0.0)
    return hc, pidx, m2, wo, multi, wg, sh, sr


@triton.jit
def _gather_collect(VSRC, j, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                    cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SHALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D: tl.constexpr, HM: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_KA: tl.constexpr, BLOCK_KB: tl.constexpr,
                    PREFETCH: tl.constexpr, META: tl.constexpr, TWO_PASS: tl.constexpr,
                    SAME_H: tl.constexpr, LOADS_FIRST: tl.constexpr = False):
    """dv_j (two tiles) and r_j for one block of positions of source j (its row at VSRC) from
    every stored dout of the calls c >= call that read it; stores dl_{c,j}. PREFETCH keeps the
    next call's dout in flight (more registers per thread, fewer resident warps). META loads the
    next call's table entries, weights, shifts and S' one reader ahead, so that no reader waits
    on the chain table entry -> weight load.

    TWO_PASS splits the loop over readers in two, so that fewer rows of registers are live at
    once: the first pass reads the douts and forms dl_{c,j} and sum_c w_{c,j} dout_c (live: v_j,
    that sum and a dout row); after a block barrier the second reads dl_{c,j} back (this program
    stored them: cache hits, no DRAM traffic to speak of) with q_c * g_c and forms
    a_j = sum_c dl_{c,j} q_c g_c (live: both sums and a q*g row); v_j is then loaded again for
    the final combination. The same terms summed in the same order as in one pass.

    LOADS_FIRST loads the reader's q * g tiles and call-table entry with its dout, before the dl
    store: the compiler may not move a load above a store it cannot prove disjoint, so in
    program order each reader waited on its dout and then, after the store, on q * g (two
    memory round trips per reader instead of one; more registers live across the dot).

    SAME_H (every call of the stack has HM heads, the model's case): each reader's head count is
    the constant HM, so its (position, head) index needs no table load and no division, and the
    per-head sums need no regrouping; the same sums as the general path."""
    vga = tl.load(VSRC + rowa, mask=maska, other=0.0).to(tl.float32)
    vgb = tl.load(VSRC + rowb, mask=maskb, other=0.0).to(tl.float32)
    ss = tl.sum(tl.sum(vga * vga, axis=2), axis=1) + tl.sum(tl.sum(vgb * vgb, axis=2), axis=1)
    rg = rsqrt_acc(ss / D + eps)  # [BP]
    acc_va = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
    acc_vb = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    if not TWO_PASS:
        acc_ka = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
        acc_kb = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    zero_h = tl.zeros([HM], tl.int64)
    rd = (zero_h + tl.load(CALL_N + call)) > j  # [HM]: does call c read source j
    if PREFETCH:
        dna = tl.load(DOUT_BUF + call * stride_dc + rowa, mask=maska & rd[None, :, None], other=0.0)
        dnb = tl.load(DOUT_BUF + call * stride_dc + rowb, mask=maskb & rd[None, :, None], other=0.0)
    if META:
        hn, pn, m2n, won, multin, wgn, shn, srn = _reader_meta(
            call, j, offs_p, offs_hm, pmask, rd, WALL, SHALL, SALL, CALL_N, CALL_H, CALL_WOFF,
            CALL_SOFF, P, HM, SAME_H)
    for c in range(call, top1):
        if META:  # this reader's, loaded one reader ahead
            hc, pidx, m2, wo, multi, wg, sh, sr = hn, pn, m2n, won, multin, wgn, shn, srn
        else:
            m2 = pmask[:, None] & rd[None, :]  # [BP, HM]
        if PREFETCH:
            doga = dna.to(tl.float32)
            dogb = dnb.to(tl.float32)
            rd = (zero_h + tl.load(CALL_N + c + 1)) > j  # the next call's (sentinel after the last)
            dna = tl.load(DOUT_BUF + (c + 1) * stride_dc + rowa, mask=maska & rd[None, :, None], other=0.0)
            dnb = tl.load(DOUT_BUF + (c + 1) * stride_dc + rowb, mask=maskb & rd[None, :, None], other=0.0)
        else:
            doga = tl.load(DOUT_BUF + c * stride_dc + rowa, mask=maska & rd[None, :, None],
                           other=0.0).to(tl.float32)
            dogb = tl.load(DOUT_BUF + c * stride_dc + rowb, mask=maskb & rd[None, :, None],
                           other=0.0).to(tl.float32)
            rd = (zero_h + tl.load(CALL_N + c + 1)) > j
        if LOADS_FIRST and not TWO_PASS:  # before the dl store below, which they may not pass
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
            if not META:
                nc = tl.load(CALL_N + c)
        if META:  # the next reader's (the tables' sentinel entry after the last: all masked)
            hn, pn, m2n, won, multin, wgn, shn, srn = _reader_meta(
                c + 1, j, offs_p, offs_hm, pmask, rd, WALL, SHALL, SALL, CALL_N, CALL_H, CALL_WOFF,
                CALL_SOFF, P, HM, SAME_H)
        else:  # the same loads as `_reader_meta`, in the order the GPU-tested default compiles to
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
        if META:
            dl = tl.where(multi, dl, 0.0)
        elif LOADS_FIRST and not TWO_PASS:
            dl = tl.where((zero_h + nc)[None, :] > 1, dl, 0.0)
        else:
            dl = tl.where((zero_h + tl.load(CALL_N + c))[None, :] > 1, dl, 0.0)
        tl.store(DALL + wo + pidx, dl, mask=m2)
        if not TWO_PASS and not LOADS_FIRST:
            # q*g of call c as [1, HM, BK] tiles: loaded in the row tiles' layout (a 2-D load would
            # be converted through shared memory, with a block barrier, on every reader)
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
        acc_va += wg[:, :, None] * doga
        acc_vb += wg[:, :, None] * dogb
        if not TWO_PASS:  # (the second pass forms these)
            acc_ka += dl[:, :, None] * ua
            acc_kb += dl[:, :, None] * ub
    if TWO_PASS:
        tl.debug_barrier()  # the dl stores above, read back below by other threads of the block
        acc_ka = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
        acc_kb = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
        for c in range(call, top1):
            rdc = (zero_h + tl.load(CALL_N + c)) > j  # [HM]
            m2 = pmask[:, None] & rdc[None, :]
            hc, pidx = _reader_index(c, offs_p, offs_hm, CALL_H, HM, SAME_H)
            wo = tl.load(CALL_WOFF + c) + j * P * hc
            dl = tl.load(DALL + wo + pidx, mask=m2, other=0.0)
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
            acc_ka += dl[:, :, None] * ua
            acc_kb += dl[:, :, None] * ub
        vga = tl.load(VSRC + rowa, mask=maska, other=0.0).to(tl.float32)
        vgb = tl.load(VSRC + rowb, mask=maskb, other=0.0).to(tl.float32)
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
    D: tl.constexpr, H: tl.constexpr, HM: tl.constexpr, KM: tl.constexpr, KA: tl.constexpr,
    BLOCK_KA: tl.constexpr, KB: tl.constexpr, BLOCK_KB: tl.constexpr, BLOCK_P: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_GATHER: tl.constexpr, GATHER0: tl.constexpr,
    PREFETCH: tl.constexpr, META: tl.constexpr, TWO_PASS: tl.constexpr, SAME_H: tl.constexpr,
    VEC_B: tl.constexpr = 0, LOADS_FIRST: tl.constexpr = False,
):
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
        tl.store(DOUT_BUF + call * stride_dc + rowa, doa_raw.to(DOUT_BUF.dtype.element_ty), mask=maska)
        tl.store(DOUT_BUF + call * stride_dc + rowb, dob_raw.to(DOUT_BUF.dtype.element_ty), mask=maskb)
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
                    META, TWO_PASS, SAME_H, LOADS_FIRST)
                tl.store(DX + rowa, dxa.to(DX.dtype.element_ty), mask=maska)
                tl.store(DX + rowb, dxb.to(DX.dtype.element_ty), mask=maskb)
                tl.store(RALL + offs_p, rg, mask=pmask)
                jlo = j0 + 1
            for j in range(jlo, j1):
                dxa, dxb, rg = _gather_collect(
                    V + j * stride_vn, j, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                    cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SHALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, BLOCK_KA, BLOCK_KB, PREFETCH,
                    META, TWO_PASS, SAME_H, LOADS_FIRST)
                tl.store(DX + (j - j0) * P * D + rowa, dxa.to(DX.dtype.element_ty), mask=maska)
                tl.store(DX + (j - j0) * P * D + rowb, dxb.to(DX.dtype.element_ty), mask=maskb)
                tl.store(RALL + j * P + offs_p, rg, mask=pmask)


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
    SPLIT_DOT: tl.constexpr,  # rounded keys: the dot in three TF32 products (`E_SPLIT_DOT`)
):
    """E_{c,j}[cols] = sum_p dl_{c,j,p,head(col)} khat0_{j,p}[cols] for a block of readers c
    over one split of the positions (grid: items x column blocks x splits); K_STEP divides
    every call's head width, so a column block lies in one head of each call."""
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
    offs_k = tl.arange(0, BLOCK_K)
    cols = cb * K_STEP + offs_k
    colmask = (offs_k < K_STEP) & (cols < D)
    head = (cb * K_STEP * hc) // D  # [BC]: the head of call c holding this column block
    dbase = tl.load(CALL_WOFF + offs_c, mask=in_range, other=0) + j * P * hc + head  # [BC]
    acc = tl.zeros([BLOCK_C, BLOCK_K], tl.float32)
    vrow = VB + j * stride_vn
    p_end = tl.minimum(P, (split + 1) * chunk)
    for p0 in range(split * chunk, p_end, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        pm = offs_p < p_end
        v = tl.load(vrow + offs_p.to(tl.int64)[:, None] * D + cols[None, :],
                    mask=pm[:, None] & colmask[None, :], other=0.0).to(tl.float32)  # [BP, BK]
        r = tl.load(RALL + j * P + offs_p, mask=pm, other=0.0)
        kh = v * r[:, None]  # [BP, BK]
        dl = tl.load(DALL + dbase[:, None] + offs_p[None, :] * hc[:, None],
                     mask=reads[:, None] & pm[None, :], other=0.0)  # [BC, BP]
        if MIXED:  # [BC, BP, BK]: each reader's own rounding of the key
            kh3 = tl.where(mode == 2, kh.to(tl.float16).to(tl.float32)[None, :, :], kh[None, :, :])
            kh3 = tl.where(mode == 1, kh.to(tl.bfloat16).to(tl.float32)[None, :, :], kh3)
            acc += tl.sum(dl[:, :, None] * kh3, axis=1)
        else:
            if ROUND == 1:
                kh = kh.to(tl.bfloat16).to(tl.float32)
            if ROUND == 2:
                kh = kh.to(tl.float16).to(tl.float32)
            # exact fp32: a broadcast multiply-and-sum here is turned into a TF32 dot by Triton's
            # compiler (measured on an H100: dq and dg off by 7e-4), so the dot is explicit
            if SPLIT_DOT:  # kh is a bf16/fp16 value, exact in TF32: see E_SPLIT_DOT
                acc = tl.dot(dl, kh, acc, input_precision="tf32x3")
            else:
                acc = tl.dot(dl, kh, acc, input_precision="ieee")
    prow = tl.load(CALL_POFF + offs_c, mask=in_range, other=0) + j
    tl.store(EPART + split.to(tl.int64) * stride_es + prow.to(tl.int64)[:, None] * D + cols[None, :], acc,
             mask=reads[:, None] & colmask[None, :])


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


# Launch configs of stack_gather_kernel: (BLOCK_P, num_warps, prefetch[, maxnreg]) per (d, H, HM).
# Measured on an H100 (`mhar bench routing --sweep 100M-train,350M-train,1B-train --sweep-kernels
# gather --dtype mixed --heads 8`, 56d8861:benchmarks/kernels/h100_2026-11-23e/sweep_gather.*; gather time
# per training microbatch): one warp per position block is fastest at d = 1024 and 1280 (9.4 and
# 15.3 ms, against 13.9 and 19.7 ms with the four warps chosen offline before), although at 1B it
# needs ~255 registers and spills a little (benchmarks/kernels/regs_offline.py): one warp keeps
# every per-head reduction and the [P, H] dl store inside the warp, with no block barrier per
# reader. At d = 512 two warps without the dout prefetch are best (6.87 ms; one warp 7.26). Wider
# rows (unmeasured) keep one warp per 256 columns, which compiles without spills. The grid is
# one program per position block (no per-program partials here, so no persistent grid).
# Two-pass entries (seventh session of 2026-11-23, 56d8861:benchmarks/kernels/h100_2026-11-23g/run1_twopass/
# sweep_gather_h8.*,
# same sweep, gather ms per training microbatch): d = 512 two warps 6.88 -> 6.48 with two passes;
# d = 1280 one warp with the dout prefetch 15.31 -> two warps, two passes 14.68 (one pass with
# two warps: 19.44). d = 1024 stays on one warp, one pass (9.44; every two-pass config 10.8-12.2).
# Register caps on top of two passes spilled little offline but lost on the GPU (1B: 16.8-19.1).
# Ninth session (2026-11-24, 56d8861:benchmarks/kernels/h100_2026-11-24/run1_typed, run2_sameh; gather ms per
# microbatch):
# with the constant-H path (autograd.SAME_H) the best configs moved. Training microbatches
# (autocast, fp32 douts): d = 512 two warps with the dout prefetch, one pass (5.66; the two-pass
# entry 6.09); d = 1024 unchanged (1, 1, True) 9.28; d = 1280 one warp, one pass, no prefetch
# (14.39; two-pass two warps 16.55). Pure bf16 chains (the kernel-table shapes; entries keyed
# by 2-byte douts): d = 512 one warp with the prefetch (1.06; the autocast entry 1.33), d = 1024
# two warps with the prefetch (1.76; 1.83), and at H = 1 d = 512 one warp with the prefetch
# (1.00; the heuristic's 1.10, swept on the general path).
# Eleventh session (2026-11-24, 56d8861:benchmarks/kernels/h100_2026-11-24c/run4_loadsfirst; gather ms per
# microbatch, the
# earlier entry first): with each reader's q*g loads issued with its dout (sixth entry,
# LOADS_FIRST) and the 1B tiles aligned (ALIGN_TILES), training microbatches: d = 512 one warp,
# no prefetch 5.68 -> 5.02, d = 1024 the same 9.27 -> 8.71, d = 1280 two warps 14.47 -> 13.70;
# pure bf16 d = 1280 one warp with the prefetch 5.03 -> 4.30. The bf16 entries at d = 512 and
# 1024 keep their configs (loads first there: 1.09-1.13 against 1.06, 1.76 against 1.76). At
# H = 1 in bf16 (run8_loadsfirst_h1; the heuristic's one warp with the prefetch before):
# d = 512 one warp 0.97 -> 0.87, d = 1024 two warps with the prefetch 1.73 -> 1.40, d = 1280
# one warp with the prefetch 4.06 -> 3.53.
GATHER_CONFIG: dict[tuple[int, ...], tuple] = {
    (512, 8, 8): (1, 2, True), (1280, 8, 8): (1, 1, False),
    (512, 8, 8, 2): (1, 1, True), (1024, 8, 8, 2): (1, 2, True),
    (512, 8, 8, 4): (1, 1, False, 0, False, True), (1024, 8, 8, 4): (1, 1, False, 0, False, True),
    (1280, 8, 8, 4): (1, 2, False, 0, False, True), (1280, 8, 8, 2): (1, 1, True, 0, False, True),
    (512, 1, 1, 2): (1, 1, False, 0, False, True), (1024, 1, 1, 2): (1, 2, True, 0, False, True),
    (1280, 1, 1, 2): (1, 1, True, 0, False, True)}
if os.environ.get("MHAR_KERNEL_CONFIG"):  # tuned by `mhar bench routing --sweep` (JSON file)
    _tuned = json.load(open(os.environ["MHAR_KERNEL_CONFIG"]))
    for d_, h_, hm_, *cfg_ in _tuned.get("gather", []):
        GATHER_CONFIG[(d_, h_, hm_)] = tuple(cfg_)
    for d_, h_, hm_, b_, *cfg_ in _tuned.get("gather_by_dtype", []):
        GATHER_CONFIG[(d_, h_, hm_, b_)] = tuple(cfg_)


def gather_config(d: int, num_heads: int, max_heads: int, dout_bytes: int = 0
                  ) -> tuple[int, int, bool, int | None, bool] | tuple[int, int, bool, int | None, bool, bool]:
    """(BLOCK_P, num_warps, prefetch, maxnreg, two_pass[, loads_first]) of stack_gather_kernel; a
    table entry may leave out the last three (no register cap, one pass, the loads in program
    order; LOADS_FIRST in `_gather_collect`). An entry (d, H, HM, dout_bytes)
    (the stored douts' bytes per element: 2 in a pure 16-bit chain, 4 under autocast) wins over
    the generic (d, H, HM) one while `launch.DTYPE_CONFIGS` is on."""
    hit = GATHER_CONFIG.get((d, num_heads, max_heads, dout_bytes)) if launch.DTYPE_CONFIGS else None
    if hit is None:
        hit = GATHER_CONFIG.get((d, num_heads, max_heads))
    if hit is not None:
        return (hit[0], hit[1], bool(hit[2]), (hit[3] or None) if len(hit) > 3 else None,
                bool(hit[4]) if len(hit) > 4 else False, bool(hit[5]) if len(hit) > 5 else False)
    return gather_config_heuristic(d)


def gather_config_heuristic(d: int) -> tuple[int, int, bool, int | None, bool]:
    """The gather's launch config where the table has no entry (also every shape's config before
    the two-pass entries: the benchmark's `triton-gatherprev` variant)."""
    if d < 1024:
        return 1, 2, False, None, False
    if d <= 1280:
        return 1, 1, True, None, False
    warps = 1 << max(0, (d // 256).bit_length() - 1)  # 2048 -> 8, 4096 -> 16 (capped at 8)
    return 1, min(warps, 8), True, None, False


# MHAR_GATHER_META_PREFETCH=1: the gather loads each reader's table entries, weights, shifts and
# S' one reader ahead (the chain table entry -> weight load is otherwise exposed per reader). Off
# by default: on an H100 it changed the gather's device time per microbatch by -13% to +15% with
# no rule that fits every shape (it costs registers: 100M two-warp 72 -> 120 per thread).
# Training microbatches (fp32 douts), H=8, ms: 100M 6.75 -> 7.77, 350M 9.44 -> 10.77, 1B 15.19 ->
# 14.13; kernel-table shapes (bf16): 100M 1.10 -> 1.27 (H=1), 350M 1.77 -> 1.52 (H=1), 1B 4.17
# -> 3.54 (H=1) but 5.72 -> ~6.8 (H=8, across two calls).
# `56d8861:benchmarks/kernels/h100_2026-11-23f/run6_gathermeta/`;
# the benchmark variant `triton-meta` times it against the default in one process.
META_PREFETCH = os.environ.get("MHAR_GATHER_META_PREFETCH", "0") == "1"
# The gather's loop over readers in two passes (`_gather_collect`): fewer rows of registers live
# at once, for one more pass over cached scalars and q*g rows. Register caps on top of it spill
# little but lost on an H100; what it bought there was the two-warp config at d = 512 and 1280,
# until the constant-H path (SAME_H) needed fewer registers and one-pass configs won again
# (ninth session; no built-in GATHER_CONFIG entry turns it on). Chosen per shape by the
# config's last entry; MHAR_GATHER_TWO_PASS=0 or 1 forces it off or on everywhere (None: as the
# config says).
_TWO_PASS_ENV = os.environ.get("MHAR_GATHER_TWO_PASS", "")
TWO_PASS: bool | None = None if _TWO_PASS_ENV == "" else _TWO_PASS_ENV == "1"
# Head widths like 160 are two column tiles (128 + 32). Triton lays the narrow tile out with
# fewer lanes along a head's columns than the wide one (128-bit loads: 4 lanes cover 32 bf16
# columns, 16 cover 128), so each head's dot product, summed over both tiles, crossed between
# two layouts through shared memory on every reader: a store, a block barrier and a load in
# the loop (SASS, Triton 3.6, sm_90). ALIGN_TILES loads the narrow tile in narrower vectors so
# that both tiles put each head in the same lanes (`narrow_tile_vec`): offline at d = 1280,
# H = 8 the loop keeps one of its two shared-memory round trips (the store of dl), and the
# two-warp config needs 157 instead of 204 registers. The sums are the same terms; the narrow
# tile's columns are added in another order, so results agree within fp32 rounding, not
# bitwise. MHAR_GATHER_ALIGN_TILES=0 (or the benchmark's `triton-unaligned` variant) keeps
# the compiler's own layouts.
ALIGN_TILES = os.environ.get("MHAR_GATHER_ALIGN_TILES", "1") != "0"


def narrow_tile_vec(block_p: int, num_warps: int, hm: int, block_ka: int, block_kb: int,
                    elem_bytes: int) -> int:
    """VEC_B of stack_gather_kernel: the narrow tile's load width that puts as many lanes of a
    warp along a head's columns as the wide tile has, or 0 where its own layout already does
    (or there is no narrow tile, or ALIGN_TILES is off).

    Triton gives a tile of e elements per thread vectors of v = min(16 / elem_bytes, e) elements
    and min(32, columns / v) lanes along the columns (the rest of the warp along the heads). The
    wide tile [BP, HM, BLOCK_KA] gets l = min(32, BLOCK_KA / v_a) lanes there; the narrow one
    needs BLOCK_KB / l elements per vector for the same l. `elem_bytes`: the narrowest element
    among the rows the gather loads (sources, douts). Checked offline for 16-bit rows (the
    kernel table's bf16 chains and autocast's bf16 buffer). For all-fp32 rows the rule gives 1,
    which changes nothing (the compiler folds the rewrite away): Triton lays fp32 tiles out
    otherwise, and an fp32 chain keeps the compiler's layout."""
    if not ALIGN_TILES or block_kb <= 1:
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
    lanes (160 = 128 + 32), else one tile padded to a power of two (the forward's switch
    `route_fwd.SPLIT_HEADS` applies here too)."""
    split = route_fwd.head_split(KM) if route_fwd.SPLIT_HEADS else None
    if split is None:
        return KM, next_pow2(KM), 0, 1
    return split[0], split[0], split[1], split[2]


def e_block_k(d: int, max_heads: int) -> int:
    """Narrow column block of `pair_e_kernel` (the per-reader path, and every path with
    `E_WIDE` off): the largest power of two (at most 64) dividing the narrowest head width
    d / max_heads, so that a block never straddles a head."""
    km = d // max_heads
    return min(64, km & -km)


# Wide column blocks of pair_e_kernel: one block per narrowest head (its width padded to a power
# of two, masked) up to E_WIDE_MAX columns; wider heads in blocks of the largest power of two
# dividing them, at most E_WIDE_MAX. Each program loads its readers' dl_{c,j} (a [P, H] layout:
# one 32-byte sector per position and reader at H = 8) once per block, so narrow blocks multiply
# that traffic: at 1B (d/H = 160) the narrow rule's 32-column blocks read every dl five times.
# MHAR_PAIR_E_WIDE=0 keeps the narrow blocks (the benchmark's `triton-enarrow` variant).
E_WIDE = os.environ.get("MHAR_PAIR_E_WIDE", "1") != "0"
E_WIDE_MAX = 256


def e_blocks(d: int, max_heads: int, wide: bool) -> tuple[int, int]:
    """(BLOCK_K, K_STEP) of pair_e_kernel: the tile width (a power of two) and the columns each
    block covers (K_STEP divides the narrowest head width, so no block straddles a head)."""
    km = d // max_heads
    if not wide:
        bk = e_block_k(d, max_heads)
        return bk, bk
    if km <= E_WIDE_MAX:
        return next_pow2(km), km
    bk = min(E_WIDE_MAX, km & -km)
    return bk, bk


# Readers whose keys are rounded to bf16 or fp16 (a pure 16-bit chain) form E_{c,j} as a dot of
# fp32 dl with a key that TF32 holds exactly (8 or 10 mantissa bits), so Triton's three-product
# TF32 dot ("tf32x3": dl split into two TF32 parts, hi * k + lo * k + hi * 0) is the fp32 dot up
# to dl's bits below 2^-22 and the order of the fp32 sums, on tensor cores instead of FMAs
# (offline, sm_90, d = 1280: 834 -> 615 instructions per step, 255 -> 188 registers).
# Unrounded fp32 keys (autocast's layout, fp32 stacks) keep the IEEE dot. MHAR_PAIR_E_SPLIT_DOT=0
# (or the benchmark's `triton-eieee` variant) uses the IEEE dot everywhere.
E_SPLIT_DOT = os.environ.get("MHAR_PAIR_E_SPLIT_DOT", "1") != "0"

# Positions per program of pair_e_kernel: each program's loop is serial, so long position
# ranges are split (partials summed in a fixed order by collect_dqdg_kernel).
E_CHUNK = 1024


def e_splits(P: int) -> int:
    return cdiv(P, E_CHUNK)


# Launch configs of pair_e_kernel: (BLOCK_C readers per program, BLOCK_P positions per dot step,
# num_warps) per (d, max heads). The default (16, 16, 4) reads each source row once per block of
# 16 readers; it was the fastest swept config at the three training shapes on an H100, with the
# narrow column blocks (sixth session) and again with the wide ones (seventh: 1.33 ms of 25.0 ms
# routing GPU time at 1B; eight warps 21-24% slower). `mhar bench routing --sweep ...
# --sweep-kernels pair_e` times the alternatives.
PAIR_E_CONFIG: dict[tuple[int, int], tuple[int, int, int]] = {}
if os.environ.get("MHAR_KERNEL_CONFIG"):
    for d_, hm_, *cfg_ in json.load(open(os.environ["MHAR_KERNEL_CONFIG"])).get("pair_e", []):
        PAIR_E_CONFIG[(d_, hm_)] = tuple(cfg_)


def pair_e_config(d: int, max_heads: int) -> tuple[int, int, int]:
    """(BLOCK_C, BLOCK_P, num_warps) of pair_e_kernel."""
    hit = PAIR_E_CONFIG.get((d, max_heads))
    return (hit[0], hit[1], hit[2]) if hit is not None else (16, 16, 4)


def pair_e_plan(d: int, max_heads: int, modes: frozenset[int], cuda: bool) -> tuple[int, dict, int]:
    """(BLOCK_C, constexprs, num_warps) of every pair_e_kernel launch of one backward; BLOCK_C is
    also the reader-block step of its work items (`_StackState._build_items`).

    tl.dot needs 16 rows, columns and reduction steps on a GPU. Column blocks narrower than 16
    (d/H = 40 at H = 32, d = 1280) and readers that round their keys differently take the
    per-reader path, which Triton does not turn into a dot; its [BLOCK_C, BLOCK_P, BLOCK_K]
    product stays at the default (16, 16) blocks and at the narrow column blocks. Readers that
    agree take the wide column blocks (`e_blocks`) unless `E_WIDE` is off."""
    block_c, block_p, num_warps = pair_e_config(d, max_heads)
    block_k, k_step = e_blocks(d, max_heads, E_WIDE and len(modes) == 1)
    mixed = len(modes) > 1 or (cuda and block_k < 16)
    if mixed:
        block_c, block_p, num_warps = 16, 16, 4
        block_k = k_step = e_block_k(d, max_heads)
    elif cuda:
        block_c, block_p = max(block_c, 16), max(block_p, 16)
    rnd = 0 if mixed else min(modes)
    consts = dict(D=d, BLOCK_C=block_c, BLOCK_P=block_p, BLOCK_K=block_k, K_STEP=k_step,
                  ROUND=rnd, MIXED=mixed, SPLIT_DOT=E_SPLIT_DOT and rnd > 0)
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
    PAIR_E((nitems, cdiv(consts["D"], consts["K_STEP"]), splits),
           (rows, stride, rall, dall, items, t[0], t[1], t[2], t[4], t[5], epart, top1, P,
            cdiv(P, splits), epart.stride(0)), consts, num_warps)


def launch_collect_dqdg(epart: Tensor, qg: Tensor, tables: Tensor, dq: Tensor, dg: Tensor,
                        ncalls: int, D: int) -> None:
    block_d = min(256, next_pow2(D))
    COLLECT_DQDG((ncalls, cdiv(D, block_d)), (epart, qg, tables[0], tables[4], dq, dg, epart.shape[0],
                                              epart.stride(0)),
                 dict(D=D, BLOCK_D=block_d), 4)
