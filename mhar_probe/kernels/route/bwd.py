"""Fused routing backward kernels, each beside the closed form it implements.

Notation per position p and call c (sources v_j, weights w_j = w_{c,j}, dout = dL/dout_c):

    D_j      = <dout_h, v_{j,h}>                       (per head, fp32)
    S        = sum_j w_j D_j                           (= <dout_h, out_h> of the fp32 mix)
    dl_j     = w_j (D_j - S)                           (softmax backward)
    E       += dl_j * round(v_j r_j)                   dq = g * sum_p E,  dg = q * sum_p E
    dk_j     = dl_j * (q * g)                          (grad wrt the normalised row, per head)
    dv_j     = r_j dk_j - (r_j^3 / d) <dk_j, v_j> v_j + w_j dout          (key + value path)

Two kernels for the two ways of organising that sum:

* `route_bwd_local_kernel` -- self-contained call (the delta form, or `route(sources, ...)`):
  two passes over the call's sources, gradients written straight to a fresh dV (the paper's
  per-call design, delta form; reads 2x, writes 1x per pair-element).
* the shared-stack kernel `stack_bwd_kernel` (one launch per call, persistent grid):
  call c reads its sources once to form D'_{c,j} = D_{c,j} - <dout_c, out_c> (the shift keeps
  the covariance E free of cancellation), S'_c and E_c; the gradient of source j is then
  gathered once, when autograd reaches it, from every stored dout_{c'} (c' >= c) that read it:
      dv_j = sum_{c'} w_{c',j} dout_{c'} + r_j a_j - (r_j^3/d) <a_j, v_j> v_j,
      a_j  = sum_{c'} dl_{c',j} (q_{c'} * g_{c'})   (per head of call c').
  Both halves run in the same program for the same positions (the gather of the sources
  first read by call c follows that call's own D'/S' stores after a block barrier), so a
  call's backward is one launch plus `dqdg_kernel`, which reduces the per-program E partials
  in a fixed order (no atomics: bitwise repeatable).
  Bytes per pair-element: fwd 2 (read v) + bwd 2 (read v in the call kernel) + 2 (read dout in
  the gather) = 6 (bf16; 8 under autocast, where the routed outputs and so the stored douts are
  fp32), against the 4 of bwd_collect.py (kernels/README.md, "Design") and the paper's ~14. 4 needs the call's query
  gradient formed after the gathers, i.e. every site's parameters up front: the backward of
  bwd_collect.py, which the model runs; this one serves stacks built without them. Source
  0 is read through its own pointer V0: under autocast it is the fp32 embedding beside a bf16
  buffer.
No atomics anywhere: dq/dg/dgate leave as per-program partials summed on the host.
`naive.route_bwd_reference` is the plain torch closed form used to test the equations.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from mhar_probe.kernels.launch import Launcher, cdiv, next_pow2
from mhar_probe.kernels.route.fwd import block_rows, rsqrt_acc, split_cols


@triton.jit
def route_bwd_local_kernel(
    V, stride_vn, DOUT, Q, G, GATE, W, DV,  # V/DV: [N, P, D]; DOUT [P, D]; W [N, P, H] fp32
    EPART, GPART,  # [programs, D] fp32, [programs] fp32
    P, N, eps,
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_GATE: tl.constexpr, ROUND_KEY: tl.constexpr,
):
    pid = tl.program_id(0)
    offs_p = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_h = tl.arange(0, H)
    offs_k = tl.arange(0, BLOCK_K)
    col = offs_h[:, None] * K + offs_k[None, :]
    cmask = (offs_k < K)[None, :] & (offs_h < H)[:, None]
    pmask = offs_p < P
    mask = pmask[:, None, None] & cmask[None, :, :]
    row = offs_p.to(tl.int64)[:, None, None] * D + col[None, :, :]
    wptr = W + offs_p[:, None] * H + offs_h[None, :]
    do = tl.load(DOUT + row, mask=mask, other=0.0).to(tl.float32)  # [BP, H, BK]

    S = tl.zeros([BLOCK_P, H], tl.float32)  # pass 1: softmax coupling term
    vptr = V + row
    for n in range(N):
        v = tl.load(vptr, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(wptr + n * P * H, mask=pmask[:, None], other=0.0)
        S += w * tl.sum(do * v, axis=2)
        vptr += stride_vn
    tl.store(GPART + pid, tl.sum(tl.sum(S, axis=1), axis=0))  # <dout, mix> for dgate
    gt = 1.0
    if HAS_GATE:
        gt = tl.load(GATE).to(tl.float32)
    u = tl.load(Q + col, mask=cmask, other=0.0).to(tl.float32) * \
        tl.load(G + col, mask=cmask, other=0.0).to(tl.float32)  # [H, BK]
    E = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)
    vptr = V + row
    dvptr = DV + row
    for n in range(N):  # pass 2: every gradient, norm recomputed
        v = tl.load(vptr, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(wptr + n * P * H, mask=pmask[:, None], other=0.0)
        dl = gt * w * (tl.sum(do * v, axis=2) - S)  # [BP, H]
        r = rsqrt_acc(tl.sum(tl.sum(v * v, axis=2), axis=1) / D + eps)  # [BP]
        kh = v * r[:, None, None]
        if ROUND_KEY:
            kh = kh.to(DV.dtype.element_ty).to(tl.float32)
        E += dl[:, :, None] * kh
        dk = dl[:, :, None] * u[None, :, :]
        dot = tl.sum(tl.sum(dk * v, axis=2), axis=1)  # [BP]
        dv = r[:, None, None] * dk - (r * r * r * dot / D)[:, None, None] * v \
            + (gt * w)[:, :, None] * do
        tl.store(dvptr, dv.to(DV.dtype.element_ty), mask=mask)
        vptr += stride_vn
        dvptr += stride_vn
    tl.store(EPART + pid * D + col, tl.sum(E, axis=0), mask=cmask)


@triton.jit
def _call_bwd_step(v, do, shift, wptr, dptr, Ssh, A, Bv, pmask, eps, D: tl.constexpr,
                   dtype: tl.constexpr, ROUND_KEY: tl.constexpr):
    """One source row of the call part: D' stored, S', A, Bv accumulated."""
    w = tl.load(wptr, mask=pmask[:, None], other=0.0)
    d_sh = tl.sum(do * v, axis=2) - shift  # [BP, H]
    tl.store(dptr, d_sh, mask=pmask[:, None])
    r = rsqrt_acc(tl.sum(tl.sum(v * v, axis=2), axis=1) / D + eps)
    kh = v * r[:, None, None]
    if ROUND_KEY:
        kh = kh.to(dtype).to(tl.float32)
    wd = w * d_sh
    return Ssh + wd, A + wd[:, :, None] * kh, Bv + w[:, :, None] * kh


@triton.jit
def _pair_weights(j, c, offs_p, offs_hm, pmask, zero_h, WALL, DALL, SALL, CALL_N, CALL_H, CALL_WOFF,
                  CALL_SOFF, P, HM: tl.constexpr):
    """w_{c,j} and dl_{c,j} = w (D' - S') of call c and source j per position and sub-head
    [BP, HM] (each of call c's heads covers HM / H_c sub-heads; zero where c does not read j)."""
    rd = (zero_h + tl.load(CALL_N + c)) > j  # [HM]: does call c read source j
    m2 = pmask[:, None] & rd[None, :]  # [BP, HM]
    hc = tl.load(CALL_H + c)
    hidx = (offs_hm * hc) // HM  # head of call c owning each sub-head
    pidx = offs_p[:, None] * hc + hidx[None, :]  # [BP, HM]
    wo = tl.load(CALL_WOFF + c) + j * P * hc
    wg = tl.load(WALL + wo + pidx, mask=m2, other=0.0)
    dsh = tl.load(DALL + wo + pidx, mask=m2, other=0.0)
    ssh = tl.load(SALL + tl.load(CALL_SOFF + c) + pidx, mask=m2, other=0.0)
    return wg, wg * (dsh - ssh)


@triton.jit
def _gather_source(vg, j, call, top1, rowm, offs_p, offs_hm, colm, maskm, cmaskm, pmask,
                   DOUT_BUF, stride_dc, WALL, DALL, SALL, U, CALL_N, CALL_H, CALL_WOFF, CALL_SOFF,
                   P, eps, D: tl.constexpr, HM: tl.constexpr, BLOCK_P: tl.constexpr,
                   BLOCK_KM: tl.constexpr):
    """dv_j for one block of positions (vg: source row j, fp32 [BP, HM, BKM]) from every stored
    dout of the calls c >= call that read source j."""
    rg = rsqrt_acc(tl.sum(tl.sum(vg * vg, axis=2), axis=1) / D + eps)  # [BP]
    acc_v = tl.zeros([BLOCK_P, HM, BLOCK_KM], tl.float32)
    acc_k = tl.zeros([BLOCK_P, HM, BLOCK_KM], tl.float32)
    zero_h = tl.zeros([HM], tl.int64)
    rd = (zero_h + tl.load(CALL_N + call)) > j  # [HM]: does call c read source j
    do_next = tl.load(DOUT_BUF + call * stride_dc + rowm, mask=maskm & rd[None, :, None], other=0.0)
    for c in range(call, top1):
        dog = do_next.to(tl.float32)
        # tables carry a sentinel call (n = 0) after the last: no read past top1
        rd_next = (zero_h + tl.load(CALL_N + c + 1)) > j
        do_next = tl.load(DOUT_BUF + (c + 1) * stride_dc + rowm,
                          mask=maskm & rd_next[None, :, None], other=0.0)
        wg, dl = _pair_weights(j, c, offs_p, offs_hm, pmask, zero_h, WALL, DALL, SALL, CALL_N, CALL_H,
                               CALL_WOFF, CALL_SOFF, P, HM)
        # [1, HM, BKM]: loaded in the row tile's layout (a 2-D load is converted per reader)
        u = tl.load(U + c * D + colm[None, :, :], mask=cmaskm[None, :, :], other=0.0)
        acc_v += wg[:, :, None] * dog
        acc_k += dl[:, :, None] * u
    dot = tl.sum(tl.sum(acc_k * vg, axis=2), axis=1)
    return acc_v + rg[:, None, None] * acc_k - (rg * rg * rg * dot / D)[:, None, None] * vg


@triton.jit
def stack_bwd_kernel(
    V0,  # [P, D] source row 0 (its own tensor; may be wider than the buffer)
    V, stride_vn,  # V [cap, P, D] source buffer (rows >= 1)
    DOUT, OUT,  # [P, D] this call's dout and output
    DOUT_BUF, stride_dc,  # [calls, P, D] stored douts; this call's slot is written here
    WALL, DALL, SALL,  # flat fp32: per call [n_c, P, H_c] weights / shifted D'; [P, H_c] S'
    U,  # [calls, D] fp32: q_c * g_c
    CALL_N, CALL_H, CALL_WOFF, CALL_SOFF,  # int64 tables, one entry per call + sentinel
    DX,  # [j1 - j0, P, D]: gradients of the sources first read by this call
    EPART,  # [programs, D] fp32: per-program E partials of this call
    call, top1, n, woff, soff, j0, j1, P, eps,
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr,
    HM: tl.constexpr, KM: tl.constexpr, BLOCK_KM: tl.constexpr,
    BLOCK_P: tl.constexpr, ROUND_KEY: tl.constexpr, HAS_GATHER: tl.constexpr,
    GATHER0: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    dtype = OUT.dtype.element_ty  # the call's promoted source dtype (rounding of the key)
    # call part: [BP, H, BK] tile of this call's heads
    offs_h = tl.arange(0, H)
    offs_k = tl.arange(0, BLOCK_K)
    col = offs_h[:, None] * K + offs_k[None, :]
    cmask = (offs_k < K)[None, :] & (offs_h < H)[:, None]
    # gather part: [BP, HM, BKM] tile, HM = the most heads of any call (each call's H divides it)
    offs_hm = tl.arange(0, HM)
    offs_km = tl.arange(0, BLOCK_KM)
    colm = offs_hm[:, None] * KM + offs_km[None, :]
    cmaskm = (offs_km < KM)[None, :] & (offs_hm < HM)[:, None]
    E_acc = tl.zeros([H, BLOCK_K], tl.float32)
    num_blocks = tl.cdiv(P, BLOCK_P)
    for blk in range(pid, num_blocks, nprog):
        offs_p = blk * BLOCK_P + tl.arange(0, BLOCK_P)
        pmask = offs_p < P
        mask = pmask[:, None, None] & cmask[None, :, :]
        row = offs_p.to(tl.int64)[:, None, None] * D + col[None, :, :]
        hoff = offs_p[:, None] * H + offs_h[None, :]  # [BP, H]
        do_raw = tl.load(DOUT + row, mask=mask, other=0.0)
        v0 = tl.load(V0 + row, mask=mask, other=0.0)
        n_vec = tl.full([BLOCK_P], n, tl.int32)  # n as a tensor (n == 1 arrives as a constant)
        vptr = V + stride_vn + row  # software prefetch: the next two source rows are in flight
        v_n1 = tl.load(vptr, mask=mask & (n_vec > 1)[:, None, None], other=0.0)
        vptr += stride_vn
        v_n2 = tl.load(vptr, mask=mask & (n_vec > 2)[:, None, None], other=0.0)
        tl.store(DOUT_BUF + call * stride_dc + row, do_raw.to(DOUT_BUF.dtype.element_ty), mask=mask)
        do = do_raw.to(tl.float32)
        shift = tl.sum(do * tl.load(OUT + row, mask=mask, other=0.0).to(tl.float32), axis=2)
        Ssh = tl.zeros([BLOCK_P, H], tl.float32)
        A = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)  # sum_j w_j D'_j khat0_j
        Bv = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)  # sum_j w_j khat0_j
        Ssh, A, Bv = _call_bwd_step(v0.to(tl.float32), do, shift, WALL + woff + hoff,
                                    DALL + woff + hoff, Ssh, A, Bv, pmask, eps, D, dtype, ROUND_KEY)
        for jj in range(1, n):
            v = v_n1.to(tl.float32)
            v_n1 = v_n2
            vptr += stride_vn
            v_n2 = tl.load(vptr, mask=mask & (n_vec > jj + 2)[:, None, None], other=0.0)
            Ssh, A, Bv = _call_bwd_step(v, do, shift, WALL + woff + jj * P * H + hoff,
                                        DALL + woff + jj * P * H + hoff, Ssh, A, Bv, pmask, eps,
                                        D, dtype, ROUND_KEY)
        tl.store(SALL + soff + hoff, Ssh, mask=pmask[:, None])
        E_acc += tl.sum(A - Ssh[:, :, None] * Bv, axis=0)  # sum_j w_j (D_j - S) khat0_j
        if HAS_GATHER:
            tl.debug_barrier()  # this block's dout slot, D' and S' stores, read below by other threads
            maskm = pmask[:, None, None] & cmaskm[None, :, :]
            rowm = offs_p.to(tl.int64)[:, None, None] * D + colm[None, :, :]
            jlo = j0
            if GATHER0:  # source 0 lives in V0 (only the first call gathers it)
                vg = tl.load(V0 + rowm, mask=maskm, other=0.0).to(tl.float32)
                dx = _gather_source(vg, 0, call, top1, rowm, offs_p, offs_hm, colm, maskm, cmaskm,
                                    pmask, DOUT_BUF, stride_dc, WALL, DALL, SALL, U, CALL_N, CALL_H,
                                    CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, BLOCK_KM)
                tl.store(DX + rowm, dx.to(DX.dtype.element_ty), mask=maskm)
                jlo = j0 + 1
            for j in range(jlo, j1):
                vg = tl.load(V + j * stride_vn + rowm, mask=maskm, other=0.0).to(tl.float32)
                dx = _gather_source(vg, j, call, top1, rowm, offs_p, offs_hm, colm, maskm, cmaskm,
                                    pmask, DOUT_BUF, stride_dc, WALL, DALL, SALL, U, CALL_N, CALL_H,
                                    CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, BLOCK_KM)
                tl.store(DX + (j - j0) * P * D + rowm, dx.to(DX.dtype.element_ty), mask=maskm)
    tl.store(EPART + pid * D + col, E_acc, mask=cmask)


