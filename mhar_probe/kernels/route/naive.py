"""Plain torch references of what each routing kernel computes: the ground truth the kernels are tested on.

Nothing here is fast and nothing here imports the model: these are eq. (mh) and its gradients
written out in float64 (or in the caller's dtype, where a test wants a rounding emulated), so
that a kernel can be compared with an independent reading of the same equations.

  route_reference_f64  -- the forward (`fwd.py`), float64 throughout
  route_bwd_reference  -- the closed-form backward of one call (`bwd.py`)
  collect_reference    -- the 4-bytes/pair decomposition of a shared stack's backward
                          (`bwd_collect.py`), float64
  fold_reference       -- the same gradients summed as the fold-block backward sums them
                          (`bwd_fold.py`: per-source accumulators of blocks of calls), float64
"""

from __future__ import annotations

import torch
from torch import Tensor


def route_reference_f64(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                        eps: float = 1e-6, partial: Tensor | None = None,
                        gate: Tensor | None = None, round_to: torch.dtype | None = None
                        ) -> tuple[Tensor, Tensor]:
    """Eq. (mh) in float64 throughout: (out [B, T, d], weights [N, B, T, H]).

        r_n     = rsqrt(mean(v_n^2) + eps)
        khat_n  = g * round(v_n r_n)                    (round: `round_to`, or none)
        w_{n,h} = softmax_n(<q_h, khat_{n,h}>)
        out_h   = sum_n w_{n,h} v_{n,h}                 (+ partial + gate * ..., delta form)

    `round_to` emulates the reference's rounding of the normalised key to a storage dtype."""
    N, B, T, D = sources.shape
    H, K = num_heads, D // num_heads
    v = sources.double()  # [N, B, T, D]
    normed = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    if round_to is not None:
        normed = normed.to(round_to).double()
    keys = norm_weight.double() * normed
    logits = torch.einsum("he,nbthe->nbth", query.double().view(H, K), keys.view(N, B, T, H, K))
    alpha = logits.softmax(0)  # [N, B, T, H]
    out = torch.einsum("nbth,nbthe->bthe", alpha, v.view(N, B, T, H, K)).reshape(B, T, D)
    if partial is not None:
        out = partial.double() + (gate.double() if gate is not None else 1.0) * out
    return out, alpha


def route_bwd_reference(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                        eps: float, weights: Tensor, dout: Tensor, gate: float = 1.0
                        ) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form (dsources [N, B, T, d], dq [d], dg [d]) for out = gate * mix, in `weights`'
    dtype (float64 for a truth), per position and head:

        D_j  = <dout_h, v_{j,h}>,   S = sum_j w_j D_j,   dl_j = w_j (D_j - S)
        E    = sum_{p,j} dl_j round(v_j r_j),            dq = g * E,  dg = q * E
        dk_j = dl_j (q * g),   dv_j = r_j dk_j - (r_j^3 / d) <dk_j, v_j> v_j + w_j dout"""
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


def collect_reference(sources: list[Tensor], calls: list[tuple[int, Tensor, Tensor, int]],
                      weights: list[Tensor], douts: list[Tensor], outs: list[Tensor],
                      residuals: list[Tensor | None], eps: float, round_to: list[torch.dtype | None]
                      ) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """The shared stack's backward as `bwd_collect.py` decomposes it, in float64:
    (dv_j [P, d] per source, dq_c, dg_c [d] per call).

        shift_c  = <dout_c, out_c>,   S'_c = <dout_c, res_c> (0 where res_c is None)
        dl_{c,j} = w_{c,j} (<dout_c, v_j> - shift_c - S'_c)
        dv_j     = sum_c [w_{c,j} dout_c + r_j dk - (r_j^3/d) <dk, v_j> v_j],  dk = dl_{c,j} q_c g_c
        E_c      = sum_j sum_p dl_{c,j} round_c(v_j r_j),  dq_c = g_c E_c,  dg_c = q_c E_c

    sources: [P, d] rows; calls: (n, q, g, H) in call order; weights[c]: [n, P, H];
    douts/outs/residuals[c]: [P, d]; round_to[c]: call c's key rounding (None: none)."""
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


def fold_reference(sources: list[Tensor], calls: list[tuple[int, int, int, Tensor, Tensor, int]],
                   weights: list[Tensor], douts: list[Tensor], outs: list[Tensor],
                   residuals: list[Tensor | None], eps: float, fold_calls: int
                   ) -> tuple[list[Tensor], list[tuple[int, int, int]]]:
    """Source gradients dv_j [P, d] summed as the fold-block backward sums them, in float64, and
    the (first call, end call, sources folded) of every fold it made. Per reader c of source j:

        dl_{c,j} = w_{c,j} (<dout_c, v_j> - shift_c - S'_c)
        T_{c,j}  = w_{c,j} dout_c + r_j a - (r_j^3/d) <a, v_j> v_j,   a = dl_{c,j} (q_c * g_c)
        G_{B,j}  = sum_{c in B} T_{c,j}                (the block's terms, formed together)

    Nodes run from the top call down with a frontier F (start: top + 1). At node c the sources
    [j0_c, j1_c) get dv_j = ACC_j + G_{[c, F), j} (ACC_j = 0 before any fold); then, once
    F - c = fold_calls and j0_c > 0, ACC_j += G_{[c, F), j} for every j < j0_c and F = c.
    Equal to `collect_reference`'s dv in exact arithmetic (T is linear in dout_c and dl_{c,j}).

    calls: (n, j0, j1, q, g, H) in call order (sources [0, n) read, [j0, j1) first read by it);
    the other arguments as `collect_reference` (no key rounding: dv does not depend on it)."""
    f = torch.float64
    P, D = sources[0].shape
    top = len(calls) - 1

    def block(lo: int, hi: int, j: int) -> Tensor:  # G_{[lo, hi), j}, [P, d]
        v = sources[j].to(f)
        r = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
        acc_v = torch.zeros(P, D, dtype=f)
        acc_k = torch.zeros(P, D, dtype=f)
        for c in range(lo, hi):
            n, _, _, q, g, H = calls[c]
            if n <= j:
                continue
            K = D // H
            do = douts[c].to(f).view(P, H, K)
            shift = (do * outs[c].to(f).view(P, H, K)).sum(-1)
            s = 0.0 if residuals[c] is None else (do * residuals[c].to(f).view(P, H, K)).sum(-1)
            w = weights[c][j].to(f)  # [P, H]
            dl = w * ((do * v.view(P, H, K)).sum(-1) - shift - s)
            acc_v += (w[..., None] * do).reshape(P, D)
            acc_k += (dl[..., None] * (q.to(f) * g.to(f)).view(H, K)).reshape(P, D)
        return acc_v + r * acc_k - r.pow(3) / D * (acc_k * v).sum(-1, keepdim=True) * v

    acc = [torch.zeros(P, D, dtype=f) for _ in sources]
    dv: list[Tensor] = [torch.zeros(P, D, dtype=f) for _ in sources]
    folds: list[tuple[int, int, int]] = []
    frontier = top + 1
    for c in range(top, -1, -1):
        _, j0, j1, _, _, _ = calls[c]
        for j in range(j0, j1):
            dv[j] = acc[j] + block(c, frontier, j)
        if frontier - c >= fold_calls and j0 > 0:
            for j in range(j0):
                acc[j] = acc[j] + block(c, frontier, j)
            folds.append((c, frontier, j0))
            frontier = c
    return dv, folds
