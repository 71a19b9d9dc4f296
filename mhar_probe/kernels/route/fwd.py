"""Fused routing forward: online softmax over depth with the key RMSNorm fused in.

For one position p, sources v_n (rows of width d = H*K), query q and key-norm weight g:

    r_n      = rsqrt(mean(v_n^2) + eps)                         (fp32, full d-row)
    khat_n   = round(round(v_n * r_n) * g)                      (round = storage dtype, where
                                                                 the reference rounds)
    l_{n,h}  = <q_h, khat_{n,h}>                                (fp32)
    w_{n,h}  = softmax_n(l_{n,h})
    out_h    = sum_n w_{n,h} v_{n,h}            (+ partial + gate * ... in the delta form)

Each source row is read once; the only thing written besides `out` is W [N, P, H] (fp32),
which the backward and the hooks read. `naive.route_reference_f64` is the plain torch reading.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from mhar_probe.kernels.config import DEFAULT
from mhar_probe.kernels.launch import Launcher, cdiv, next_pow2
from mhar_probe.kernels.launch_tables import LaunchTables, tables_for


# ---------------------------------------------------------------- accurate fp32 primitives
# Triton lowers fp32 exp to ex2.approx(x * log2e) (the product's rounding costs up to
# |x| * 2^-24 relative), rsqrt to rsqrt.approx and '/' to div.full (2 ulp). The routing
# logits are O(10), so these cost ~1e-6 of relative error in the weights; the helpers below
# keep every step within about an ulp (Cody-Waite reduction for exp, IEEE sqrt and division).
@triton.jit
def exp_acc(x):
    x = tl.maximum(x, -200.0)  # exp(-inf) = 0 without NaN from the reduction; exp(-200) = 0 in fp32
    k = tl.floor(x * 1.4426950408889634 + 0.5)
    r = (x - k * 0.693145751953125) - k * 1.4286068202862268e-06  # ln2 = hi + lo, k * hi exact
    return tl.exp2(r * 1.4426950408889634) * tl.exp2(k)


@triton.jit
def rsqrt_acc(x):
    return tl.math.div_rn(1.0, tl.sqrt_rn(x))


@triton.jit
def div_acc(a, b):
    return tl.math.div_rn(a, b)


@triton.jit
def _softmax_fold(logit, m, l, acca, accb, TWO: tl.constexpr):
    """Online-softmax bookkeeping for one row's logits [BP, H]: the new running max, the
    softmax numerator e = exp(logit - m_new) and the old terms (l and the accumulator, held as
    one tile or, TWO, as two tiles acca, accb) rescaled by exp(m - m_new).
    The rescale runs only when some running max grew in this block; otherwise its factor is
    exp(0) = 1 exactly, so skipping it changes nothing but the instruction count."""
    m_new = tl.maximum(m, logit)
    e = exp_acc(logit - m_new)
    grew = tl.max(tl.max((m_new > m).to(tl.int32), axis=1), axis=0)
    if grew > 0:
        scale = exp_acc(m - m_new)
        l = l * scale
        acca = acca * scale[:, :, None]
        if TWO:
            accb = accb * scale[:, :, None]
    return m_new, l, acca, accb, e


@triton.jit
def _row_rsqrt(v, eps, D: tl.constexpr):
    """r = rsqrt(mean(v^2) + eps) of rows [BP, H, BK] -> [BP]."""
    return rsqrt_acc(tl.sum(tl.sum(v * v, axis=2), axis=1) / D + eps)


@triton.jit
def _fwd_fold_row(v, r, q, g, m, l, acc, wptr, pmask, dtype: tl.constexpr, ROUND_KEY: tl.constexpr,
                  ROUND_KEY2: tl.constexpr, FOLD: tl.constexpr):
    """Fold one source row [BP, H, BK] with its r [BP] into one call's online softmax; store
    its raw logits at wptr. FOLD (no key rounding): `q` holds u = q * g and the logit is
    r * <u_h, v_h>."""
    if FOLD:
        logit = r[:, None] * tl.sum(v * q[None, :, :], axis=2)  # [BP, H]
    else:
        kh = v * r[:, None, None]
        if ROUND_KEY:
            kh = kh.to(dtype).to(tl.float32)
        kh = kh * g[None, :, :]
        if ROUND_KEY2:
            kh = kh.to(dtype).to(tl.float32)
        logit = tl.sum(kh * q[None, :, :], axis=2)  # [BP, H]
    tl.store(wptr, logit, mask=pmask[:, None])
    m, l, acc, _, e = _softmax_fold(logit, m, l, acc, acc, False)
    return m, l + e, acc + e[:, :, None] * v


@triton.jit
def _fwd_step(v, q, g, m, l, acc, wptr, pmask, eps, D: tl.constexpr, dtype: tl.constexpr,
              ROUND_KEY: tl.constexpr, ROUND_KEY2: tl.constexpr, FOLD: tl.constexpr):
    """Fold one source row [BP, H, BK] into the online softmax; store its raw logits."""
    r = _row_rsqrt(v, eps, D)
    return _fwd_fold_row(v, r, q, g, m, l, acc, wptr, pmask, dtype, ROUND_KEY, ROUND_KEY2, FOLD)


@triton.jit
def _logits_to_weights(wptr, P, N, H: tl.constexpr, m, l, pmask, W_STAGES: tl.constexpr, W_ROWS: tl.constexpr):
    """Rewrite the N [BP, H] raw logits at wptr + n*P*H as the weights exp(logit - m) / l, W_ROWS
    rows at a time: one [W_ROWS, BP, H] tile an iteration, so that a one-position program has
    W_ROWS rows' loads in flight and spreads their elements over its lanes (a [BP, H] row alone
    is 8 elements on 32-64 lanes, each computed by every lane that holds a copy), under Triton's
    pipeliner: W_STAGES - 1 tiles ahead."""
    offs_r = tl.arange(0, W_ROWS)  # [WR]
    tile = wptr[None, :, :] + offs_r[:, None, None] * (P * H)  # [WR, BP, H]
    mt = m[None, :, :]
    lt = l[None, :, :]
    for n0 in tl.range(0, N, W_ROWS, num_stages=W_STAGES):
        mask = ((n0 + offs_r) < N)[:, None, None] & pmask[None, :, None]
        lg = tl.load(tile + n0 * (P * H), mask=mask, other=0.0)
        tl.store(tile + n0 * (P * H), div_acc(exp_acc(lg - mt), lt), mask=mask)


@triton.jit
def route_fwd_kernel(
    V0,  # [P, D] source row 0 (its own tensor: under autocast the fp32 embedding)
    V, stride_vn,  # sources n >= 1: row n of position p at V + n*stride_vn + p*D
    Q, G,  # [D] query, key-norm weight
    PARTIAL, GATE,  # [P, D], [] (delta form only)
    OUT,  # [P, D]
    W,  # [N, P, H] fp32: routing weights
    RES,  # [P, D] (HAS_RES): the output's rounding residual, fp32 mix - OUT, in OUT's dtype
    X, XDST,  # [P, D] each (APPEND): source N-1 as appended, and its row of V to copy it into
    P, N, eps,
    QN, GN,  # [D] (NEXT): the next call's query and key-norm weight
    WN,  # (NEXT) the next call's W: its raw logits of rows [0, N) written here
    SACC, SML,  # [P, D], [P, 2, H] fp32: the next call's softmax state (NEXT writes, RESUME reads)
    N0,  # (RESUME) rows [0, N0) are in the state; this call reads rows [N0, N)
    RN,  # [>= N, P] fp32 (R_STORED): r_n of every row, stored by the call that appends it (row 0: STORE_R0)
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_PARTIAL: tl.constexpr, HAS_GATE: tl.constexpr,
    ROUND_KEY: tl.constexpr, ROUND_KEY2: tl.constexpr, HAS_RES: tl.constexpr,
    FOLD: tl.constexpr, STAGES: tl.constexpr, APPEND: tl.constexpr, W_STAGES: tl.constexpr,
    NEXT: tl.constexpr, RESUME: tl.constexpr, W_ROWS: tl.constexpr, R_STORED: tl.constexpr,
    STORE_R0: tl.constexpr,
):
    """Rows 1..N-1 are read under Triton's pipeliner, STAGES - 1 rows ahead in flight (cp.async
    into shared memory). APPEND (1): the source appended just before this call is read from X,
    not from V, and the kernel stores it into its row of V (XDST) on the way: the stack's
    append is this store, with no copy kernel and no second read of the row. It is loaded with
    row 0 and folded into the softmax right after it (no row held in registers through the
    loop; within fp32 rounding of reading it from V in the rows' order).
    FOLD (16-bit storage, no key rounding): the logit is r * <q*g, v>.

    The lookahead (`KernelConfig.forward="lookahead"`): queries are parameters, so a call can
    fold the rows it reads into the next call's softmax as well. NEXT: each row's r is shared,
    the next call's raw logits go to WN and its state (m, l, acc: unnormalised) to SACC, SML.
    RESUME: the call starts from that state and reads only the rows appended since (N0 on),
    then turns all N of its logits into weights. Same terms as a call that reads every row,
    the rows in another order (the appended one after row N0 - 1 instead of after row 0).

    R_STORED (a source stack's calls): a row's r = rsqrt(mean(v^2) + eps) is computed once, by
    the call that appends the row (APPEND), and stored in RN; the rows read from V load it (4
    bytes a position) instead of reducing the row again (a sum over every lane and warp, a
    square root and a division each row and call). The same r: the appending call computes it
    from the same values, with the same reduction. STORE_R0: the stack's first call stores row
    0's (the backward's fold reads every source's)."""
    pid = tl.program_id(0)
    offs_p = pid * BLOCK_P + tl.arange(0, BLOCK_P)  # [BP]
    offs_h = tl.arange(0, H)
    offs_k = tl.arange(0, BLOCK_K)
    col = offs_h[:, None] * K + offs_k[None, :]  # [H, BK] column within the d-row
    cmask = (offs_k < K)[None, :] & (offs_h < H)[:, None]  # [H, BK]
    pmask = offs_p < P
    mask = pmask[:, None, None] & cmask[None, :, :]  # [BP, H, BK]
    row = offs_p.to(tl.int64)[:, None, None] * D + col[None, :, :]  # [BP, H, BK]
    q = tl.load(Q + col, mask=cmask, other=0.0).to(tl.float32)
    g = tl.load(G + col, mask=cmask, other=0.0).to(tl.float32)
    if FOLD:
        q = q * g  # u = q * g
    wptr = W + offs_p[:, None] * H + offs_h[None, :]  # [BP, H]
    sml = SML + offs_p[:, None] * (2 * H) + offs_h[None, :]  # [BP, H]: m; l at + H
    cdtype = OUT.dtype.element_ty  # the promoted dtype of the routed sources (rounding)
    PH = P * H

    if RESUME:  # the state the previous call left: rows [0, N0)
        m = tl.load(sml, mask=pmask[:, None], other=0.0)
        l = tl.load(sml + H, mask=pmask[:, None], other=0.0)
        acc = tl.load(SACC + row, mask=mask, other=0.0)
        start = N0
    else:
        m = tl.full([BLOCK_P, H], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_P, H], tl.float32)
        acc = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)
        start = 1
    if NEXT:
        qn = tl.load(QN + col, mask=cmask, other=0.0).to(tl.float32)
        gn = tl.load(GN + col, mask=cmask, other=0.0).to(tl.float32)
        if FOLD:
            qn = qn * gn
        wnptr = WN + offs_p[:, None] * H + offs_h[None, :]
        mn = tl.full([BLOCK_P, H], float("-inf"), tl.float32)
        ln = tl.zeros([BLOCK_P, H], tl.float32)
        accn = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)
    if APPEND:  # rows [start, NV) from V, row N-1 from X, loaded here and stored into V
        NV = N - 1
        vx = tl.load(X + row, mask=mask, other=0.0)
        tl.store(XDST + row, vx, mask=mask)
    else:
        NV = N
    if not RESUME:
        v0 = tl.load(V0 + row, mask=mask, other=0.0).to(tl.float32)
        r0 = _row_rsqrt(v0, eps, D)
        if STORE_R0:
            tl.store(RN + offs_p, r0, mask=pmask)
        m, l, acc = _fwd_fold_row(v0, r0, q, g, m, l, acc, wptr, pmask, cdtype, ROUND_KEY, ROUND_KEY2, FOLD)
        if NEXT:
            mn, ln, accn = _fwd_fold_row(v0, r0, qn, gn, mn, ln, accn, wnptr, pmask, cdtype, ROUND_KEY,
                                         ROUND_KEY2, FOLD)
    if APPEND:
        vxf = vx.to(tl.float32)
        rx = _row_rsqrt(vxf, eps, D)
        if R_STORED:
            tl.store(RN + NV * P + offs_p, rx, mask=pmask)
        m, l, acc = _fwd_fold_row(vxf, rx, q, g, m, l, acc, wptr + NV * PH, pmask, cdtype, ROUND_KEY,
                                  ROUND_KEY2, FOLD)
        if NEXT:
            mn, ln, accn = _fwd_fold_row(vxf, rx, qn, gn, mn, ln, accn, wnptr + NV * PH, pmask, cdtype,
                                         ROUND_KEY, ROUND_KEY2, FOLD)
    vptr = V + row
    if RESUME:
        vptr += (start - 1).to(tl.int64) * stride_vn
    for n in tl.range(start, NV, num_stages=STAGES):
        vptr += stride_vn
        v = tl.load(vptr, mask=mask, other=0.0).to(tl.float32)
        if R_STORED:
            r = tl.load(RN + n * P + offs_p, mask=pmask, other=1.0)
        else:
            r = _row_rsqrt(v, eps, D)
        m, l, acc = _fwd_fold_row(v, r, q, g, m, l, acc, wptr + n * PH, pmask, cdtype, ROUND_KEY, ROUND_KEY2,
                                  FOLD)
        if NEXT:
            mn, ln, accn = _fwd_fold_row(v, r, qn, gn, mn, ln, accn, wnptr + n * PH, pmask, cdtype, ROUND_KEY,
                                         ROUND_KEY2, FOLD)
    o = div_acc(acc, l[:, :, None])
    if HAS_PARTIAL:
        if HAS_GATE:
            o = o * tl.load(GATE).to(tl.float32)
        o = tl.load(PARTIAL + row, mask=mask, other=0.0).to(tl.float32) + o
    o_st = o.to(OUT.dtype.element_ty)
    tl.store(OUT + row, o_st, mask=mask)
    if HAS_RES:
        tl.store(RES + row, (o - o_st.to(tl.float32)).to(RES.dtype.element_ty), mask=mask)
    if NEXT:
        tl.store(SACC + row, accn, mask=mask)
        tl.store(sml, mn, mask=pmask[:, None])
        tl.store(sml + H, ln, mask=pmask[:, None])
    _logits_to_weights(wptr, P, N, H, m, l, pmask, W_STAGES, W_ROWS)