# ------------------------------------------- head width not a power of two: two exact tiles
# (the stack kernels' register prefetch of the next two source rows)
@triton.jit
def prefetch_split(V, stride_vn, rowa, rowb, maska, maskb, n_vec):
    """Rows 1 and 2 of V (two tiles each) in flight before the loop over rows; returns the
    pointers at row 2 and the four tiles (rows past n_vec read as zeros)."""
    pa = V + stride_vn + rowa
    pb = V + stride_vn + rowb
    v1a = tl.load(pa, mask=maska & (n_vec > 1)[:, None, None], other=0.0)
    v1b = tl.load(pb, mask=maskb & (n_vec > 1)[:, None, None], other=0.0)
    pa += stride_vn
    pb += stride_vn
    v2a = tl.load(pa, mask=maska & (n_vec > 2)[:, None, None], other=0.0)
    v2b = tl.load(pb, mask=maskb & (n_vec > 2)[:, None, None], other=0.0)
    return pa, pb, v1a, v1b, v2a, v2b


@triton.jit
def advance_split(pa, pb, v1a, v1b, v2a, v2b, stride_vn, maska, maskb, n_vec, n):
    """Inside the loop over rows: hand out row n (fp32), shift row n+1 up, load row n+2."""
    va = v1a.to(tl.float32)
    vb = v1b.to(tl.float32)
    pa += stride_vn
    pb += stride_vn
    v3a = tl.load(pa, mask=maska & (n_vec > n + 2)[:, None, None], other=0.0)
    v3b = tl.load(pb, mask=maskb & (n_vec > n + 2)[:, None, None], other=0.0)
    return va, vb, pa, pb, v2a, v2b, v3a, v3b


