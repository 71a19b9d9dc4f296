"""The site plan: which routing sites a model has, and the sources each one reads.

The one definition the decoder (which sites it builds), the FLOP count (what each site costs)
and the capture schema (the routing dataset's coordinates) all read. A model of L layers:

Replacement forms (attnres, mhar, mhar_hw), N = 2L+1 sources:

    source 0     token embedding             (kind embed, layer 0, label "emb")
    source 2l+1  attention output of layer l (kind attn,  layer l, label "L{l}.attn")
    source 2l+2  MLP output of layer l       (kind mlp,   layer l, label "L{l}.mlp")

    site 2l      attention input of layer l  reads sources [0, 2l+1)   N_s = s + 1
    site 2l+1    MLP input of layer l        reads sources [0, 2l+2)   N_s = s + 1
    site 2L      before the final norm       reads all 2L+1            N_s = s + 1

    Q_s full-width queries and H_s weight columns (heads) per site: Q_s = 1, H_s = H, except a
    head-aligned site (mhar_hw attention, G = num_key_value_heads > 1): Q_s = G single-head
    queries, H_s = G.

Delta form (delta), sources 1 + B for B blocks of consecutive layers:

    source 0     the learnable null          (kind null,  layer -1, label "null")
    source 1+b   block b's delta             (kind block, layer = the block's first layer, label "B{b}")

    a site of block b reads the null, the b completed deltas and, unless it is the attention
    site of the block's first layer (it *opens* b), b's running partial delta:
    N_s = 1 + b (opens) or 2 + b; the final site opens the virtual block B (N_s = 1 + B).
    Q_s = 1, H_s = H.

Delta form, chained boundary sources (`delta_sources="boundary_chain"`: the layout of the
paper's released checkpoints, `mhar import`). With p = ceil(L / num_blocks) layers per block,
boundary layers l = 0, p, 2p, ... and h_l the additive stream entering layer l:

    source 0     the site's own null          (kind null,  layer -1, label "null")
    source 1     c_0 = h_0, the embedding      (kind embed, layer 0,  label "emb")
    source 1+k   c_k = h_{kp} - c_{k-1}        (kind block, layer kp, label "C{k}")

    site 2l   (attention of layer l) reads the null and c_0 .. c_{j-1}, j = ceil(l / p)
              (the boundaries before l: layer l's own boundary source is written after its read)
    site 2l+1 (MLP of layer l)       reads the null and c_0 .. c_{j-1}, j = floor(l / p) + 1
    site 2L   (final)                reads the null and every c_k (K = ceil(L / p) of them)

baseline, hyper: no routing sites (and no sources).

This module is part of the code a saved run carries (`auto_map`): it imports only the
standard library and `.methods`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .methods import method

SiteKind = Literal["attn", "mlp", "final"]


def site_label(layer: int, kind: str) -> str:
    """'L3.attn', 'L3.mlp' or 'final'."""
    return "final" if kind == "final" else f"L{layer}.{kind}"


@dataclass(frozen=True)
class Site:
    """One routing site: where it sits and what it reads (see the module table)."""

    index: int  # s, in call order
    layer: int  # l; L for the final site
    kind: SiteKind
    num_sources: int  # N_s
    num_queries: int  # Q_s full-width queries (G at a head-aligned site)
    num_heads: int  # H_s weight columns: the routing heads H, or G at a head-aligned site

    @property
    def label(self) -> str:
        return site_label(self.layer, self.kind)


@dataclass(frozen=True)
class Source:
    """One entry of the depth history the sites read."""

    index: int
    layer: int  # the layer that writes it (0 for the embedding, -1 for the delta form's null)
    kind: Literal["embed", "attn", "mlp", "null", "block"]
    label: str


@dataclass(frozen=True)
class SitePlan:
    """Every routing site of one model, in call order, and the sources the last one can read."""

    method: str
    sites: tuple[Site, ...]
    sources: tuple[Source, ...]

    @property
    def num_sites(self) -> int:
        return len(self.sites)

    @property
    def num_sources(self) -> int:
        return len(self.sources)


def site_positions(num_layers: int) -> list[tuple[int, SiteKind]]:
    """(layer, kind) of the 2L+1 sites: attention and MLP input of every layer, then the final site."""
    return [(layer, kind) for layer in range(num_layers) for kind in ("attn", "mlp")] + [(num_layers, "final")]


#: how the delta form builds its sources: our block deltas, or the released checkpoints' chain
DELTA_SOURCES = ("block_deltas", "boundary_chain")


def site_plan(method_name: str, num_layers: int, *, routing_heads: int, num_key_value_heads: int = 1,
              delta_num_blocks: int = 1, delta_sources: str = "block_deltas") -> SitePlan:
    """The site plan of a `method_name` model with `num_layers` layers (module table);
    ValueError for an unknown method or source rule."""
    props = method(method_name)
    positions = site_positions(num_layers)
    if props.replaces:
        G = num_key_value_heads
        sites = []
        for s, (layer, kind) in enumerate(positions):
            aligned = props.head_wise and kind == "attn" and G > 1
            sites.append(Site(s, layer, kind, num_sources=s + 1, num_queries=G if aligned else 1,
                              num_heads=G if aligned else routing_heads))
        sources = [Source(0, 0, "embed", "emb")] + [
            Source(1 + 2 * layer + i, layer, kind, f"L{layer}.{kind}")
            for layer in range(num_layers) for i, kind in enumerate(("attn", "mlp"))]
        return SitePlan(method_name, tuple(sites), tuple(sources))
    if props.delta and delta_sources == "boundary_chain":
        p = chain_layers_per_block(num_layers, delta_num_blocks)
        sites = [Site(s, layer, kind, num_sources=n, num_queries=1, num_heads=routing_heads)
                 for s, ((layer, kind), n) in enumerate(zip(positions, chain_num_sources(num_layers, p)))]
        sources = [Source(0, -1, "null", "null"), Source(1, 0, "embed", "emb")] + [
            Source(1 + k, k * p, "block", f"C{k}") for k in range(1, chain_num_boundaries(num_layers, p))]
        return SitePlan(method_name, tuple(sites), tuple(sources))
    if props.delta and delta_sources != "block_deltas":
        raise ValueError(f"unknown delta source rule {delta_sources!r}; choose one of {', '.join(DELTA_SOURCES)}")
    if props.delta:
        blocks = delta_block_of_layer(num_layers, delta_num_blocks)
        sites = [Site(s, layer, kind, num_sources=n, num_queries=1, num_heads=routing_heads)
                 for s, ((layer, kind), n) in enumerate(zip(positions, delta_num_sources(blocks)))]
        sources = [Source(0, -1, "null", "null")] + [
            Source(1 + b, blocks.index(b), "block", f"B{b}") for b in range(delta_num_blocks)]
        return SitePlan(method_name, tuple(sites), tuple(sources))
    return SitePlan(method_name, (), ())


def site_plan_of(config: Any) -> SitePlan:
    """The site plan of an `MHARConfig` (or any object with its fields)."""
    return site_plan(config.residual_method, config.num_hidden_layers, routing_heads=config.routing_heads,
                     num_key_value_heads=config.num_key_value_heads,
                     delta_num_blocks=getattr(config, "delta_num_blocks", 1),
                     delta_sources=getattr(config, "delta_sources", "block_deltas"))


# ---------------------------------------------------------------------- the delta form's blocks
def delta_block_of_layer(num_layers: int, num_blocks: int) -> list[int]:
    """Block index of each layer: `num_blocks` contiguous blocks, sizes differing by at most one."""
    return [layer * num_blocks // num_layers for layer in range(num_layers)]


def delta_site_plan(block_of_layer: Sequence[int]) -> list[tuple[int, bool]]:
    """(block b, opens) for each of the 2L+1 delta sites, in site order (attn, mlp per layer, final).

    The attention site of the first layer of block b *opens* b; the final site opens the
    virtual block `num_blocks` (every real block is then complete). A site that opens b reads
    1 + b sources, any other site of block b reads 2 + b (its block's partial delta is non-zero).
    """
    num_blocks = block_of_layer[-1] + 1
    plan: list[tuple[int, bool]] = []
    for layer, block in enumerate(block_of_layer):
        opens = layer == 0 or block != block_of_layer[layer - 1]
        plan += [(block, opens), (block, False)]  # attention site, MLP site
    return plan + [(num_blocks, True)]


def delta_sources_read(block: int, opens: bool) -> int:
    """A site of block b reads the null source, b completed deltas and, unless it opens b, b's partial."""
    return 1 + block + (0 if opens else 1)


def delta_num_sources(block_of_layer: Sequence[int]) -> list[int]:
    """Sources each of the 2L+1 delta sites reads, in site order (see `delta_site_plan`)."""
    return [delta_sources_read(block, opens) for block, opens in delta_site_plan(block_of_layer)]


# ---------------------------------------------------------------------- chained boundary sources
def chain_layers_per_block(num_layers: int, num_blocks: int) -> int:
    """p = ceil(L / num_blocks): layers 0, p, 2p, ... are the boundaries of the chained rule."""
    return max(1, -(-num_layers // num_blocks))


def chain_num_boundaries(num_layers: int, layers_per_block: int) -> int:
    """K = ceil(L / p) boundary sources c_0 .. c_{K-1} (can be fewer than num_blocks)."""
    return -(-num_layers // layers_per_block)


def chain_num_sources(num_layers: int, layers_per_block: int) -> list[int]:
    """Sources each of the 2L+1 chained-rule sites reads (its null + the boundary sources written
    before its read), in site order (see the module table)."""
    p = layers_per_block
    counts = []
    for layer in range(num_layers):
        counts += [1 + -(-layer // p), 1 + layer // p + 1]
    return counts + [1 + chain_num_boundaries(num_layers, p)]