# ------------------------------------------- head width not a power of two: two exact tiles
# A [BP, H, BLOCK_K] tile pads each head's K columns to a power of two: at 1B (d1280, H8,
# K = 160 -> 256) 37.5% of the lanes are masked, yet they execute every instruction. When it
# saves lanes, the split kernel reads each head as two tiles of K1 (the largest power of two
# <= K) and K2 = K - K1 (padded to BLOCK_K2) columns: 160 = 128 + 32, 1280 = 1024 + 256 (H=1),
# 96 = 64 + 32. Same function; the row sums add the two tiles' partial sums.
def head_split(K: int) -> tuple[int, int, int] | None:
    """(K1, K2, BLOCK_K2) when two tiles cover a head in fewer lanes than one padded tile."""
    k1 = 1 << (K.bit_length() - 1)
    k2 = K - k1
    if k2 == 0 or k1 + next_pow2(k2) >= next_pow2(K):
        return None
    return k1, k2, next_pow2(k2)


@triton.jit
def split_cols(H: tl.constexpr, K: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr,
               BLOCK_K2: tl.constexpr):
    """Columns and masks of the two tiles of H heads of width K = K1 + K2 within a d-row:
    [H, K1] (columns [0, K1) of each head) and [H, BLOCK_K2] (columns [K1, K), padded)."""
    offs_h = tl.arange(0, H)
    offs_a = tl.arange(0, K1)
    offs_b = tl.arange(0, BLOCK_K2)
    cola = offs_h[:, None] * K + offs_a[None, :]
    colb = offs_h[:, None] * K + K1 + offs_b[None, :]
    cmaska = (offs_a < K1)[None, :] & (offs_h < H)[:, None]
    cmaskb = (offs_b < K2)[None, :] & (offs_h < H)[:, None]
    return cola, colb, cmaska, cmaskb