# As route_fwd_split_kernel: each head's K columns are read as [.., K1] + [.., BLOCK_K2] tiles
# (160 = 128 + 32 at 1B) instead of one tile padded to a power of two (256: 37.5% idle lanes).
# Same sums as `_call_bwd_step` / `_gather_source` / `stack_bwd_kernel`, the row reductions
# adding the two tiles' partial sums. Used when both the call's and the widest call's head
# width split (for a given d either every head width splits or none does).
@triton.jit
def _call_bwd_step_split(va, vb, doa, dob, shift, wptr, dptr, Ssh, Aa, Ab, Bva, Bvb, pmask, eps,
                         D: tl.constexpr, dtype: tl.constexpr, ROUND_KEY: tl.constexpr):
    w = tl.load(wptr, mask=pmask[:, None], other=0.0)
    d_sh = tl.sum(doa * va, axis=2) + tl.sum(dob * vb, axis=2) - shift  # [BP, H]
    tl.store(dptr, d_sh, mask=pmask[:, None])
    ss = tl.sum(tl.sum(va * va, axis=2), axis=1) + tl.sum(tl.sum(vb * vb, axis=2), axis=1)
    r = rsqrt_acc(ss / D + eps)
    kha = va * r[:, None, None]
    khb = vb * r[:, None, None]
    if ROUND_KEY:
        kha = kha.to(dtype).to(tl.float32)
        khb = khb.to(dtype).to(tl.float32)
    wd = w * d_sh
    return (Ssh + wd, Aa + wd[:, :, None] * kha, Ab + wd[:, :, None] * khb,
            Bva + w[:, :, None] * kha, Bvb + w[:, :, None] * khb)


