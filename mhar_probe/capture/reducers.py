"""Streaming reductions: fixed-size running sums, updated batch by batch.

Every accumulator is a sum over tokens p (with token weight m_p in {0, 1}, the attention mask)
split by half k(p) = (index of p's document) mod 2 where the batches name each token's document
(capture's own held-out rows do), so the halves are disjoint text; else k(p) = (global sample
index) mod 2, alternate rows. Totals are the halves' sum. Memory is independent of the number of
tokens (but for the sets of document indices seen in each half).

  weights      W[k, s, n, h]  = sum_p m_p w_{s,h}(n | p)            (captured weights)
               W2[s, n, h]    = sum_p m_p w_{s,h}(n | p)^2
  probes (from the sources and the site queries; variant v = 0 trained, 1..R random):
               A[v, s, n, h]  = sum_p m_p alpha^{(v)}_{s,h}(n | p)   (recomputed weights)
               A1[v, s, n, h] = the same over half 1's tokens only     (the halves of the null)
               KL[v, m, s, h, j] = sum_p m_p KL(a^{(v)}_{s,h,j} || alpha^{(v)}_{s,h})   (slicing m, slice j)
               C[s, n, n']    = sum_p m_p cos(x_n(p), x_n'(p))      (source collinearity)
               R[s, n]        = sum_p m_p ||x_n(p)|| / sqrt(d)      (source RMS)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.routing import rms_norm_keys
from .hooks import routing_sites
from .heads import SLICINGS, head_queries, matched_norm_draws, probe_matrix, slice_kl
from .schema import Layout

# positions per chunk are chosen so that one chunk's logits hold at most this many elements
CHUNK_ELEMENTS = 1 << 24


@dataclass
class ProbeSpec:
    slices: int = 4
    draws: int = 8
    seed: int = 0


class RoutingAccumulator:
    """Running sums for one capture (see the module docstring for the equations)."""

    def __init__(self, model: torch.nn.Module, layout: Layout, probes: ProbeSpec | None,
                 device: torch.device) -> None:
        self.layout, self.probes, self.device = layout, probes, device
        S, N, H = layout.num_sites, layout.num_sources, layout.max_heads
        f64 = dict(dtype=torch.float64, device=device)
        self.tokens = torch.zeros(2, **f64)  # [half]
        self.samples = 0
        self.halves_by: str | None = None  # "documents" or "rows", fixed by the first batch
        self.documents: tuple[set[int], set[int]] = (set(), set())  # document indices seen in each half
        self.W = torch.zeros(2, S, N, H, **f64)
        self.W2 = torch.zeros(S, N, H, **f64)
        self.max_recompute_err = 0.0
        cfg = model.config
        self.d, self.head_dim = cfg.hidden_size, cfg.head_dim
        self.sites = list(routing_sites(model))
        if probes is None:
            return
        V = 1 + probes.draws
        self.A = torch.zeros(V, S, N, H, **f64)
        self.A1 = torch.zeros(V, S, N, H, **f64)
        self.KL = torch.zeros(V, len(SLICINGS), S, H, probes.slices, **f64)
        self.C = torch.zeros(S, N, N, **f64)
        self.R = torch.zeros(S, N, **f64)
        self.query_norm = torch.full((S, H), float("nan"), dtype=torch.float64)
        self.matrices: list[Tensor] = []  # per site: [d, V*2*H*Sl] float32
        self.units = torch.zeros(S, H, dtype=torch.long)
        self.interleave_distinct = torch.zeros(S, H, dtype=torch.int8)  # 1: the interleaved control differs
        for s, site in enumerate(self.sites):
            heads = head_queries(site.query.detach(), site.num_heads)
            gen = torch.Generator().manual_seed(probes.seed * 1_000_003 + s)
            variants = [[q for _, q in heads], *matched_norm_draws(heads, probes.draws, gen)]
            M, units, distinct = probe_matrix(heads, variants, self.d, probes.slices, self.head_dim, H)
            self.matrices.append(M.reshape(self.d, -1).to(device=device, dtype=torch.float32))
            self.units[s, : len(units)] = torch.tensor(units)
            self.interleave_distinct[s, : len(distinct)] = torch.tensor(distinct, dtype=torch.int8)
            for h, (_, q) in enumerate(heads):
                self.query_norm[s, h] = q.detach().double().norm().cpu()

    # ------------------------------------------------------------------ updates
    def update_tokens(self, mask: Tensor, half: Tensor) -> tuple[Tensor, Tensor]:
        """mask [B, T] (float, on the device), half [B, T] -> token weights m [P] and the half-1
        indicator: per row [B] when every row lies in one half (rows split; documents that fill
        whole rows), else per token [B, T]. (The per-row form keeps `update_weights` free of
        token-sized temporaries.)"""
        m = mask.reshape(-1).to(torch.float64)  # [P]
        half = half.to(self.device)
        one = half.to(torch.float32)  # [B, T]
        counts = (mask * one).sum(1).to(torch.float64)  # [B] tokens of half 1 per row
        total = mask.sum(1).to(torch.float64)  # [B]
        self.tokens += torch.stack([(total - counts).sum(), counts.sum()])
        self.samples += int(mask.shape[0])
        return m, (one[:, 0] if bool((half == half[:, :1]).all()) else one)

    def update_weights(self, s: int, weights: Tensor, mask: Tensor | None, half_one: Tensor) -> None:
        """weights [n, B, T, h] captured at site s; mask [B, T] or None (all tokens); half_one: the
        half-1 indicator from `update_tokens`, per row [B] or per token [B, T].

        Sums over positions run in float32 within a row (<= T terms), then accumulate in float64.
        """
        n, _, _, h = weights.shape
        w = weights.float()
        wm = w if mask is None else w * mask[None, :, :, None]  # [n, B, T, h]
        total = wm.sum(2)  # [n, B, h]
        if half_one.dim() == 1:  # whole rows in one half
            in_one = total * half_one[None, :, None]
        else:
            in_one = (wm * half_one[None, :, :, None]).sum(2)
        self.W[1, s, :n, :h] += in_one.double().sum(1)
        self.W[0, s, :n, :h] += (total - in_one).double().sum(1)
        self.W2[s, :n, :h] += (wm * w).sum((1, 2)).double()

    def update_sources(self, s: int, sources: Tensor, m: Tensor, weights: Tensor | None,
                       geometry: bool = True, half1: Tensor | None = None) -> None:
        """Probe sums for site s from the sources it reads [n, B, T, d] (float64 accumulation).

        `weights` [n, B, T, h], when given, are checked against the recomputed trained weights;
        `half1` [P] (1 for a token of half 1) splits A by half (A1); None: every token in half 0.
        """
        assert self.probes is not None
        site = self.sites[s]
        n = sources.shape[0]
        x = sources.reshape(n, -1, self.d)  # [n, P, d]
        keys = rms_norm_keys(x, site.key_norm.weight.detach(), site.eps).float()  # [n, P, d]
        M = self.matrices[s]  # [d, C]
        V, Sl, H = 1 + self.probes.draws, self.probes.slices, self.layout.max_heads
        hs = self.layout.sites[s].num_heads
        P = x.shape[1]
        step = max(1, CHUNK_ELEMENTS // max(1, n * M.shape[1]))
        for p0 in range(0, P, step):
            mc = m[p0:p0 + step].float()  # [p]
            logits = (keys[:, p0:p0 + step] @ M).view(n, -1, V, len(SLICINGS), H, Sl)[..., :hs, :]
            head_logits = logits[:, :, :, 0].sum(-1)  # [n, p, V, hs]
            log_alpha = head_logits.log_softmax(0)
            # [n, p, V, 2, hs, Sl] slice logits vs the head's shared alpha -> [p, V, 2, hs, Sl]
            kl = slice_kl(logits, head_logits[:, :, :, None, :].expand(-1, -1, -1, len(SLICINGS), -1))
            self.KL[:, :, s, :hs] += torch.einsum("pvmhj,p->vmhj", kl, mc).double()
            alpha = log_alpha.exp()  # [n, p, V, hs]
            self.A[:, s, :n, :hs] += torch.einsum("npvh,p->vnh", alpha, mc).double()
            if half1 is not None:
                mc1 = mc * half1[p0:p0 + step].float()  # [p]
                self.A1[:, s, :n, :hs] += torch.einsum("npvh,p->vnh", alpha, mc1).double()
            if weights is not None:
                w = weights.reshape(n, P, -1)[:, p0:p0 + step].float()  # [n, p, hs]
                err = float((alpha[:, :, 0] - w).abs().max()) if w.numel() else 0.0
                self.max_recompute_err = max(self.max_recompute_err, err)
        if geometry:
            self.update_geometry(s, x, m)

    def update_geometry(self, s: int, x: Tensor, m: Tensor) -> None:
        """Collinearity sums C[s, :n, :n] and RMS R[s, :n] from sources x [n, P, d]."""
        n = x.shape[0]
        xf = x.double()
        norm = xf.norm(dim=-1)  # [n, P]
        u = xf / norm.clamp_min(1e-30)[..., None]  # [n, P, d]; a zero source has cosine 0
        um = (u * m[None, :, None]).reshape(n, -1)
        self.C[s, :n, :n] += um @ u.reshape(n, -1).T
        self.R[s, :n] += (norm / self.d ** 0.5) @ m

    def copy_geometry(self, src_site: int, dst_site: int, n: int) -> None:
        """Replacement forms: site s reads a prefix of the final site's sources."""
        self.C[dst_site, :n, :n] = self.C[src_site, :n, :n]
        self.R[dst_site, :n] = self.R[src_site, :n]
