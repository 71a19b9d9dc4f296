"""The fold-block backward of the shared stack: each stored dout read about once per block of
calls instead of once per (call, source) pair.

Notation of `bwd_collect.py` (call c, source j, u_c = q_c * g_c, khat0_j = round(v_j r_j)).
Source j's gradient is a sum over its readers c of terms linear in (dout_c, dl_{c,j}):

    dv_j    = sum_c T_{c,j}
    T_{c,j} = w_{c,j} dout_c + r_j a_{c,j} - (r_j^3/d) <a_{c,j}, v_j> v_j,   a_{c,j} = dl_{c,j} u_c
    dl_{c,j} = w_{c,j} (<dout_c, v_j> - shift_c - S'_c)

so it may be summed over blocks of readers: G_{[a, b), j} = sum_{a <= c < b} T_{c,j} is what
`_gather_collect` forms over the readers [a, b) (storing their dl_{c,j} on the way).

Autograd runs the calls' nodes from the top call down. The fold frontier F starts at top + 1;
every call >= F is folded: ACC_j = sum_{c >= F} T_{c,j} for every source j not yet gathered.
At call c's node:

  1. `stack_gather_kernel` (FOLD): call c's part (its dout into slot F - 1 - c, shift_c, S'_c),
     then, for the sources j in [j0_c, j1_c) it reads first,
         dx_j = ACC_j + G_{[c, F), j}          (ACC_j only once a fold has happened)
  2. once F - c = Cb (the block size, `KernelConfig.fold_calls`) and sources are left to gather
     (j0_c > 0): `stack_fold_kernel` folds the block [c, F) into every source j < j0_c,
         ACC_j = G_{[c, F), j}  (the first fold)   or   ACC_j + G_{[c, F), j};   F = c.

One program per position block: per source j it reads v_j once, ACC_j once and writes it once,
and the block's Cb douts, whose re-reads for the next source of the same positions come from
cache. `stack_fold_held_kernel` (a fold row with `sources` 0) turns the loops over: one program
per position holds the block's douts in registers, read once, and loops over the sources. Only
the unfolded calls' douts are ever read again, so the douts live in Cb slots (call c's in slot
F - 1 - c: linear in c, addressed with a negative stride, no index arithmetic),
and the accumulators ([j0, P, d] fp32 at the first fold) take the memory the per-call dout
buffer of the gather backward took. Every dl_{c,j} is stored exactly once (by the fold or
the gather that sums T_{c,j}), so `pair_e_kernel` and `collect_dqdg_kernel` are unchanged.
The blocks' sums are added in a fixed order: bitwise repeatable (no atomics).

Bytes (`backward_plan`, `plan_bytes`): at the model's stacks (25 / 49 / 73 calls, call c reading
sources [0, c]) the gather backward reads each dout once per pair; here each dout is read by one
fold and by the gathers of at most Cb nodes. `naive.fold_reference` is the float64 reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import triton
import triton.language as tl

from mhar_probe.kernels.launch import Launcher
from mhar_probe.kernels.route.bwd import source_grad_split
from mhar_probe.kernels.route.bwd_collect import (
    _gather_collect, _head_sum, _reader_index, _tile_cols,
)
from mhar_probe.kernels.route.fwd import block_rows, rsqrt_acc


@triton.jit
def _fold_source(VSRC, V0, j, live, rowa, rowb, maska, maskb, eps, D: tl.constexpr, PICK0: tl.constexpr):
    """Source j's two row tiles (fp32) and r_j for one position block; `live` masks the source
    off (the second source of an odd last pair). PICK0: source 0 is read at V0 (`_gather_collect`)."""
    la = maska & ((rowa * 0 + live) != 0)
    lb = maskb & ((rowb * 0 + live) != 0)
    if PICK0:
        is0a = (rowa * 0 + j) == 0
        is0b = (rowb * 0 + j) == 0
        vga = tl.where(is0a, tl.load(V0 + rowa, mask=la & is0a, other=0.0).to(tl.float32),
                       tl.load(VSRC + rowa, mask=la & ~is0a, other=0.0).to(tl.float32))
        vgb = tl.where(is0b, tl.load(V0 + rowb, mask=lb & is0b, other=0.0).to(tl.float32),
                       tl.load(VSRC + rowb, mask=lb & ~is0b, other=0.0).to(tl.float32))
    else:
        vga = tl.load(VSRC + rowa, mask=la, other=0.0).to(tl.float32)
        vgb = tl.load(VSRC + rowb, mask=lb, other=0.0).to(tl.float32)
    ss = tl.sum(tl.sum(vga * vga, axis=2), axis=1) + tl.sum(tl.sum(vgb * vgb, axis=2), axis=1)
    return vga, vgb, rsqrt_acc(ss / D + eps)


@triton.jit
def _fold_offsets(c, j, offs_p, offs_hm, CALL_H, CALL_WOFF, CALL_SOFF, P, HM: tl.constexpr,
                  SAME_H: tl.constexpr):
    """Reader c's head count, the offsets of w_{c,j} / dl_{c,j} and of shift_c / S'_c, and the
    (position, head of c) index [BP, HM] of its per-head rows (`_reader_index`)."""
    hc, pidx = _reader_index(c, offs_p, offs_hm, CALL_H, HM, SAME_H)
    return hc, tl.load(CALL_WOFF + c) + j * P * hc, tl.load(CALL_SOFF + c), pidx


@triton.jit
def _fold_meta(c, j, rd1, rd2, offs_p, offs_hm, pmask, WALL, SHALL, SALL, CALL_H, CALL_WOFF,
               CALL_SOFF, P, HM: tl.constexpr, SAME_H: tl.constexpr, TWO: tl.constexpr):
    """Reader c's per-head rows [BP, HM] for sources j (and j + 1 where TWO): w_{c,j}
    (w_{c,j+1}), shift_c, S'_c; 0 where the reader does not read the source (rd1, rd2 [HM])."""
    hc, wo, so, pidx = _fold_offsets(c, j, offs_p, offs_hm, CALL_H, CALL_WOFF, CALL_SOFF, P, HM, SAME_H)
    m1 = pmask[:, None] & rd1[None, :]
    mr = m1
    wg1 = tl.load(WALL + wo + pidx, mask=m1, other=0.0)
    wg2 = wg1
    if TWO:
        m2 = pmask[:, None] & rd2[None, :]
        mr = m1 | m2
        wg2 = tl.load(WALL + wo + P * hc + pidx, mask=m2, other=0.0)
    sh = tl.load(SHALL + so + pidx, mask=mr, other=0.0)
    sr = tl.load(SALL + so + pidx, mask=mr, other=0.0)
    return wg1, wg2, sh, sr