@triton.jit
def block_rows(blk, P, D: tl.constexpr, BLOCK_P: tl.constexpr, cola, colb, cmaska, cmaskb):
    """Position block `blk` of a row held as two column tiles: positions [BP] and their mask,
    the tiles' masks [BP, ..] and element offsets (row start [BP, 1, 1] and the two tiles)."""
    offs_p = blk * BLOCK_P + tl.arange(0, BLOCK_P)
    pmask = offs_p < P
    maska = pmask[:, None, None] & cmaska[None, :, :]
    maskb = pmask[:, None, None] & cmaskb[None, :, :]
    rowp = offs_p.to(tl.int64)[:, None, None] * D
    return offs_p, pmask, maska, maskb, rowp, rowp + cola[None, :, :], rowp + colb[None, :, :]


@triton.jit
def _row_rsqrt_split(va, vb, eps, D: tl.constexpr):
    """`_row_rsqrt` of a row held as two tiles [BP, H, K1] and [BP, H, BLOCK_K2]."""
    ss = tl.sum(tl.sum(va * va, axis=2), axis=1) + tl.sum(tl.sum(vb * vb, axis=2), axis=1)
    return rsqrt_acc(ss / D + eps)  # [BP]


@triton.jit
def _fwd_fold_row_split(va, vb, r, qa, qb, ga, gb, m, l, acca, accb, wptr, pmask, dtype: tl.constexpr,
                        ROUND_KEY: tl.constexpr, ROUND_KEY2: tl.constexpr, FOLD: tl.constexpr):
    """`_fwd_fold_row` for a row held as two tiles."""
    if FOLD:  # qa, qb hold u = q * g
        logit = r[:, None] * (tl.sum(va * qa[None, :, :], axis=2) + tl.sum(vb * qb[None, :, :], axis=2))
    else:
        kha = va * r[:, None, None]
        khb = vb * r[:, None, None]
        if ROUND_KEY:
            kha = kha.to(dtype).to(tl.float32)
            khb = khb.to(dtype).to(tl.float32)
        kha = kha * ga[None, :, :]
        khb = khb * gb[None, :, :]
        if ROUND_KEY2:
            kha = kha.to(dtype).to(tl.float32)
            khb = khb.to(dtype).to(tl.float32)
        logit = tl.sum(kha * qa[None, :, :], axis=2) + tl.sum(khb * qb[None, :, :], axis=2)  # [BP, H]
    tl.store(wptr, logit, mask=pmask[:, None])
    m, l, acca, accb, e = _softmax_fold(logit, m, l, acca, accb, True)
    return m, l + e, acca + e[:, :, None] * va, accb + e[:, :, None] * vb


