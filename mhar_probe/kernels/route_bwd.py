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
* the shared-stack pair `stack_call_bwd_kernel` + `stack_gather_kernel`:
  call c reads its sources once to form D'_{c,j} = D_{c,j} - <dout_c, out_c> (the shift keeps
  the covariance E free of cancellation), S'_c and E_c; the gradient of source j is then
  gathered once, when autograd reaches it, from every stored dout_{c'} (c' >= c) that read it:
      dv_j = sum_{c'} w_{c',j} dout_{c'} + r_j a_j - (r_j^3/d) <a_j, v_j> v_j,
      a_j  = sum_{c'} dl_{c',j} (q_{c'} * g_{c'})   (per head of call c').
  Bytes per pair-element: fwd 2 (read v) + bwd 2 (read v in the call kernel) + 2 (read dout in
  the gather) = 6 (bf16), against the 4 of DESIGN.md section 4 and the paper's ~14 (why not 4:
  see mhar_probe/kernels/README.md).
No atomics anywhere: dq/dg/dgate leave as per-program partials summed on the host.
`route_bwd_reference` is the plain torch closed form used to test the equations.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor


def route_bwd_reference(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                        eps: float, weights: Tensor, dout: Tensor, gate: float = 1.0
                        ) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form (dsources [N,B,T,d], dq [d], dg [d]) for out = gate * mix (fp32/fp64 math)."""
    N, B, T, D = sources.shape
    H, K = num_heads, D // num_heads
    v = sources.to(weights.dtype)
    do = dout.to(weights.dtype) * gate
    Dn = torch.einsum("bthe,nbthe->nbth", do.view(B, T, H, K), v.view(N, B, T, H, K))
    S = (weights * Dn).sum(0, keepdim=True)
    dl = weights * (Dn - S)  # [N, B, T, H]
    r = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    kh0 = (v * r).to(sources.dtype).to(weights.dtype)
    E = torch.einsum("nbth,nbthe->he", dl, kh0.view(N, B, T, H, K)).reshape(D)
    q, g = query.to(weights.dtype), norm_weight.to(weights.dtype)
    dk = (dl[..., None] * (q * g).view(H, K)).reshape(N, B, T, D)
    dv = r * dk - r.pow(3) / D * (dk * v).sum(-1, keepdim=True) * v
    dv = dv + (weights[..., None] * do.view(B, T, H, K)).reshape(N, B, T, D)
    return dv, g * E, q * E


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
        r = tl.rsqrt(tl.sum(tl.sum(v * v, axis=2), axis=1) / D + eps)  # [BP]
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
    """One source row of the call kernel: D' stored, S', A, Bv accumulated."""
    w = tl.load(wptr, mask=pmask[:, None], other=0.0)
    d_sh = tl.sum(do * v, axis=2) - shift  # [BP, H]
    tl.store(dptr, d_sh, mask=pmask[:, None])
    r = tl.rsqrt(tl.sum(tl.sum(v * v, axis=2), axis=1) / D + eps)
    kh = v * r[:, None, None]
    if ROUND_KEY:
        kh = kh.to(dtype).to(tl.float32)
    wd = w * d_sh
    return Ssh + wd, A + wd[:, :, None] * kh, Bv + w[:, :, None] * kh


@triton.jit
def stack_call_bwd_kernel(
    V, stride_vn, DOUT, OUT, DOUT_SLOT,  # V [>=N, P, D]; DOUT/OUT [P, D]; DOUT_SLOT [P, D] copy
    W, DSH, SSH,  # W/DSH: [N, P, H] fp32 (weights, shifted D'); SSH: [P, H] (shifted S')
    EPART,  # [programs, D] fp32
    P, N, eps,
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_P: tl.constexpr, ROUND_KEY: tl.constexpr,
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
    hoff = offs_p[:, None] * H + offs_h[None, :]  # [BP, H]
    do_raw = tl.load(DOUT + row, mask=mask, other=0.0)
    tl.store(DOUT_SLOT + row, do_raw.to(DOUT_SLOT.dtype.element_ty), mask=mask)
    do = do_raw.to(tl.float32)
    shift = tl.sum(do * tl.load(OUT + row, mask=mask, other=0.0).to(tl.float32), axis=2)
    Ssh = tl.zeros([BLOCK_P, H], tl.float32)
    A = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)  # sum_j w_j D'_j khat0_j
    Bv = tl.zeros([BLOCK_P, H, BLOCK_K], tl.float32)  # sum_j w_j khat0_j
    vptr = V + row
    v_next = tl.load(vptr, mask=mask, other=0.0)  # software prefetch: next row in flight
    for n in range(N - 1):
        v = v_next.to(tl.float32)
        vptr += stride_vn
        v_next = tl.load(vptr, mask=mask, other=0.0)
        Ssh, A, Bv = _call_bwd_step(v, do, shift, W + n * P * H + hoff, DSH + n * P * H + hoff,
                                    Ssh, A, Bv, pmask, eps, D, OUT.dtype.element_ty, ROUND_KEY)
    Ssh, A, Bv = _call_bwd_step(v_next.to(tl.float32), do, shift, W + (N - 1) * P * H + hoff,
                                DSH + (N - 1) * P * H + hoff, Ssh, A, Bv, pmask, eps, D,
                                OUT.dtype.element_ty, ROUND_KEY)
    tl.store(SSH + hoff, Ssh, mask=pmask[:, None])
    E = A - Ssh[:, :, None] * Bv  # = sum_j w_j (D_j - S) khat0_j
    tl.store(EPART + pid * D + col, tl.sum(E, axis=0), mask=cmask)


@triton.jit
def stack_gather_kernel(
    V, stride_vn, j, DX,  # V [cap, P, D] source buffer; DX [P, D] gradient of source j
    DOUT_BUF, stride_dc,  # [calls, P, D] stored douts
    U,  # [calls, D] fp32: q_c * g_c
    WALL, DALL, SALL,  # flat fp32: per call [n_c, P, H_c] weights / shifted D'; [P, H_c] S'
    CALL_N, CALL_H, CALL_WOFF, CALL_SOFF,  # int64 tables, one entry per call + sentinel
    c_start, c_end, P, eps,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_P: tl.constexpr,
):
    pid = tl.program_id(0)
    offs_p = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, BLOCK_D)
    pmask = offs_p < P
    dmask = offs_d < D
    mask = pmask[:, None] & dmask[None, :]
    row = offs_p.to(tl.int64)[:, None] * D + offs_d[None, :]  # [BP, BD]
    v = tl.load(V + j * stride_vn + row, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(v * v, axis=1) / D + eps)  # [BP]
    acc_v = tl.zeros([BLOCK_P, BLOCK_D], tl.float32)
    acc_k = tl.zeros([BLOCK_P, BLOCK_D], tl.float32)
    zero_d = tl.zeros([BLOCK_D], tl.int64)
    do_next = tl.load(DOUT_BUF + c_start * stride_dc + row,
                      mask=mask & ((zero_d + tl.load(CALL_N + c_start)) > j)[None, :], other=0.0)
    for c in range(c_start, c_end):
        n = tl.load(CALL_N + c)
        m = mask & ((zero_d + n) > j)[None, :]  # calls that did not read source j contribute nothing
        do = do_next.to(tl.float32)
        # tables carry a sentinel entry (n = 0) after the last call: no read past c_end
        do_next = tl.load(DOUT_BUF + (c + 1) * stride_dc + row,
                          mask=mask & ((zero_d + tl.load(CALL_N + c + 1)) > j)[None, :], other=0.0)
        hc = tl.load(CALL_H + c)
        hidx = (offs_d * hc) // D  # head of each column in call c
        woff = tl.load(CALL_WOFF + c)
        soff = tl.load(CALL_SOFF + c)
        pidx = offs_p[:, None] * hc + hidx[None, :]  # [BP, BD]
        w = tl.load(WALL + woff + j * P * hc + pidx, mask=m, other=0.0)
        dsh = tl.load(DALL + woff + j * P * hc + pidx, mask=m, other=0.0)
        ssh = tl.load(SALL + soff + pidx, mask=m, other=0.0)
        u = tl.load(U + c * D + offs_d, mask=dmask, other=0.0)
        acc_v += w * do
        acc_k += w * (dsh - ssh) * u[None, :]
    dot = tl.sum(acc_k * v, axis=1)
    dx = acc_v + r[:, None] * acc_k - (r * r * r * dot / D)[:, None] * v
    tl.store(DX + row, dx.to(DX.dtype.element_ty), mask=mask)


def gather_config(d: int) -> tuple[int, int, int]:
    """(BLOCK_D, BLOCK_P, num_warps) for the gather's [BLOCK_P, BLOCK_D] tile."""
    block_d = triton.next_power_of_2(d)
    block_p = max(1, min(16, 2048 // block_d))
    num_warps = 4 if block_d * block_p <= 2048 else 8
    return block_d, block_p, num_warps