@triton.jit
def _fold_collect(VSRC, stride_vn, j, live2, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                  cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, dbase, WALL, DALL, SHALL, SALL, U, CALL_N,
                  CALL_H, CALL_WOFF, CALL_SOFF, P, eps, V0, D: tl.constexpr, HM: tl.constexpr,
                  BLOCK_P: tl.constexpr, BLOCK_KA: tl.constexpr, BLOCK_KB: tl.constexpr,
                  PREFETCH: tl.constexpr, SAME_H: tl.constexpr, LOADS_FIRST: tl.constexpr,
                  TWO: tl.constexpr, DENSE: tl.constexpr = False):
    """`_gather_collect` over the fold's readers [call, top1) for source j (its row at VSRC) and,
    where TWO, source j + 1 (at VSRC + stride_vn; live2: whether it is one of the fold's sources) in the same reader loop: each reader's
    dout_c (and q_c g_c, shift_c, S'_c) loaded once for both, two independent reduction chains
    per reader. Source j's terms are summed as `_gather_collect` sums them (the same order per
    source). PREFETCH 1: the next reader's dout is loaded one iteration ahead; 2: its w (both
    sources), shift and S' as well (all written by earlier launches, so no store of this loop
    precedes them). Returns (dv_j tiles, dv_{j+1} tiles; the latter dv_j's where not TWO)."""
    va1, vb1, r1 = _fold_source(VSRC, V0, j, 1, rowa, rowb, maska, maskb, eps, D, True)
    va2, vb2, r2 = va1, vb1, r1
    if TWO:
        va2, vb2, r2 = _fold_source(VSRC + stride_vn, V0, j + 1, live2, rowa, rowb, maska, maskb, eps, D, False)
    acc_va1 = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
    acc_vb1 = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    acc_ka1 = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
    acc_kb1 = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    if TWO:
        acc_va2 = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
        acc_vb2 = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
        acc_ka2 = tl.zeros([BLOCK_P, HM, BLOCK_KA], tl.float32)
        acc_kb2 = tl.zeros([BLOCK_P, HM, BLOCK_KB], tl.float32)
    zero_h = tl.zeros([HM], tl.int64)
    if DENSE:  # every reader reads every source of the fold (the kernel's docstring)
        rd1 = tl.full([HM], 1, tl.int1)
        rd2 = (zero_h + live2) != 0
    else:
        ncur = zero_h + tl.load(CALL_N + call)
        rd1 = ncur > j  # [HM]: does the reader read source j (j + 1)
        rd2 = (ncur > j + 1) & ((zero_h + live2) != 0)
    if PREFETCH >= 1:
        dslot = dbase + call * stride_dc
        rdd = rd1 | rd2
        dna = tl.load(DOUT_BUF + dslot + rowa, mask=maska & rdd[None, :, None], other=0.0)
        dnb = tl.load(DOUT_BUF + dslot + rowb, mask=maskb & rdd[None, :, None], other=0.0)
    if PREFETCH == 2:
        wn1, wn2, shn, srn = _fold_meta(call, j, rd1, rd2, offs_p, offs_hm, pmask, WALL, SHALL, SALL,
                                        CALL_H, CALL_WOFF, CALL_SOFF, P, HM, SAME_H, TWO)
    for c in range(call, top1):
        cur1 = rd1  # this reader's; rd1, rd2 move on to the next reader below
        cur2 = rd2
        m1 = pmask[:, None] & cur1[None, :]  # [BP, HM]
        m2 = pmask[:, None] & cur2[None, :]
        if PREFETCH >= 1:
            doga = dna.to(tl.float32)
            dogb = dnb.to(tl.float32)
            if PREFETCH == 2:
                wg1 = wn1
                wg2 = wn2
                sh = shn
                sr = srn
            ok = (zero_h + c + 1) < top1  # the next reader may be folded already, or not stored
            if DENSE:
                rd1 = ok
                rd2 = ((zero_h + live2) != 0) & ok
            else:
                nnext = zero_h + tl.load(CALL_N + c + 1)  # the sentinel after the last call
                rd1 = (nnext > j) & ok
                rd2 = (nnext > j + 1) & ((zero_h + live2) != 0) & ok
            rdd = rd1 | rd2
            dslot = dbase + (c + 1) * stride_dc
            dna = tl.load(DOUT_BUF + dslot + rowa, mask=maska & rdd[None, :, None], other=0.0)
            dnb = tl.load(DOUT_BUF + dslot + rowb, mask=maskb & rdd[None, :, None], other=0.0)
            if PREFETCH == 2:
                wn1, wn2, shn, srn = _fold_meta(c + 1, j, rd1, rd2, offs_p, offs_hm, pmask, WALL, SHALL,
                                                SALL, CALL_H, CALL_WOFF, CALL_SOFF, P, HM, SAME_H, TWO)
        else:
            rdd = rd1 | rd2
            dslot = dbase + c * stride_dc
            doga = tl.load(DOUT_BUF + dslot + rowa, mask=maska & rdd[None, :, None], other=0.0).to(tl.float32)
            dogb = tl.load(DOUT_BUF + dslot + rowb, mask=maskb & rdd[None, :, None], other=0.0).to(tl.float32)
            if not DENSE:
                nnext = zero_h + tl.load(CALL_N + c + 1)
                rd1 = nnext > j
                rd2 = (nnext > j + 1) & ((zero_h + live2) != 0)
        if LOADS_FIRST:  # before the dl stores below, which they may not pass
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
        if PREFETCH < 2:
            wg1, wg2, sh, sr = _fold_meta(c, j, cur1, cur2, offs_p, offs_hm, pmask, WALL, SHALL, SALL,
                                          CALL_H, CALL_WOFF, CALL_SOFF, P, HM, SAME_H, TWO)
        hc, wo, _so, pidx = _fold_offsets(c, j, offs_p, offs_hm, CALL_H, CALL_WOFF, CALL_SOFF, P, HM, SAME_H)
        if DENSE:  # every reader reads two or more sources
            one_way = tl.full([1, HM], 1, tl.int1)
        else:
            nc = tl.load(CALL_N + c)
            one_way = (zero_h + nc)[None, :] > 1  # a call over one source: dl exactly 0 (_gather_collect)
        ds1 = tl.sum(doga * va1, axis=2) + tl.sum(dogb * vb1, axis=2)  # [BP, HM] per sub-head
        if TWO:
            ds2 = tl.sum(doga * va2, axis=2) + tl.sum(dogb * vb2, axis=2)
        if not SAME_H:
            if hc != HM:
                ds1 = _head_sum(ds1, hc, HM)
                if TWO:
                    ds2 = _head_sum(ds2, hc, HM)
        dl1 = tl.where(one_way, wg1 * ((ds1 - sh) - sr), 0.0)
        tl.store(DALL + wo + pidx, dl1, mask=m1)
        if TWO:
            dl2 = tl.where(one_way, wg2 * ((ds2 - sh) - sr), 0.0)
            tl.store(DALL + wo + P * hc + pidx, dl2, mask=m2)
        if not LOADS_FIRST:
            ua = tl.load(U + c * D + cola[None, :, :], mask=cmaska[None, :, :], other=0.0)
            ub = tl.load(U + c * D + colb[None, :, :], mask=cmaskb[None, :, :], other=0.0)
        acc_va1 += wg1[:, :, None] * doga
        acc_vb1 += wg1[:, :, None] * dogb
        acc_ka1 += dl1[:, :, None] * ua
        acc_kb1 += dl1[:, :, None] * ub
        if TWO:
            acc_va2 += wg2[:, :, None] * doga
            acc_vb2 += wg2[:, :, None] * dogb
            acc_ka2 += dl2[:, :, None] * ua
            acc_kb2 += dl2[:, :, None] * ub
    dxa1, dxb1 = source_grad_split(acc_va1, acc_vb1, acc_ka1, acc_kb1, va1, vb1, r1, D)
    dxa2, dxb2 = dxa1, dxb1
    if TWO:
        dxa2, dxb2 = source_grad_split(acc_va2, acc_vb2, acc_ka2, acc_kb2, va2, vb2, r2, D)
    return dxa1, dxb1, dxa2, dxb2


