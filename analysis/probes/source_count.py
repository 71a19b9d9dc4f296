"""Matched-source-count control: compare width-disagreement at equal source counts N_s.

A larger model has sites that read more sources; to see whether its larger KL is only a
"more sources" effect, compare runs site by site at the same N_s (site s of a replacement-form
run reads N_s = s + 1 sources, so the common range is N_s <= min over runs of N). Reported:
KL, null and excess per run and N, each run's ratio to the first run's KL at the same N, and
the median of those ratios.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xarray as xr

from mhar_probe.capture.errors import CaptureError

from .provenance import run_label, with_provenance
from .width import width_disagreement


def _by_count(w: xr.Dataset, counts: np.ndarray, var: str) -> np.ndarray:
    """Mean of w[var] ([site]) over the sites of each source count in `counts`."""
    da = w[var]
    n = da.site_num_sources.values
    return np.array([np.nanmean(da.values[n == c]) if (n == c).any() else np.nan for c in counts])


def matched_source_count(datasets: Sequence[xr.Dataset], slicing: str = "contiguous",
                         labels: Sequence[str] | None = None) -> xr.Dataset:
    """dims [run, num_sources]; runs compared at every source count >= 2 they all have."""
    if not datasets:
        raise CaptureError("matched-source-count needs at least one routing dataset")
    widths = [width_disagreement(ds).sel(slicing=slicing) for ds in datasets]
    common = set.intersection(*[set(int(c) for c in ds.site_num_sources.values) for ds in datasets])
    counts = np.array(sorted(c for c in common if c >= 2))
    kl = np.stack([_by_count(w, counts, "kl") for w in widths])
    null = np.stack([_by_count(w, counts, "null_mean") for w in widths])
    ratio = kl / kl[:1]
    out = xr.Dataset(
        {"kl": (("run", "num_sources"), kl), "null_mean": (("run", "num_sources"), null),
         "excess": (("run", "num_sources"), kl - null), "ratio_to_first": (("run", "num_sources"), ratio),
         "median_ratio_to_first": ("run", np.nanmedian(ratio, axis=1) if counts.size else np.full(len(datasets), np.nan)),
         "matched_kl": ("run", np.nanmean(kl, axis=1) if counts.size else np.full(len(datasets), np.nan))},
        coords={"run": list(labels) if labels else [run_label(ds) for ds in datasets], "num_sources": counts},
    )
    out.attrs["slicing"] = slicing
    return with_provenance(out, "matched_source_count", list(datasets))
