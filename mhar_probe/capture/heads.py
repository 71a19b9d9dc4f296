"""Routing heads of a site as column blocks of one matrix, for the slice and null probes.

Head h of a site reads dims D_h of the keys with query q_h (mhar: D_h = [hK, (h+1)K) and q_h the
matching slice of the (d,) query; mhar_hw attention site: D_g = all d and q_g = query[g]).
Its logit for source n is  l_h(n) = sum_{i in D_h} q_h[i] khat_n[i].

Width-disagreement splits D_h into S slices; slice s has  l_{h,s}(n) = sum_{i in D_h^s} q_h[i] khat_n[i],
so l_h = sum_s l_{h,s} for either slicing:
  contiguous   D_h^s = the s-th of S equal consecutive chunks of D_h;
  interleaved  D_h^s = units u with u mod S == s, a unit being one attention head (head_dim
               dims) when D_h holds a multiple of S attention heads, else one dimension.
When D_h holds exactly S units (width = S * unit, e.g. `tiny`'s d = 128 = 4 x 32 at S = 4) the
interleaved slices are the contiguous ones: the control is empty, and `probe_matrix` says so.

All of them are columns of one matrix M [d, V * 2 * H * S] (V query variants: the trained
query and `draws` matched-norm random queries), so a site costs one matmul  keys @ M.
"""

from __future__ import annotations

import torch
from torch import Tensor

SLICINGS = ("contiguous", "interleaved")


def head_queries(query: Tensor, num_heads: int) -> list[tuple[Tensor, Tensor]]:
    """[(dims [K_h] long, q_h [K_h])] for each head of a site with parameter `query`."""
    d = query.shape[-1]
    if query.dim() == 2:  # mhar_hw attention site: G full-width single-head queries
        dims = torch.arange(d, device=query.device)
        return [(dims, q) for q in query]
    K = d // num_heads
    return [(torch.arange(h * K, (h + 1) * K, device=query.device), query[h * K:(h + 1) * K])
            for h in range(num_heads)]


def slice_assignment(width: int, slices: int, head_dim: int) -> tuple[Tensor, Tensor, int]:
    """Slice index of each of `width` dims: (contiguous [width], interleaved [width], unit)."""
    if width < slices:
        raise ValueError(f"cannot split a head of width {width} into {slices} slices")
    contiguous = torch.div(torch.arange(width) * slices, width, rounding_mode="floor")
    unit = head_dim if width % (head_dim * slices) == 0 else 1
    interleaved = (torch.arange(width) // unit) % slices
    return contiguous, interleaved, unit


def matched_norm_draws(heads: list[tuple[Tensor, Tensor]], draws: int, generator: torch.Generator) -> list[list[Tensor]]:
    """For each draw, per head: r ~ N(0, I), scaled to ||q_h|| (the matched-norm random query)."""
    out = []
    for _ in range(draws):
        row = []
        for dims, q in heads:
            r = torch.randn(len(dims), generator=generator, dtype=torch.float64)
            scale = q.detach().double().norm().cpu() / r.norm().clamp_min(1e-30)
            row.append((r * scale).to(q.device))
        out.append(row)
    return out


def probe_matrix(heads: list[tuple[Tensor, Tensor]], variants: list[list[Tensor]], d: int, slices: int,
                 head_dim: int, max_heads: int) -> tuple[Tensor, list[int], list[bool]]:
    """M [d, V, 2, max_heads, S] (zeros for absent heads), the interleave unit of each head, and
    whether its interleaved slicing differs from the contiguous one (False: an empty control).

    `variants[v][h]` is head h's query (on its dims) in variant v (v = 0: the trained query).
    """
    V = len(variants)
    dev = heads[0][0].device
    M = torch.zeros(d, V, len(SLICINGS), max_heads, slices, dtype=torch.float64, device=dev)
    units, distinct = [], []
    for h, (dims, _) in enumerate(heads):
        contiguous, interleaved, unit = slice_assignment(len(dims), slices, head_dim)
        units.append(unit)
        distinct.append(not torch.equal(contiguous, interleaved))
        for m, assign in enumerate((contiguous, interleaved)):
            assign = assign.to(dev)
            for v in range(V):
                q = variants[v][h].double()
                M[dims, v, m, h, assign] = q
    return M, units, distinct


def slice_kl(slice_logits: Tensor, head_logits: Tensor) -> Tensor:
    """KL(a_j || alpha) = sum_n a_j(n) (log a_j(n) - log alpha(n)), a_j = softmax_n(slice_logits[..., j]),
    alpha = softmax_n(head_logits); sources on dim 0.  [n, ..., J], [n, ...] -> [..., J]."""
    log_alpha = head_logits.log_softmax(0)
    log_a = slice_logits.log_softmax(0)
    return (log_a.exp() * (log_a - log_alpha.unsqueeze(-1))).sum(0)