@triton.jit
def _acc_add(ACC, aoff, rowa, rowb, maska, maskb, reada, readb, dxa, dxb):
    """ACC_j (at ACC + aoff) = [ACC_j +] dx_j, over one position block's two tiles."""
    dxa = tl.load(ACC + aoff + rowa, mask=reada, other=0.0) + dxa
    dxb = tl.load(ACC + aoff + rowb, mask=readb, other=0.0) + dxb
    tl.store(ACC + aoff + rowa, dxa, mask=maska)
    tl.store(ACC + aoff + rowb, dxb, mask=maskb)


@triton.jit
def stack_fold_kernel(
    V0, V, stride_vn,  # source row 0 [P, D]; buffer [cap, P, D] (rows >= 1)
    DOUT_BUF, stride_dc, dbase,  # stored douts: call c's at DOUT_BUF + dbase + c * stride_dc
    WALL, DALL, SHALL, SALL, U,  # as stack_gather_kernel
    CALL_N, CALL_H, CALL_WOFF, CALL_SOFF,  # int64 call tables (+ sentinel)
    ACC,  # [>= jf, P, D] fp32 accumulators, source j's at ACC + j * P * D
    call, top1, jf, first, P, eps,  # fold the readers [call, top1) into the sources [0, jf);
    # first: the first fold of this backward (ACC written, not read: its loads masked off)
    D: tl.constexpr, HM: tl.constexpr, KM: tl.constexpr, KA: tl.constexpr,
    BLOCK_KA: tl.constexpr, KB: tl.constexpr, BLOCK_KB: tl.constexpr, BLOCK_P: tl.constexpr,
    PREFETCH: tl.constexpr, SAME_H: tl.constexpr, VEC_B: tl.constexpr, LOADS_FIRST: tl.constexpr,
    SOURCES: tl.constexpr = 1, DENSE: tl.constexpr = False,
):
    """ACC_j = [ACC_j +] G_{[call, top1), j} for j in [0, jf), one program per position block
    (module docstring); stores dl_{c,j} of every folded pair. One loop over the sources, source
    0 included (`_gather_collect`'s PICK0), and `first` a runtime flag: offline (sm_90, 1B) a
    second copy of the loop for source 0, or a constexpr FIRST, each cost 40 registers per thread.

    The launch row's variants (`launch_tables.fold_config`): SOURCES 2 takes the sources two at
    a time, each reader's dout loaded once for both (`_fold_collect`); PREFETCH 2 loads the next
    reader's w, shift and S' with its dout. SOURCES 1 with PREFETCH 0 / 1 and the masked loop is the
    loop over `_gather_collect` the fold was built with (bitwise the same). A row with SOURCES 0
    launches `stack_fold_held_kernel` instead, where it serves the fold.

    DENSE (set by the host, `_StackState._fold_block`, where every reader of the fold reads every
    folded source and two or more sources, and P is a multiple of BLOCK_P: the model's stacks):
    `_fold_collect`'s reader loop, at every row, without position, column or reader masks,
    call-table loads or the one-source test: fewer instructions an iteration
    (benchmarks/kernels/results.md). Bitwise the masked loop's (tests/test_kernels_fold_rows.py)."""
    blk = tl.program_id(0)
    offs_hm = tl.arange(0, HM)
    cola, colb, cmaska, cmaskb = _tile_cols(HM, KM, KA, BLOCK_KA, KB, BLOCK_KB, VEC_B)
    offs_p, pmask, maska, maskb, _, rowa, rowb = block_rows(blk, P, D, BLOCK_P, cola, colb, cmaska, cmaskb)
    if DENSE:  # P a multiple of BLOCK_P: no position masked; a full wide tile: none of its columns
        pmask = tl.full([BLOCK_P], 1, tl.int1)
        maskb = pmask[:, None, None] & cmaskb[None, :, :]
        if KA == BLOCK_KA:
            maska = tl.full([BLOCK_P, HM, BLOCK_KA], 1, tl.int1)
        else:
            maska = pmask[:, None, None] & cmaska[None, :, :]
    reada = maska & ((rowa * 0 + first) == 0)
    readb = maskb & ((rowb * 0 + first) == 0)
    if SOURCES == 1 and PREFETCH < 2 and not DENSE:
        for j in range(0, jf):
            dxa, dxb, _r = _gather_collect(
                V + j * stride_vn, j, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska, maskb,
                cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SHALL, SALL, U, CALL_N, CALL_H,
                CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, BLOCK_KA, BLOCK_KB, PREFETCH, SAME_H,
                LOADS_FIRST, dbase, True, V0, True)
            _acc_add(ACC, j * P * D, rowa, rowb, maska, maskb, reada, readb, dxa, dxb)
    else:
        for j in range(0, jf, SOURCES):
            live2 = tl.where(j + 1 < jf, 1, 0)
            dxa, dxb, dxa2, dxb2 = _fold_collect(
                V + j * stride_vn, stride_vn, j, live2, call, top1, rowa, rowb, offs_p, offs_hm, cola, colb, maska,
                maskb, cmaska, cmaskb, pmask, DOUT_BUF, stride_dc, dbase, WALL, DALL, SHALL, SALL, U,
                CALL_N, CALL_H, CALL_WOFF, CALL_SOFF, P, eps, V0, D, HM, BLOCK_P, BLOCK_KA, BLOCK_KB,
                PREFETCH, SAME_H, LOADS_FIRST, SOURCES == 2, DENSE)
            _acc_add(ACC, j * P * D, rowa, rowb, maska, maskb, reada, readb, dxa, dxb)
            if SOURCES == 2:
                l2a = maska & ((rowa * 0 + live2) != 0)
                l2b = maskb & ((rowb * 0 + live2) != 0)
                _acc_add(ACC, (j + 1) * P * D, rowa, rowb, l2a, l2b, reada & l2a, readb & l2b, dxa2, dxb2)


