"""The routing dataset's coordinates and provenance (what `mhar capture` writes; README "Python").

dims: `site`, `source`, `head` (+ `half`, `slicing`, `slice`, `draw`, `source_b`, and
`sample`, `position` for per-token weights).

The sites and sources are the model's site plan (`mhar_probe.model.siteplan`, whose docstring
states the layout): replacement forms (attnres / mhar / mhar_hw) read sources [0, s+1) at site s
(the embedding, then each layer's attention and MLP output); the delta form reads the null and
the block deltas (at a site inside block b, index 1+b holds the *running partial* delta of block
b, at later sites its completed delta).
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
from ..model.siteplan import SitePlan, site_plan_of

DATASET_MARKER = "mhar_probe_dataset"
DATASET_KIND = "routing"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Layout(SitePlan):
    """A model's site plan (sites and sources) as the dataset's coordinates."""

    @property
    def per_site_sources(self) -> bool:
        """Each site reads sources of its own (the delta form's partial block); otherwise every
        site reads a prefix of the final site's sources."""
        return methods.method(self.method).delta

    @property
    def source_layer(self) -> tuple[int, ...]:
        return tuple(s.layer for s in self.sources)

    @property
    def source_kind(self) -> tuple[str, ...]:
        return tuple(s.kind for s in self.sources)

    @property
    def source_label(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.sources)

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
    """The layout of a routed model (its config's site plan); a model without routing sites is a
    user error."""
    from .errors import CaptureError

    plan = site_plan_of(model.config)
    if not plan.sites:
        raise CaptureError(f"this model uses residual method {plan.method!r}, which has no routing sites; "
                           f"capture needs one of {', '.join(methods.ROUTED_METHODS)}")
    return Layout(plan.method, plan.sites, plan.sources)


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