@triton.jit
def _gather_source_split(vga, vgb, j, call, top1, rowma, rowmb, offs_p, offs_hm, colma, colmb,
                         maskma, maskmb, cmaskma, cmaskmb, pmask, DOUT_BUF, stride_dc, WALL, DALL,
                         SALL, U, CALL_N, CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D: tl.constexpr,
                         HM: tl.constexpr, BLOCK_P: tl.constexpr, KM1: tl.constexpr,
                         BLOCK_KM2: tl.constexpr):
    """`_gather_source` for a source row held as two tiles; returns dv_j as the two tiles."""
    ss = tl.sum(tl.sum(vga * vga, axis=2), axis=1) + tl.sum(tl.sum(vgb * vgb, axis=2), axis=1)
    rg = rsqrt_acc(ss / D + eps)  # [BP]
    acc_va = tl.zeros([BLOCK_P, HM, KM1], tl.float32)
    acc_vb = tl.zeros([BLOCK_P, HM, BLOCK_KM2], tl.float32)
    acc_ka = tl.zeros([BLOCK_P, HM, KM1], tl.float32)
    acc_kb = tl.zeros([BLOCK_P, HM, BLOCK_KM2], tl.float32)
    zero_h = tl.zeros([HM], tl.int64)
    rd = (zero_h + tl.load(CALL_N + call)) > j  # [HM]: does call c read source j
    dna = tl.load(DOUT_BUF + call * stride_dc + rowma, mask=maskma & rd[None, :, None], other=0.0)
    dnb = tl.load(DOUT_BUF + call * stride_dc + rowmb, mask=maskmb & rd[None, :, None], other=0.0)
    for c in range(call, top1):
        doga = dna.to(tl.float32)
        dogb = dnb.to(tl.float32)
        rd_next = (zero_h + tl.load(CALL_N + c + 1)) > j  # sentinel call (n = 0) after the last
        dna = tl.load(DOUT_BUF + (c + 1) * stride_dc + rowma, mask=maskma & rd_next[None, :, None],
                      other=0.0)
        dnb = tl.load(DOUT_BUF + (c + 1) * stride_dc + rowmb, mask=maskmb & rd_next[None, :, None],
                      other=0.0)
        wg, dl = _pair_weights(j, c, offs_p, offs_hm, pmask, zero_h, WALL, DALL, SALL, CALL_N, CALL_H,
                               CALL_WOFF, CALL_SOFF, P, HM)
        ua = tl.load(U + c * D + colma[None, :, :], mask=cmaskma[None, :, :], other=0.0)  # [1, HM, KM1]
        ub = tl.load(U + c * D + colmb[None, :, :], mask=cmaskmb[None, :, :], other=0.0)  # [1, HM, BKM2]
        acc_va += wg[:, :, None] * doga
        acc_vb += wg[:, :, None] * dogb
        acc_ka += dl[:, :, None] * ua
        acc_kb += dl[:, :, None] * ub
    return source_grad_split(acc_va, acc_vb, acc_ka, acc_kb, vga, vgb, rg, D)