STACK_FOLD = Launcher(stack_fold_kernel)


@triton.jit
def stack_fold_held_kernel(
    V0, V, stride_vn,  # as stack_fold_kernel
    DOUT_BUF, stride_dc, dbase, WALL, DALL, SHALL, SALL, U,
    CALL_WOFF, CALL_SOFF,  # int64 call tables
    ACC, call, jf, first, P, eps,  # fold the readers [call, call + CB) into the sources [0, jf)
    RN,  # [>= jf, P] fp32 (R_STORED): r_j of every source, stored by the forward
    D: tl.constexpr, HM: tl.constexpr, KM: tl.constexpr, KA: tl.constexpr, BLOCK_KA: tl.constexpr,
    KB: tl.constexpr, BLOCK_KB: tl.constexpr, CB: tl.constexpr, PREFETCH: tl.constexpr,
    R_STORED: tl.constexpr, STAGES: tl.constexpr,
):
    """`stack_fold_kernel`'s sums with the loops turned over: one program per position holds the
    block's CB douts and q g rows in registers ([HM, CB, KA] and [KB, HM, CB], every dout read
    once from memory) and loops over the sources, each iteration every reader at once:

        ds_{c,j}  = <dout_c, v_j> per head            [HM, CB]: the heads on warps, a head's
        dl_{c,j}  = w_{c,j} ((ds_{c,j} - shift_c) - S'_c)   columns on lanes, the readers in
        ACC_j    += sum_c w_{c,j} dout_c + r_j a_j - (r_j^3/d) <a_j, v_j> v_j,   each thread
        a_j       = sum_c dl_{c,j} u_c

    so the sums over the readers stay within a thread and per source only v_j, ACC_j and the
    per-head rows move (PREFETCH 1: source j + 1's loaded while j is summed; STAGES > 1, with
    PREFETCH 0: the loop's loads under Triton's pipeliner, STAGES - 1 sources ahead through shared
    memory). r_j and
    <a_j, v_j> take one exchange across the warps together; R_STORED: r_j is the forward's
    (`route_fwd_kernel`'s stored r, 4 bytes a position), loaded, and only <a_j, v_j> is summed
    across the warps.

    Only for the model's folds: dense (every reader reads every folded source, two or more), one
    head count (HM) for every call, and CB = the fold's readers a power of two (the host checks,
    `_StackState._fold_block`). A width like 160 is 128 + 32: the narrow tile is held transposed,
    its columns permuted, so that Triton lays it out one column a lane with the heads on the
    warps, as the wide tile (else each head's dot crosses layouts through shared memory). The
    same terms as `stack_fold_kernel`, summed in another order (fp32 rounding)."""
    p = tl.program_id(0).to(tl.int64)
    offs_h = tl.arange(0, HM)
    offs_a = tl.arange(0, BLOCK_KA)
    cola = offs_h[:, None] * KM + offs_a[None, :]  # [HM, BKA]
    cmaska = (offs_a < KA)[None, :] & (offs_h < HM)[:, None]
    TWO: tl.constexpr = KB > 0  # a narrow tile (BLOCK_KB may be 1: a width like 5 is 4 + 1)
    offs_b = (tl.arange(0, BLOCK_KB) * 17) % BLOCK_KB  # a permutation: no provable runs of columns
    colb = offs_h[None, :] * KM + KA + offs_b[:, None]  # [BKB, HM]
    cmaskb = (offs_b < KB)[:, None] & (offs_h < HM)[None, :]
    cs = call + tl.arange(0, CB)  # [CB] the fold's readers
    dslot = dbase + cs.to(tl.int64) * stride_dc + p * D
    urow = cs.to(tl.int64) * D
    da = tl.load(DOUT_BUF + dslot[None, :, None] + cola[:, None, :], mask=cmaska[:, None, :], other=0.0
                 ).to(tl.float32)  # [HM, CB, BKA]
    ua = tl.load(U + urow[None, :, None] + cola[:, None, :], mask=cmaska[:, None, :], other=0.0)
    if TWO:
        db = tl.load(DOUT_BUF + dslot[None, None, :] + colb[:, :, None], mask=cmaskb[:, :, None], other=0.0
                     ).to(tl.float32)  # [BKB, HM, CB]
        ub = tl.load(U + urow[None, None, :] + colb[:, :, None], mask=cmaskb[:, :, None], other=0.0)
    hidx = p * HM + offs_h  # [HM] SAME_H: (position, head) of every reader's per-head rows
    sidx = tl.load(CALL_SOFF + cs)[None, :] + hidx[:, None]  # [HM, CB]
    sh = tl.load(SHALL + sidx)
    sr = tl.load(SALL + sidx)
    widx = tl.load(CALL_WOFF + cs)[None, :] + hidx[:, None]  # [HM, CB], source 0's
    rowa = p * D + cola
    rowb = p * D + colb
    PD = P * D
    reada = cmaska & ((cola * 0 + first) == 0)  # masks as tensors (the interpreter's scalars are ints)
    readb = cmaskb & ((colb * 0 + first) == 0)
    # source 0 (at V0: the fp32 embedding under autocast); later sources at V + j * stride_vn
    nva = tl.load(V0 + rowa, mask=cmaska, other=0.0).to(tl.float32)
    naa = tl.load(ACC + rowa, mask=reada, other=0.0)
    nw = tl.load(WALL + widx)
    if R_STORED:
        nr = tl.load(RN + p)
    if TWO:
        nvb = tl.load(V0 + rowb, mask=cmaskb, other=0.0).to(tl.float32)
        nab = tl.load(ACC + rowb, mask=readb, other=0.0)
    for j in tl.range(0, jf, num_stages=STAGES):
        if PREFETCH:
            va = nva
            acca = naa
            w = nw
            morea = (cola * 0 + j + 1) < jf
            nva = tl.load(V + (j + 1) * stride_vn + rowa, mask=cmaska & morea, other=0.0).to(tl.float32)
            naa = tl.load(ACC + (j + 1) * PD + rowa, mask=reada & morea, other=0.0)
            nw = tl.load(WALL + widx + (j + 1) * P * HM, mask=(widx * 0 + j + 1) < jf, other=0.0)
            if R_STORED:
                r = nr
                nr = tl.load(RN + (j + 1) * P + p)  # row jf < the stack's capacity: in bounds, unused
            if TWO:
                vb = nvb
                accb = nab
                moreb = (colb * 0 + j + 1) < jf
                nvb = tl.load(V + (j + 1) * stride_vn + rowb, mask=cmaskb & moreb, other=0.0).to(tl.float32)
                nab = tl.load(ACC + (j + 1) * PD + rowb, mask=readb & moreb, other=0.0)
        else:
            is0 = j == 0
            va = tl.where(is0, nva, tl.load(V + j * stride_vn + rowa, mask=cmaska & ((cola * 0 + j) > 0), other=0.0
                                            ).to(tl.float32))
            acca = tl.load(ACC + j * PD + rowa, mask=reada, other=0.0)
            w = tl.load(WALL + widx + j * P * HM)
            if R_STORED:
                r = tl.load(RN + j * P + p)
            if TWO:
                vb = tl.where(is0, nvb, tl.load(V + j * stride_vn + rowb, mask=cmaskb & ((colb * 0 + j) > 0),
                                                other=0.0).to(tl.float32))
                accb = tl.load(ACC + j * PD + rowb, mask=readb, other=0.0)
        ds = tl.sum(da * va[:, None, :], axis=2)  # [HM, CB]
        if TWO:
            ds += tl.sum(db * vb[:, :, None], axis=0)
        dl = w * ((ds - sh) - sr)
        tl.store(DALL + widx + j * P * HM, dl)
        acc_va = tl.sum(w[:, :, None] * da, axis=1)  # [HM, BKA]: sum_c w_{c,j} dout_c
        acc_ka = tl.sum(dl[:, :, None] * ua, axis=1)  # a_j
        dot_h = tl.sum(acc_ka * va, axis=1)  # [HM]
        if not R_STORED:
            ssq_h = tl.sum(va * va, axis=1)
        if TWO:
            acc_vb = tl.sum(w[None, :, :] * db, axis=2)  # [BKB, HM]
            acc_kb = tl.sum(dl[None, :, :] * ub, axis=2)
            dot_h += tl.sum(acc_kb * vb, axis=0)
            if not R_STORED:
                ssq_h += tl.sum(vb * vb, axis=0)
        if R_STORED:
            dot = tl.sum(dot_h, axis=0)
        else:
            ssq, dot = tl.split(tl.sum(tl.join(ssq_h, dot_h), axis=0))  # one exchange across the warps
            r = rsqrt_acc(ssq / D + eps)
        fac = r * r * r * dot / D
        tl.store(ACC + j * PD + rowa, acca + (acc_va + r * acc_ka - fac * va), mask=cmaska)
        if TWO:
            tl.store(ACC + j * PD + rowb, accb + (acc_vb + r * acc_kb - fac * vb), mask=cmaskb)