@triton.jit
def route_fwd_split_kernel(
    V0, V, stride_vn, Q, G, PARTIAL, GATE, OUT, W, RES, X, XDST,  # as route_fwd_kernel
    P, N, eps, QN, GN, WN, SACC, SML, N0, RN,
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr,
    BLOCK_K2: tl.constexpr, BLOCK_P: tl.constexpr, HAS_PARTIAL: tl.constexpr,
    HAS_GATE: tl.constexpr, ROUND_KEY: tl.constexpr, ROUND_KEY2: tl.constexpr,
    HAS_RES: tl.constexpr, FOLD: tl.constexpr, STAGES: tl.constexpr, APPEND: tl.constexpr,
    W_STAGES: tl.constexpr, NEXT: tl.constexpr, RESUME: tl.constexpr, W_ROWS: tl.constexpr,
    R_STORED: tl.constexpr, STORE_R0: tl.constexpr,
):
    """`route_fwd_kernel` for heads held as two column tiles, K = K1 + K2."""
    offs_h = tl.arange(0, H)
    cola, colb, cmaska, cmaskb = split_cols(H, K, K1, K2, BLOCK_K2)  # [H, K1], [H, BK2]
    # rowa [BP, H, K1], rowb [BP, H, BK2]
    offs_p, pmask, maska, maskb, _, rowa, rowb = block_rows(tl.program_id(0), P, D, BLOCK_P, cola, colb,
                                                            cmaska, cmaskb)
    qa = tl.load(Q + cola, mask=cmaska, other=0.0).to(tl.float32)
    qb = tl.load(Q + colb, mask=cmaskb, other=0.0).to(tl.float32)
    ga = tl.load(G + cola, mask=cmaska, other=0.0).to(tl.float32)
    gb = tl.load(G + colb, mask=cmaskb, other=0.0).to(tl.float32)
    if FOLD:  # u = q * g
        qa = qa * ga
        qb = qb * gb
    wptr = W + offs_p[:, None] * H + offs_h[None, :]  # [BP, H]
    sml = SML + offs_p[:, None] * (2 * H) + offs_h[None, :]  # [BP, H]: m; l at + H
    cdtype = OUT.dtype.element_ty
    PH = P * H

    if RESUME:
        m = tl.load(sml, mask=pmask[:, None], other=0.0)
        l = tl.load(sml + H, mask=pmask[:, None], other=0.0)
        acca = tl.load(SACC + rowa, mask=maska, other=0.0)
        accb = tl.load(SACC + rowb, mask=maskb, other=0.0)
        start = N0
    else:
        m = tl.full([BLOCK_P, H], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_P, H], tl.float32)
        acca = tl.zeros([BLOCK_P, H, K1], tl.float32)
        accb = tl.zeros([BLOCK_P, H, BLOCK_K2], tl.float32)
        start = 1
    if NEXT:
        qna = tl.load(QN + cola, mask=cmaska, other=0.0).to(tl.float32)
        qnb = tl.load(QN + colb, mask=cmaskb, other=0.0).to(tl.float32)
        gna = tl.load(GN + cola, mask=cmaska, other=0.0).to(tl.float32)
        gnb = tl.load(GN + colb, mask=cmaskb, other=0.0).to(tl.float32)
        if FOLD:
            qna = qna * gna
            qnb = qnb * gnb
        wnptr = WN + offs_p[:, None] * H + offs_h[None, :]
        mn = tl.full([BLOCK_P, H], float("-inf"), tl.float32)
        ln = tl.zeros([BLOCK_P, H], tl.float32)
        accna = tl.zeros([BLOCK_P, H, K1], tl.float32)
        accnb = tl.zeros([BLOCK_P, H, BLOCK_K2], tl.float32)
    if APPEND:  # rows [start, NV) from V, row N-1 from X (see route_fwd_kernel)
        NV = N - 1
        vxa = tl.load(X + rowa, mask=maska, other=0.0)
        vxb = tl.load(X + rowb, mask=maskb, other=0.0)
        tl.store(XDST + rowa, vxa, mask=maska)
        tl.store(XDST + rowb, vxb, mask=maskb)
    else:
        NV = N
    if not RESUME:
        v0a = tl.load(V0 + rowa, mask=maska, other=0.0).to(tl.float32)
        v0b = tl.load(V0 + rowb, mask=maskb, other=0.0).to(tl.float32)
        r0 = _row_rsqrt_split(v0a, v0b, eps, D)
        if STORE_R0:
            tl.store(RN + offs_p, r0, mask=pmask)
        m, l, acca, accb = _fwd_fold_row_split(v0a, v0b, r0, qa, qb, ga, gb, m, l, acca, accb, wptr, pmask,
                                               cdtype, ROUND_KEY, ROUND_KEY2, FOLD)
        if NEXT:
            mn, ln, accna, accnb = _fwd_fold_row_split(v0a, v0b, r0, qna, qnb, gna, gnb, mn, ln, accna, accnb,
                                                       wnptr, pmask, cdtype, ROUND_KEY, ROUND_KEY2, FOLD)
    if APPEND:
        vxa = vxa.to(tl.float32)
        vxb = vxb.to(tl.float32)
        rx = _row_rsqrt_split(vxa, vxb, eps, D)
        if R_STORED:
            tl.store(RN + NV * P + offs_p, rx, mask=pmask)
        m, l, acca, accb = _fwd_fold_row_split(vxa, vxb, rx, qa, qb, ga, gb, m, l, acca, accb, wptr + NV * PH,
                                               pmask, cdtype, ROUND_KEY, ROUND_KEY2, FOLD)
        if NEXT:
            mn, ln, accna, accnb = _fwd_fold_row_split(vxa, vxb, rx, qna, qnb, gna, gnb, mn, ln, accna, accnb,
                                                       wnptr + NV * PH, pmask, cdtype, ROUND_KEY, ROUND_KEY2,
                                                       FOLD)
    pa = V + rowa  # as in route_fwd_kernel: Triton's pipeliner, STAGES-1 rows ahead
    pb = V + rowb
    if RESUME:
        pa += (start - 1).to(tl.int64) * stride_vn
        pb += (start - 1).to(tl.int64) * stride_vn
    for n in tl.range(start, NV, num_stages=STAGES):
        pa += stride_vn
        pb += stride_vn
        va = tl.load(pa, mask=maska, other=0.0).to(tl.float32)
        vb = tl.load(pb, mask=maskb, other=0.0).to(tl.float32)
        if R_STORED:
            r = tl.load(RN + n * P + offs_p, mask=pmask, other=1.0)
        else:
            r = _row_rsqrt_split(va, vb, eps, D)
        m, l, acca, accb = _fwd_fold_row_split(va, vb, r, qa, qb, ga, gb, m, l, acca, accb, wptr + n * PH,
                                               pmask, cdtype, ROUND_KEY, ROUND_KEY2, FOLD)
        if NEXT:
            mn, ln, accna, accnb = _fwd_fold_row_split(va, vb, r, qna, qnb, gna, gnb, mn, ln, accna, accnb,
                                                       wnptr + n * PH, pmask, cdtype, ROUND_KEY, ROUND_KEY2,
                                                       FOLD)
    oa = div_acc(acca, l[:, :, None])
    ob = div_acc(accb, l[:, :, None])
    if HAS_PARTIAL:
        if HAS_GATE:
            gate = tl.load(GATE).to(tl.float32)
            oa = oa * gate
            ob = ob * gate
        oa = tl.load(PARTIAL + rowa, mask=maska, other=0.0).to(tl.float32) + oa
        ob = tl.load(PARTIAL + rowb, mask=maskb, other=0.0).to(tl.float32) + ob
    oa_st = oa.to(OUT.dtype.element_ty)
    ob_st = ob.to(OUT.dtype.element_ty)
    tl.store(OUT + rowa, oa_st, mask=maska)
    tl.store(OUT + rowb, ob_st, mask=maskb)
    if HAS_RES:
        tl.store(RES + rowa, (oa - oa_st.to(tl.float32)).to(RES.dtype.element_ty), mask=maska)
        tl.store(RES + rowb, (ob - ob_st.to(tl.float32)).to(RES.dtype.element_ty), mask=maskb)
    if NEXT:
        tl.store(SACC + rowa, accna, mask=maska)
        tl.store(SACC + rowb, accnb, mask=maskb)
        tl.store(sml, mn, mask=pmask[:, None])
        tl.store(sml + H, ln, mask=pmask[:, None])
    _logits_to_weights(wptr, P, N, H, m, l, pmask, W_STAGES, W_ROWS)


