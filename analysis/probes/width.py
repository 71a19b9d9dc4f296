"""Width-disagreement and its random-query null (paper Table `tab:probe`).

At site s, head h (H = 1: the whole query), slice j of S:
    a_j   = softmax_n(q_[j] . khat_n[j]),   alpha = softmax_n(q . khat_n)
    KL_s  = mean over tokens, slices (and heads) of KL(a_j || alpha)
The random-query null replaces q by r ||q|| / ||r||, r ~ N(0, I) (per draw); learned excess =
trained - null mean. Summaries average over sites that read at least two sources (a site with
one source has KL = 0 by construction and is no routing decision).

The null per draw is KL averaged over heads and slices [draw, slicing, site] (`null_site_kl`):
computed from the capture's draws (`null_slice_kl`) or read from the summary form
(`analysis.probes.null_summary`), which stores exactly that array.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .provenance import require_probes, with_provenance


def interleaved_differs(ds: xr.Dataset) -> bool:
    """Whether the head-interleaved slicing differs from the contiguous one at some routed head.
    False when every head is exactly S units wide: the control then computes the same KL. (Datasets
    captured before `interleave_distinct` was recorded: whether the two slicings' KL differ.)"""
    if "interleave_distinct" in ds:
        return bool((ds.interleave_distinct.where(ds.site_num_sources >= 2, 0) > 0).any())
    kl = ds.slice_kl
    return not np.array_equal(kl.sel(slicing="contiguous").values, kl.sel(slicing="interleaved").values,
                              equal_nan=True)


#: the summary form's variable: the null's KL per draw, averaged over heads and slices [draw, slicing, site]
NULL_SITE_KL = "null_site_kl"


def null_site_kl(ds: xr.Dataset) -> xr.DataArray:
    """The random-query null's slice-KL per draw, mean over heads and slices [draw, slicing, site]."""
    if NULL_SITE_KL in ds:
        return ds[NULL_SITE_KL].transpose("draw", "slicing", "site")
    return ds.null_slice_kl.mean(("head", "slice"), skipna=True)  # [draw, slicing, site]


def width_disagreement(ds: xr.Dataset) -> xr.Dataset:
    """Per-site and summary slice-KL for both slicings; dims [slicing, site] (+ draw for the null)."""
    require_probes(ds, "width-disagreement")
    kl = ds.slice_kl.mean(("head", "slice"), skipna=True)  # [slicing, site]
    null = null_site_kl(ds)  # [draw, slicing, site]
    routed = ds.site_num_sources >= 2
    null_mean = null.mean("draw")
    out = xr.Dataset({
        "kl": kl,
        "null_kl": null,
        "null_mean": null_mean,
        "null_std": null.std("draw", ddof=1) if null.sizes["draw"] > 1 else null_mean * float("nan"),
        "excess": kl - null_mean,
    })
    site_mean = lambda x: x.where(routed).mean("site")  # noqa: E731
    summary_null = site_mean(null)  # [draw, slicing]: one site-averaged null per draw
    out["summary_kl"] = site_mean(kl)
    out["summary_null_mean"] = summary_null.mean("draw")
    out["summary_null_std"] = summary_null.std("draw", ddof=1) if null.sizes["draw"] > 1 else summary_null.mean("draw") * float("nan")
    out["summary_excess"] = out.summary_kl - out.summary_null_mean
    out["summary_sites"] = int(routed.sum())
    out["interleaved_differs"] = interleaved_differs(ds)
    for name in out.data_vars:
        out[name].attrs["units"] = "nats"
    return with_provenance(out, "width_disagreement", [ds])