STACK_FOLD_HELD = Launcher(stack_fold_held_kernel)


# ------------------------------------------------------------------ the plan and its bytes
@dataclass(frozen=True)
class BackwardLaunch:
    """One launch of a stack's backward that reads stored douts: call `call`'s node runs it over
    the readers [call, top1) and the sources [lo, hi) (gather: those it reads first; fold: every
    source not yet gathered). acc_read / acc_write: it reads / writes their accumulators."""

    kind: str  # "gather" (stack_gather_kernel) or "fold" (stack_fold_kernel)
    call: int
    top1: int
    lo: int
    hi: int
    acc_read: bool
    acc_write: bool


def fold_due(call: int, frontier: int, fold_calls: int, j0: int) -> bool:
    """Whether call `call`'s node folds the readers [call, frontier) after its gather: a full
    block of `fold_calls` calls (0: never, the gather backward) and sources left (j0 > 0)."""
    return fold_calls > 0 and frontier - call >= fold_calls and j0 > 0


def backward_plan(layout: Sequence[tuple[int, int, int]], top: int, fold_calls: int) -> list[BackwardLaunch]:
    """The dout-reading launches of a backward from call `top` down, in order; layout: (n, j0,
    j1) per call (sources [0, n) read, [j0, j1) first read by it). fold_calls 0: the gather
    backward (every gather reads the readers up to the top). The autograd path follows the same
    rule (`fold_due`); tests check that its launches are this plan."""
    frontier = top + 1
    plan: list[BackwardLaunch] = []
    for c in range(top, -1, -1):
        _, j0, j1 = layout[c]
        folded = frontier <= top
        plan.append(BackwardLaunch("gather", c, frontier, j0, j1, folded and j1 > j0, False))
        if fold_due(c, frontier, fold_calls, j0):
            plan.append(BackwardLaunch("fold", c, frontier, 0, j0, folded, True))
            frontier = c
    return plan


