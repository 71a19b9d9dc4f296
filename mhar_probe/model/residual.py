"""Routing sites: the learned depth reads of the attention-residual family.

A replacement-form site s owns a query q (d,) initialised to zero and a key RMSNorm weight g
(d,) initialised to one, and reads the first `num_sources` sources of the depth history:

    site 2l   (attention input of layer l) reads sources [0, 2l+1)
    site 2l+1 (MLP input of layer l)       reads sources [0, 2l+2)
    site 2L   (before the final norm)      reads all 2L+1

A head-aligned site (`mhar_hw`, attention only) owns one full-width query per KV group
([G, d]) and returns one routed input per group ([G, B, T, d]).
A delta site additionally owns a scalar gate (zero at init): out = partial + gate * routed.
Which sites a model has and what each reads is its site plan (siteplan.py).

The backend a site routes with is the run-time setting `routing_backend` (routing.py's
`set_routing_backend`): a delta site routes itself and reads it at every forward; replacement
sites route over the `SourceStack` that `MHARModel` builds from its own setting.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .hooks import HookPoint
from .layers import RMSNorm
from .routing import DEFAULT_BACKEND, SourceStack, get_backend
from .siteplan import chain_num_sources, delta_site_plan, delta_sources_read, site_label


class RoutingSite(nn.Module):
    """One depth read: routes over the first `num_sources` entries of a `SourceStack`."""

    def __init__(self, d: int, num_heads: int, eps: float, index: int, layer: int, kind: str,
                 num_sources: int, num_queries: int = 1) -> None:
        super().__init__()
        self.index, self.layer, self.kind = index, layer, kind
        self.num_heads, self.eps, self.num_sources = num_heads, eps, num_sources
        self.query = nn.Parameter(torch.zeros(d) if num_queries == 1 else torch.zeros(num_queries, d))
        self.key_norm = RMSNorm(d, eps)
        self.hook_sources = HookPoint()  # [N, B, T, d]
        self.hook_weights = HookPoint()  # [N, B, T, H]   (H = G for a head-aligned site)
        self.hook_out = HookPoint()  # [B, T, d]         ([G, B, T, d] head-aligned)

    @property
    def label(self) -> str:
        return site_label(self.layer, self.kind)

    @property
    def routing_reads(self) -> list[tuple[int, int]]:
        """(d, H) of each routing call of this site: one H-head read, or one single-head read per
        KV group (head-aligned)."""
        d = self.query.shape[-1]
        return [(d, self.num_heads)] if self.query.dim() == 1 else [(d, 1)]

    def forward(self, stack: SourceStack) -> Tensor:
        n = self.num_sources
        if self.hook_sources.active:
            self.hook_sources(stack.stacked(n))
        g = self.key_norm.weight
        hooked = self.hook_weights.active  # unhooked, the weights are not gathered
        if self.query.dim() == 1:
            out, weights = stack.route(self.query, g, self.num_heads, self.eps, n)
        else:  # one full-width single-head read per KV group
            reads = [stack.route(q, g, 1, self.eps, n) for q in self.query]
            out = torch.stack([o for o, _ in reads])  # [G, B, T, d]
            if hooked:
                weights = torch.cat([w for _, w in reads], dim=-1)  # [N, B, T, G]
        if hooked:
            self.hook_weights(weights)
        return self.hook_out(out)


class DeltaSite(nn.Module):
    """Identity-preserving read (delta form): x = h + gate * route([null, block deltas]).

    With gate = 0 (its initial value) the sublayer sees exactly the additive stream h.
    `own_null`: the site holds its own null source `null` [d] (the released checkpoints' layout)
    instead of reading the model's shared one.
    """

    def __init__(self, d: int, num_heads: int, eps: float, index: int, layer: int, kind: str,
                 own_null: bool = False) -> None:
        super().__init__()
        self.index, self.layer, self.kind = index, layer, kind
        self.num_heads, self.eps = num_heads, eps
        self.routing_backend = DEFAULT_BACKEND  # run-time setting: routing.set_routing_backend
        self.routing_kernels: object = None  # with its options (triton: a KernelConfig; None: defaults)
        self.query = nn.Parameter(torch.zeros(d))
        self.key_norm = RMSNorm(d, eps)
        self.gate = nn.Parameter(torch.zeros(()))
        if own_null:
            self.null = nn.Parameter(torch.zeros(d))
        self.hook_sources = HookPoint()
        self.hook_weights = HookPoint()
        self.hook_out = HookPoint()

    @property
    def label(self) -> str:
        return site_label(self.layer, self.kind)

    @property
    def routing_reads(self) -> list[tuple[int, int]]:
        """(d, H) of this site's one routing call."""
        return [(self.query.shape[-1], self.num_heads)]

    def forward(self, h: Tensor, sources: Tensor) -> Tensor:  # h [B, T, d]; sources [N, B, T, d]
        if self.hook_sources.active:
            self.hook_sources(sources)
        out, weights = get_backend(self.routing_backend, self.routing_kernels).route(
            sources, self.query, self.key_norm.weight, self.num_heads, self.eps, partial=h, gate=self.gate)
        if self.hook_weights.active:
            self.hook_weights(weights)
        return self.hook_out(out)


class DeltaSources:
    """Block-aggregated source list of the delta form for one forward pass (shared by the
    from-scratch `delta` method and converted pretrained models).

    With h_b the additive stream entering the first layer of block b (h_B the final stream):

        delta_b = h_{b+1} - h_b                                  (completed block b)
        sources(site of block b, stream h) =
            [null, delta_0, ..., delta_{b-1}]              if the site opens block b
            [null, delta_0, ..., delta_{b-1}, h - h_b]     otherwise (current partial block)

    Call it once per site, in forward order, with the stream h the site reads. Opening a block
    (re)stores h_b by index, so re-running a layer under activation checkpointing, which only
    ever reads blocks <= its own, recomputes the same sources.
    """

    def __init__(self, block_of_layer: Sequence[int], null: Tensor) -> None:
        self.plan = delta_site_plan(block_of_layer)
        self.null = null  # [d] learnable null source
        self.starts: dict[int, Tensor] = {}  # b -> h_b   [B, T, d]
        self.deltas: dict[int, Tensor] = {}  # b -> delta_b  [B, T, d]
        self._null: Tensor | None = None  # null expanded to [B, T, d] once per pass

    def num_sources(self, site: int) -> int:
        return delta_sources_read(*self.plan[site])

    def __call__(self, site: int, h: Tensor) -> Tensor:  # h [B, T, d] -> [N, B, T, d]
        block, opens = self.plan[site]
        if opens:
            if block == 0:
                self.starts.clear(), self.deltas.clear()
                self._null = self.null.to(h.dtype).expand_as(h)
            else:
                self.deltas[block - 1] = h - self.starts[block - 1]
            self.starts[block] = h
        current = [] if opens else [h - self.starts[block]]
        return torch.stack([self._null, *(self.deltas[b] for b in range(block)), *current])


class ChainSources:
    """The chained boundary sources of the released checkpoints (siteplan.py, "chained boundary
    sources") for one forward pass. With p layers per block and h_l the stream entering layer l:

        c_0 = h_0,   c_k = h_{kp} - c_{k-1}
        sources(site s, stream h) = [null_s, c_0, ..., c_{j_s - 1}]

    where c_0 .. c_{j_s - 1} are the boundary sources written before site s reads: the attention
    site of boundary layer kp reads first and then writes c_k. Call it once per site, in forward
    order, with the stream h the site reads. c_k is stored by k, so re-running a layer under
    activation checkpointing recomputes the same sources.
    """

    def __init__(self, num_layers: int, layers_per_block: int, nulls: Sequence[Tensor]) -> None:
        self.L, self.p = num_layers, layers_per_block
        self.nulls = nulls  # one null [d] per site, in site order
        self.reads = [n - 1 for n in chain_num_sources(num_layers, layers_per_block)]  # j_s
        self.chain: dict[int, Tensor] = {}  # k -> c_k  [B, T, d]

    def __call__(self, site: int, h: Tensor) -> Tensor:  # h [B, T, d] -> [1 + j_s, B, T, d]
        read = torch.stack([self.nulls[site].to(h.dtype).expand_as(h),
                            *(self.chain[k] for k in range(self.reads[site]))])
        layer, sublayer = divmod(site, 2)
        if sublayer == 0 and layer < self.L and layer % self.p == 0:  # a boundary layer's attention site
            k = layer // self.p
            self.chain[k] = h if k == 0 else h - self.chain[k - 1]
        return read