@functools.lru_cache(maxsize=None)
def rounding_flags(storage: torch.dtype, weight: torch.dtype) -> tuple[bool, bool]:
    """Where the reference rounds: normed.to(storage), then weight * normed in promoted dtype."""
    return storage != torch.float32, torch.promote_types(weight, storage) != torch.float32 and \
        torch.promote_types(weight, storage) == storage


def logit_form(out_dtype: torch.dtype, weight_dtype: torch.dtype, narrow_storage: bool
               ) -> tuple[bool, bool, bool]:
    """(ROUND_KEY, ROUND_KEY2, FOLD) of a forward launch: how its logits are formed
    (`_fwd_step`); `narrow_storage`: the rows it reads (n >= 1) are 16-bit."""
    rk, rk2 = rounding_flags(out_dtype, weight_dtype)
    return rk, rk2, narrow_storage and not (rk or rk2)


@dataclasses.dataclass(frozen=True)
class ForwardAhead:
    """The forward's lookahead for one launch (`route_fwd_kernel`'s NEXT and RESUME).

    state: (SACC [P, D], SML [P, 2, H]) fp32, the next call's unnormalised softmax state.
    next: (query, key-norm weight, W [>= N, P, H]) of the next call: this launch also folds its
      rows [0, N) into that call's softmax (raw logits into W's first N rows, the rest into state).
    resume_from: N0 > 0: this launch starts from the state over rows [0, N0) and reads [N0, N)."""

    state: tuple[Tensor, Tensor]
    next: tuple[Tensor, Tensor, Tensor] | None = None
    resume_from: int = 0