def launch_readers(launch: BackwardLaunch, layout: Sequence[tuple[int, int, int]]) -> list[int]:
    """The calls of [call, top1) that read one of the launch's sources [lo, hi): whose douts it loads."""
    return [c for c in range(launch.call, launch.top1) if layout[c][0] > launch.lo and launch.hi > launch.lo]


def plan_dout_bytes(plan: Sequence[BackwardLaunch], layout: Sequence[tuple[int, int, int]], d: int,
                    dout_bytes: int) -> int:
    """DRAM bytes per position of the douts the launches in `plan` load and store, each row a
    launch touches counted once:

      per gather, the call part: its dout read, and stored into its slot;
      per reader of a launch: its dout read from its slot.

    `tests/test_kernel_floors.py` checks this against the loads and stores of a stack's launches
    in the interpreter."""
    total = 0
    for launch in plan:
        own = launch.kind == "gather"
        if own:
            total += dout_bytes * d * 2
        total += dout_bytes * d * len(launch_readers(launch, layout))
    return total


def plan_bytes(plan: Sequence[BackwardLaunch], layout: Sequence[tuple[int, int, int]],
               heads: Sequence[int], d: int, src_bytes: int, dout_bytes: int, dx_bytes: int | None = None) -> float:
    """DRAM bytes per pair-element of the launches in `plan`, counting each row a launch touches
    once (a program's re-reads of the same positions come from cache):

      the douts: `plan_dout_bytes`;
      per gather, the call part: its output read (dout_bytes: the output's dtype), shift_c and
        S'_c written (4 H_c each);
      per source of a launch: v_j read (src_bytes), ACC_j read / written (4 each, where the launch
        does), dx_j written (dx_bytes, gather);
      per reader of a launch that reads one of its sources: shift_c and S'_c (4 H_c each);
      per pair (c, j) of a launch: w_{c,j} read and dl_{c,j} written (4 H_c each).

    Divided by sum_c n_c * d. The forward and the E pass (pair_e, the same in both backwards)
    are not counted, nor the held fold's stored r_j (R_STORED: 4 bytes a source and position,
    against the 2 d + 8 d of v_j and ACC_j beside it)."""
    dx_bytes = src_bytes if dx_bytes is None else dx_bytes
    total = plan_dout_bytes(plan, layout, d, dout_bytes)
    for launch in plan:
        for j in range(launch.lo, launch.hi):
            total += src_bytes * d + (4 * d if launch.acc_read else 0) + (4 * d if launch.acc_write else 0)
            if launch.kind == "gather":
                total += dx_bytes * d
            for c in range(launch.call, launch.top1):
                if layout[c][0] > j:
                    total += 8 * heads[c]
        for c in launch_readers(launch, layout):
            total += 8 * heads[c]
        if launch.kind == "gather":
            total += dout_bytes * d + 8 * heads[launch.call]
    pairs = sum(n for n, _, _ in layout[: max(launch.call for launch in plan) + 1])
    return total / (pairs * d)


def model_layout(calls: int) -> list[tuple[int, int, int]]:
    """(n, j0, j1) per call of the model's stacks: call c reads sources [0, c], source c
    appended just before it (25 / 49 / 73 calls at 100M / 350M / 1B)."""
    return [(c + 1, c, c + 1) for c in range(calls)]
