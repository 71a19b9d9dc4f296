"""A routing dataset read from disk, checked against the capture schema (`schema.py`).

    dims        `site`, `source`, `head` present, each 1..`MAX_SIZE` long; every variable of
                `VARIABLE_DIMS` that is present has exactly its dims
    coords      `site`, `source`, `head` are 0..n-1; `site_num_sources` in [1, source],
                `site_num_heads` in [1, head] (integers)
    values      `weight_mean` finite and within [0, 1] wherever the site reads that source with
                that head (the cells `Layout.visible` marks; the rest are NaN by design); no
                variable holds an infinity, and none is NaN everywhere

A dataset that fails is refused with one `CaptureError` line naming the file and the fault.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from .errors import CaptureError

#: the dims of each variable `capture_routing` writes (capture.py `_finalize`)
VARIABLE_DIMS: dict[str, tuple[str, ...]] = {
    "weight_mean": ("site", "source", "head"),
    "weight_std": ("site", "source", "head"),
    "weight_mean_half": ("half", "site", "source", "head"),
    "tokens_half": ("half",),
    "documents_half": ("half",),
    "slice_kl": ("slicing", "site", "head", "slice"),
    "null_slice_kl": ("draw", "slicing", "site", "head", "slice"),
    "null_weight_mean": ("draw", "site", "source", "head"),
    "null_weight_mean_half": ("draw", "half", "site", "source", "head"),
    # the null's summary form (analysis.probes.null_summary): per-draw statistics of those maps
    "null_site_kl": ("draw", "slicing", "site"),
    "null_read_spread": ("draw", "site", "head"),
    "null_dev_max_abs": ("dev_first_sites", "draw"),
    "null_dev_mean_abs": ("dev_first_sites", "draw"),
    "null_dev_cross_head_spread": ("dev_first_sites", "draw"),
    "null_dev_replication_r": ("dev_first_sites", "draw"),
    "source_cosine": ("site", "source", "source_b"),
    "source_rms": ("site", "source"),
    "query_norm": ("site", "head"),
    "interleave_unit": ("site", "head"),
    "interleave_distinct": ("site", "head"),
}
REQUIRED = ("weight_mean",)
#: no model has more sites, sources or heads (2 x 1024 layers + 1)
MAX_SIZE = 4097


def _ints(ds: xr.Dataset, name: str, path: Path) -> np.ndarray:
    if name not in ds.coords:
        raise CaptureError(f"{path}: coordinate {name!r} is missing; not a dataset `mhar capture` wrote")
    values = np.asarray(ds[name].values)
    if values.dtype.kind not in "iu":
        raise CaptureError(f"{path}: coordinate {name!r} must hold integers, it holds {values.dtype}")
    return values


def check_routing_dataset(ds: xr.Dataset, path: str | Path) -> None:
    """Raise `CaptureError` for a routing dataset that does not fit the schema (module doc)."""
    path = Path(path)
    for dim in ("site", "source", "head"):
        if dim not in ds.dims:
            raise CaptureError(f"{path}: dimension {dim!r} is missing (it has {', '.join(map(str, ds.dims))}); "
                               f"not a dataset `mhar capture` wrote, or damaged")
        if not 1 <= ds.sizes[dim] <= MAX_SIZE:
            raise CaptureError(f"{path}: dimension {dim!r} has {ds.sizes[dim]} entries, outside [1, {MAX_SIZE}]")
    for name in REQUIRED:
        if name not in ds.data_vars:
            raise CaptureError(f"{path}: variable {name!r} is missing; capture the run again")
    for name, dims in VARIABLE_DIMS.items():
        if name in ds.data_vars and ds[name].dims != dims:
            raise CaptureError(f"{path}: variable {name!r} has dims {ds[name].dims}, the schema's are {dims}")
    for dim in ("site", "source", "head"):
        if not np.array_equal(_ints(ds, dim, path), np.arange(ds.sizes[dim])):
            raise CaptureError(f"{path}: coordinate {dim!r} is not 0..{ds.sizes[dim] - 1}")
    sources, heads = _ints(ds, "site_num_sources", path), _ints(ds, "site_num_heads", path)
    if ((sources < 1) | (sources > ds.sizes["source"])).any():
        raise CaptureError(f"{path}: site_num_sources {sources.tolist()[:8]} must lie in [1, {ds.sizes['source']}]")
    if ((heads < 1) | (heads > ds.sizes["head"])).any():
        raise CaptureError(f"{path}: site_num_heads {heads.tolist()[:8]} must lie in [1, {ds.sizes['head']}]")
    visible = ((np.arange(ds.sizes["source"])[None, :, None] < sources[:, None, None])
               & (np.arange(ds.sizes["head"])[None, None, :] < heads[:, None, None]))  # [S, N, H]
    weights = np.asarray(ds["weight_mean"].values, dtype=float)[visible]
    if not np.isfinite(weights).all():
        bad = int((~np.isfinite(weights)).sum())
        raise CaptureError(f"{path}: weight_mean holds {bad} NaN or infinite value(s) of the {weights.size} "
                           f"a site reads; the dataset is damaged, capture the run again")
    if ((weights < -1e-6) | (weights > 1 + 1e-6)).any():
        raise CaptureError(f"{path}: weight_mean holds values outside [0, 1] (e.g. "
                           f"{weights[(weights < 0) | (weights > 1)][0]:g}); routing weights are a softmax")
    for name in ds.data_vars:
        if "sample" in ds[name].dims or ds[name].dtype.kind != "f":
            continue  # per-token weights stay lazy
        values = np.asarray(ds[name].values)
        if np.isinf(values).any():
            raise CaptureError(f"{path}: variable {name!r} holds infinite values")
        if values.size and np.isnan(values).all():
            raise CaptureError(f"{path}: variable {name!r} is NaN everywhere")