def ahead_args(ahead: ForwardAhead | None, query: Tensor, norm_weight: Tensor, W: Tensor) -> tuple:
    """(QN, GN, WN, SACC, SML, N0) of a forward launch. Without a lookahead (NEXT and RESUME off, so the
    kernel never reads them) the pointer arguments are the call's own query, norm weight and W."""
    if ahead is None:
        return query, norm_weight, W, W, W, 0
    qn, gn, wn = ahead.next if ahead.next is not None else (query, norm_weight, W)
    return qn, gn, wn, *ahead.state, ahead.resume_from


def launch_route_fwd(V: Tensor, N: int, P: int, query: Tensor, norm_weight: Tensor, num_heads: int,
                     eps: float, out: Tensor, W: Tensor, partial: Tensor | None = None,
                     gate: Tensor | None = None, v0: Tensor | None = None,
                     res: Tensor | None = None, append: tuple[Tensor, Tensor] | None = None,
                     tables: LaunchTables | None = None, ahead: ForwardAhead | None = None,
                     rn: Tensor | None = None, store_r0: bool = False) -> None:
    """V: [>=N, P, D] (contiguous rows), out: [P, D], W: [N, P, H] fp32 (written in place);
    `res` ([P, D], optional) receives the rounding residual (fp32 mix) - out in res.dtype.
    `append` = (x, dst) ([P, D] each, V's dtype): source N-1 is read from x and stored into
    dst, its row of V, by the same kernel (the stack's append folded into the call that first
    reads the source), and folded into the softmax right after row 0.
    `tables`: the launch tables (default: the built-in ones, `KernelConfig()`'s).

    Row 0 is read from `v0` ([P, D], default V[0]); it may be wider than V (the stack keeps an
    fp32 embedding beside bf16 sublayer outputs). The rounding of the normalised key and the
    output follow `out.dtype`, the promoted dtype of the routed sources.
    `ahead`: the lookahead (`ForwardAhead`; `route_fwd_kernel`'s NEXT and RESUME).
    `rn` ([>= N, P] fp32; R_STORED): the rows' stored r: rows [1, N) (rows [1, N - 1) with
    `append`) are read from it, and the appended row's r is written into it; `store_r0`: row 0's
    too."""
    if ahead is not None and partial is not None:
        raise ValueError("the forward's lookahead is for a source stack's calls, not the delta form")
    nxt, resume = (0, 0) if ahead is None else (int(ahead.next is not None), int(ahead.resume_from > 0))
    has_partial, has_gate = partial is not None, partial is not None and gate is not None
    D = V.shape[-1]
    if tables is None:
        tables = tables_for(DEFAULT)
    plan_key = (D, num_heads, tables.fwd_config(D, num_heads, out.element_size()), out.dtype,
                norm_weight.dtype, has_partial, has_gate, res is not None, V.element_size() < 4,
                0 if append is None else 1, nxt, resume, int(rn is not None),
                int(rn is not None and store_r0))
    plan = _FWD_PLANS.get(plan_key)
    if plan is None:
        plan = _FWD_PLANS[plan_key] = _fwd_plan(*plan_key)
    split, block_p, consts, num_warps, maxnreg = plan
    launcher = _FWD_SPLIT if split else _FWD  # looked up per call: tests swap the launchers
    args = (V[0] if v0 is None else v0, V, V.stride(0), query, norm_weight,
            partial if has_partial else out, gate if has_gate else query, out, W,
            out if res is None else res, *((out, out) if append is None else append), P, N, eps,
            *ahead_args(ahead, query, norm_weight, W), W if rn is None else rn)
    launcher(cdiv(P, block_p), args, consts, num_warps, maxnreg)