@triton.jit
def source_grad_split(acc_va, acc_vb, acc_ka, acc_kb, vga, vgb, rg, D: tl.constexpr):
    """dv = acc_v + r a - (r^3/d) <a, v> v for a row held as two tiles (a = acc_k, r = rg)."""
    dot = tl.sum(tl.sum(acc_ka * vga, axis=2), axis=1) + tl.sum(tl.sum(acc_kb * vgb, axis=2), axis=1)
    fac = (rg * rg * rg * dot / D)[:, None, None]
    return (acc_va + rg[:, None, None] * acc_ka - fac * vga,
            acc_vb + rg[:, None, None] * acc_kb - fac * vgb)


@triton.jit
def stack_bwd_split_kernel(
    V0, V, stride_vn, DOUT, OUT, DOUT_BUF, stride_dc, WALL, DALL, SALL, U,  # as stack_bwd_kernel
    CALL_N, CALL_H, CALL_WOFF, CALL_SOFF, DX, EPART,
    call, top1, n, woff, soff, j0, j1, P, eps,
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr,
    BLOCK_K2: tl.constexpr, HM: tl.constexpr, KM: tl.constexpr, KM1: tl.constexpr,
    KM2: tl.constexpr, BLOCK_KM2: tl.constexpr, BLOCK_P: tl.constexpr, ROUND_KEY: tl.constexpr,
    HAS_GATHER: tl.constexpr, GATHER0: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    dtype = OUT.dtype.element_ty
    # call part: [BP, H, K1] + [BP, H, BK2] tiles of this call's heads
    offs_h = tl.arange(0, H)
    cola, colb, cmaska, cmaskb = split_cols(H, K, K1, K2, BLOCK_K2)
    # gather part: the same split of the widest call's heads (HM)
    offs_hm = tl.arange(0, HM)
    colma, colmb, cmaskma, cmaskmb = split_cols(HM, KM, KM1, KM2, BLOCK_KM2)
    E_acca = tl.zeros([H, K1], tl.float32)
    E_accb = tl.zeros([H, BLOCK_K2], tl.float32)
    num_blocks = tl.cdiv(P, BLOCK_P)
    for blk in range(pid, num_blocks, nprog):
        offs_p, pmask, maska, maskb, rowp, rowa, rowb = block_rows(blk, P, D, BLOCK_P, cola, colb, cmaska,
                                                                   cmaskb)
        hoff = offs_p[:, None] * H + offs_h[None, :]  # [BP, H]
        doa_raw = tl.load(DOUT + rowa, mask=maska, other=0.0)
        dob_raw = tl.load(DOUT + rowb, mask=maskb, other=0.0)
        v0a = tl.load(V0 + rowa, mask=maska, other=0.0)
        v0b = tl.load(V0 + rowb, mask=maskb, other=0.0)
        n_vec = tl.full([BLOCK_P], n, tl.int32)
        pa, pb, v1a, v1b, v2a, v2b = prefetch_split(V, stride_vn, rowa, rowb, maska, maskb, n_vec)
        tl.store(DOUT_BUF + call * stride_dc + rowa, doa_raw.to(DOUT_BUF.dtype.element_ty), mask=maska)
        tl.store(DOUT_BUF + call * stride_dc + rowb, dob_raw.to(DOUT_BUF.dtype.element_ty), mask=maskb)
        doa = doa_raw.to(tl.float32)
        dob = dob_raw.to(tl.float32)
        shift = tl.sum(doa * tl.load(OUT + rowa, mask=maska, other=0.0).to(tl.float32), axis=2) + \
            tl.sum(dob * tl.load(OUT + rowb, mask=maskb, other=0.0).to(tl.float32), axis=2)
        Ssh = tl.zeros([BLOCK_P, H], tl.float32)
        Aa = tl.zeros([BLOCK_P, H, K1], tl.float32)
        Ab = tl.zeros([BLOCK_P, H, BLOCK_K2], tl.float32)
        Bva = tl.zeros([BLOCK_P, H, K1], tl.float32)
        Bvb = tl.zeros([BLOCK_P, H, BLOCK_K2], tl.float32)
        Ssh, Aa, Ab, Bva, Bvb = _call_bwd_step_split(
            v0a.to(tl.float32), v0b.to(tl.float32), doa, dob, shift, WALL + woff + hoff,
            DALL + woff + hoff, Ssh, Aa, Ab, Bva, Bvb, pmask, eps, D, dtype, ROUND_KEY)
        for jj in range(1, n):
            va, vb, pa, pb, v1a, v1b, v2a, v2b = advance_split(pa, pb, v1a, v1b, v2a, v2b, stride_vn,
                                                               maska, maskb, n_vec, jj)
            Ssh, Aa, Ab, Bva, Bvb = _call_bwd_step_split(
                va, vb, doa, dob, shift, WALL + woff + jj * P * H + hoff,
                DALL + woff + jj * P * H + hoff, Ssh, Aa, Ab, Bva, Bvb, pmask, eps, D, dtype, ROUND_KEY)
        tl.store(SALL + soff + hoff, Ssh, mask=pmask[:, None])
        E_acca += tl.sum(Aa - Ssh[:, :, None] * Bva, axis=0)
        E_accb += tl.sum(Ab - Ssh[:, :, None] * Bvb, axis=0)
        if HAS_GATHER:
            tl.debug_barrier()  # this block's dout slot, D' and S' stores, read below by other threads
            maskma = pmask[:, None, None] & cmaskma[None, :, :]
            maskmb = pmask[:, None, None] & cmaskmb[None, :, :]
            rowma = rowp + colma[None, :, :]
            rowmb = rowp + colmb[None, :, :]
            jlo = j0
            if GATHER0:  # source 0 lives in V0 (only the first call gathers it)
                vga = tl.load(V0 + rowma, mask=maskma, other=0.0).to(tl.float32)
                vgb = tl.load(V0 + rowmb, mask=maskmb, other=0.0).to(tl.float32)
                dxa, dxb = _gather_source_split(
                    vga, vgb, 0, call, top1, rowma, rowmb, offs_p, offs_hm, colma, colmb, maskma,
                    maskmb, cmaskma, cmaskmb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, KM1, BLOCK_KM2)
                tl.store(DX + rowma, dxa.to(DX.dtype.element_ty), mask=maskma)
                tl.store(DX + rowmb, dxb.to(DX.dtype.element_ty), mask=maskmb)
                jlo = j0 + 1
            for j in range(jlo, j1):
                vga = tl.load(V + j * stride_vn + rowma, mask=maskma, other=0.0).to(tl.float32)
                vgb = tl.load(V + j * stride_vn + rowmb, mask=maskmb, other=0.0).to(tl.float32)
                dxa, dxb = _gather_source_split(
                    vga, vgb, j, call, top1, rowma, rowmb, offs_p, offs_hm, colma, colmb, maskma,
                    maskmb, cmaskma, cmaskmb, pmask, DOUT_BUF, stride_dc, WALL, DALL, SALL, U, CALL_N,
                    CALL_H, CALL_WOFF, CALL_SOFF, P, eps, D, HM, BLOCK_P, KM1, BLOCK_KM2)
                tl.store(DX + (j - j0) * P * D + rowma, dxa.to(DX.dtype.element_ty), mask=maskma)
                tl.store(DX + (j - j0) * P * D + rowmb, dxb.to(DX.dtype.element_ty), mask=maskmb)
    tl.store(EPART + pid * D + cola, E_acca, mask=cmaska)
    tl.store(EPART + pid * D + colb, E_accb, mask=cmaskb)


@triton.jit
def dqdg_kernel(EPART, rows, Q, G, DQ, DG, D: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_D: tl.constexpr):
    """E = sum of the per-program partials (fixed order); dq = g * E, dg = q * E (param dtypes)."""
    pid = tl.program_id(0)
    offs_d = pid * BLOCK_D + tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for r0 in range(0, rows, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        acc += tl.load(EPART + offs_r[:, None] * D + offs_d[None, :],
                       mask=(offs_r < rows)[:, None] & dmask[None, :], other=0.0)
    E = tl.sum(acc, axis=0)
    q = tl.load(Q + offs_d, mask=dmask, other=0.0).to(tl.float32)
    g = tl.load(G + offs_d, mask=dmask, other=0.0).to(tl.float32)
    tl.store(DQ + offs_d, (E * g).to(DQ.dtype.element_ty), mask=dmask)
    tl.store(DG + offs_d, (E * q).to(DG.dtype.element_ty), mask=dmask)


def launch_dqdg(epart: Tensor, query: Tensor, norm_weight: Tensor, dq: Tensor, dg: Tensor) -> None:
    rows, D = epart.shape  # narrow column blocks, each reducing every row in a fixed order;
    # the one-warp stack configs leave up to 16 partial rows per SM: narrower blocks then give
    # more programs (measured: 1B with 32-column blocks, 1.0 ms of dqdg per step against 0.3)
    block_d, block_r = (32, 128) if rows <= 512 else (8, 256)
    _DQDG(cdiv(D, block_d), (epart, rows, query.contiguous(), norm_weight.contiguous(), dq, dg),
          dict(D=D, BLOCK_R=block_r, BLOCK_D=block_d), 4)


_DQDG = Launcher(dqdg_kernel)
STACK_BWD = Launcher(stack_bwd_kernel)
STACK_BWD_SPLIT = Launcher(stack_bwd_split_kernel)
ROUTE_BWD_LOCAL = Launcher(route_bwd_local_kernel)
