"""The routing dataset's coordinates and provenance (what `mhar capture` writes; README "Python").

dims: `site`, `source`, `head` (+ `half`, `slicing`, `slice`, `draw`, `source_b`, and
`sample`, `position` for per-token weights).

Replacement forms (attnres / mhar / mhar_hw): source 0 = token embedding (kind embed, layer 0),
source 2l+1 = attention output of layer l (attn), 2l+2 = MLP output (mlp); site s reads
sources [0, s+1). Delta form: source 0 = the learnable null (kind null, layer -1), source
1+b = block b (kind block, layer = first layer of the block); at a site inside block b that
index holds the *running partial* delta of block b, at later sites its completed delta.
Cells a site cannot see are NaN; so are heads a site does not have (mhar_hw: G query groups at
attention sites, H heads elsewhere; `head` has max(G, H) entries).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..model import methods
from ..model.residual import delta_num_sources

DATASET_MARKER = "mhar_probe_dataset"
DATASET_KIND = "routing"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SiteInfo:
    index: int
    layer: int
    kind: str  # attn | mlp | final
    label: str
    num_sources: int
    num_heads: int  # heads this site has (G at a mhar_hw attention site)


@dataclass(frozen=True)
class Layout:
    """Sites and sources of one model, as the dataset's coordinates."""

    method: str
    sites: tuple[SiteInfo, ...]
    source_layer: tuple[int, ...]
    source_kind: tuple[str, ...]
    source_label: tuple[str, ...]

    @property
    def num_sites(self) -> int:
        return len(self.sites)

    @property
    def per_site_sources(self) -> bool:
        """Each site reads sources of its own (the delta form's partial block); otherwise every
        site reads a prefix of the final site's sources."""
        return methods.method(self.method).delta

    @property
    def num_sources(self) -> int:
        return len(self.source_label)

    @property
    def max_heads(self) -> int:
        return max(s.num_heads for s in self.sites)

    def visible(self) -> np.ndarray:
        """[site, source, head] True where the site reads that source with that head."""
        v = np.zeros((self.num_sites, self.num_sources, self.max_heads), dtype=bool)
        for i, s in enumerate(self.sites):
            v[i, : s.num_sources, : s.num_heads] = True
        return v

    def coords(self) -> dict[str, Any]:
        return {
            "site": np.arange(self.num_sites),
            "site_layer": ("site", np.array([s.layer for s in self.sites])),
            "site_kind": ("site", np.array([s.kind for s in self.sites], dtype=object)),
            "site_label": ("site", np.array([s.label for s in self.sites], dtype=object)),
            "site_num_sources": ("site", np.array([s.num_sources for s in self.sites])),
            "site_num_heads": ("site", np.array([s.num_heads for s in self.sites])),
            "source": np.arange(self.num_sources),
            "source_layer": ("source", np.array(self.source_layer)),
            "source_kind": ("source", np.array(self.source_kind, dtype=object)),
            "source_label": ("source", np.array(self.source_label, dtype=object)),
            "head": np.arange(self.max_heads),
        }


def layout_of(model: nn.Module) -> Layout:
    """The layout of a routed model; a model without routing sites is a user error."""
    from .errors import CaptureError

    cfg = model.config
    method = cfg.residual_method
    sites = list(model.model.sites) if hasattr(model, "model") else list(model.sites)
    if not sites:
        raise CaptureError(f"this model uses residual method {method!r}, which has no routing sites; "
                           f"capture needs one of {', '.join(methods.ROUTED_METHODS)}")
    L = cfg.num_hidden_layers
    if methods.method(method).delta:
        blocks = model.model.block_of_layer
        nsrc = delta_num_sources(blocks)
        nb = cfg.delta_num_blocks
        first = [blocks.index(b) for b in range(nb)]
        source_layer = (-1, *first)
        source_kind = ("null", *["block"] * nb)
        source_label = ("null", *[f"B{b}" for b in range(nb)])
    else:
        nsrc = [site.num_sources for site in sites]
        source_layer = (0, *[l for l in range(L) for _ in (0, 1)])
        source_kind = ("embed", *[k for _ in range(L) for k in ("attn", "mlp")])
        source_label = ("emb", *[f"L{l}.{k}" for l in range(L) for k in ("attn", "mlp")])
    infos = tuple(
        SiteInfo(index=site.index, layer=site.layer, kind=site.kind, label=site.label,
                 num_sources=n, num_heads=site.query.shape[0] if site.query.dim() == 2 else site.num_heads)
        for site, n in zip(sites, nsrc))
    return Layout(method, infos, source_layer, source_kind, source_label)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def provenance(model: nn.Module, *, run_path: str | Path | None, split: str, tokens: int, samples: int,
               backend: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """netCDF-safe attrs (str / int / float only) naming what was captured and from where."""
    from .. import __version__

    cfg = model.config
    weights = Path(run_path) / "model.safetensors" if run_path else None
    attrs: dict[str, Any] = {
        DATASET_MARKER: DATASET_KIND,
        "schema_version": SCHEMA_VERSION,
        "method": cfg.residual_method,
        "routing_heads": int(cfg.routing_heads),  # `H` in datasets written before: methods.routing_heads_of
        "G": int(cfg.num_key_value_heads),
        "d": int(cfg.hidden_size),
        "L": int(cfg.num_hidden_layers),
        "num_attention_heads": int(cfg.num_attention_heads),
        "head_dim": int(cfg.head_dim),
        "preset": str(cfg.preset or ""),
        "run_path": str(Path(run_path).resolve()) if run_path else "",
        "checkpoint_sha256": sha256_file(weights) if weights is not None and weights.exists() else "",
        "split": split,
        "tokens_seen": int(tokens),
        "samples_seen": int(samples),
        "routing_backend": backend,
        "package_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    for k, v in (extra or {}).items():
        attrs[k] = v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else str(v)
    return attrs