def _fwd_plan(D: int, H: int, config: tuple, out_dtype: torch.dtype, weight_dtype: torch.dtype,
              has_partial: bool, has_gate: bool, has_res: bool, narrow_storage: bool,
              append: int, nxt: int = 0, resume: int = 0, r_stored: int = 0, store_r0: int = 0
              ) -> tuple[bool, int, dict, int, int | None]:
    """(two-tile kernel?, BLOCK_P, constexprs, num_warps, maxnreg) of one forward launch: built
    once per key, which holds everything it is built from, including the launch config (so a
    sweep that changes the configs gets new plans). Host time per routing call matters:
    `benchmarks/kernels/host_overhead.py`.

    FOLD: where the sources are stored in 16 bits but no key rounding applies (autocast's
    training layout: fp32 source 0 and outputs, bf16 buffer), the logit is r * <q*g, v>: one
    row of registers fewer than q and g, products in another order (about an fp32 ulp per term,
    against the 2^-8 of the stored sources). fp32 storage keeps the reference's order r*v*g*q:
    there the fp32 path must stay within 2.5e-6 of float64 on every gradient, which the fold
    exceeded on an H100 (3.6e-6 at N=17, d=768, H=2; the session diary, git show 56d8861:benchmarks/kernels/results_h100.md).
    Head widths that are not a power of two run as two exact tiles (`head_split`)."""
    K = D // H
    block_k, block_p, num_warps, maxnreg, stages = config
    rk, rk2, fold = logit_form(out_dtype, weight_dtype, narrow_storage)
    flags = dict(BLOCK_P=block_p, HAS_PARTIAL=has_partial, HAS_GATE=has_gate, ROUND_KEY=rk,
                 ROUND_KEY2=rk2, HAS_RES=has_res, FOLD=fold, STAGES=stages, APPEND=append,
                 W_STAGES=W_STAGES, NEXT=nxt, RESUME=resume, W_ROWS=W_ROWS, R_STORED=r_stored,
                 STORE_R0=store_r0)
    split = head_split(K)
    if split is not None:
        k1, k2, block_k2 = split
        return True, block_p, dict(D=D, H=H, K=K, K1=k1, K2=k2, BLOCK_K2=block_k2, **flags), \
            num_warps, maxnreg
    return False, block_p, dict(D=D, H=H, K=K, BLOCK_K=block_k, **flags), num_warps, maxnreg


# Stages of the pipelined loop at the end of every forward program that turns the stored
# logits into weights (-3% / -4% of the forward at 350M / 1B against a plain loop; the session diary,
# git show 56d8861:benchmarks/kernels/results_h100.md).
W_STAGES = 3
# Logit rows an iteration of that loop (one [W_ROWS, BLOCK_P, H] tile): at H = 8 a one-position
# program's 16 rows are 128 elements, two a lane of a two-warp program.
W_ROWS = 16
# The stored row norms (R_STORED) are the stack's design: step records carry this as
# `routing_stored_norms`, so that byte floors count the forward bytes of the kernels that ran
# (`floors.forward_bytes(stored_r=...)`; records without it predate the design).
ROW_NORMS_STORED = True
_FWD = Launcher(route_fwd_kernel)
_FWD_SPLIT = Launcher(route_fwd_split_kernel)
_FWD_PLANS: dict[tuple, tuple] = {}  # see launch_route_fwd
