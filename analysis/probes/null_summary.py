"""The random-query null of a routing dataset in its summary form: per draw, only the statistics the
probes and claims read.

`mhar capture` writes the null as maps per draw (the draws form, `NULL_DRAWS` in capture/io.py):
    null_slice_kl          [draw, slicing, site, head, slice]   slice-KL under random queries
    null_weight_mean       [draw, site, source, head]           their depth reads
    null_weight_mean_half  [draw, half, site, source, head]     the same on each half of the text
Every reader turns each draw into a few numbers first and only then takes the mean, sd, z or histogram
over draws, and those numbers are nonlinear in the maps (a max over cells, correlations, |w - 1/N|),
so a mean and sd per cell would not do. The summary form keeps exactly those numbers per draw:
    null_site_kl                [draw, slicing, site]      KL averaged over heads and slices (width.py)
    null_read_spread            [draw, site, head]         TV of the read from uniform (spread.py)
    null_dev_max_abs, null_dev_mean_abs, null_dev_cross_head_spread, null_dev_replication_r
                                [dev_first_sites, draw]    per-head deviation statistics (deviation.py),
                                                           multi-head datasets only
computed by the readers' own functions (`null_site_kl`, `null_read_spread`, `null_deviation_draws`),
so each reader gets the same arrays from either form and the same numbers to the last bit. An 8-head
100M capture with 64 draws shrinks from 2.1 MB to ~0.3 MB. What the summary drops: the null's maps
themselves (per-head deviation's `null_deviation`) and deviation statistics for other `first_sites`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from mhar_probe.capture.io import NULL_DRAWS

from .deviation import DEV_SITES, NULL_DEV, SUMMARY_FIRST_SITES, _sites_key, null_deviation_draws
from .spread import NULL_READ_SPREAD, null_read_spread
from .width import NULL_SITE_KL, null_site_kl

#: dataset attribute naming the null's form ("summary"; absent: the draws form)
NULL_FORM = "null_form"


def has_null_draws(ds: xr.Dataset) -> bool:
    """Whether `ds` holds any of the capture's null maps."""
    return any(name in ds for name in NULL_DRAWS)


def summarise_null(ds: xr.Dataset) -> xr.Dataset:
    """`ds` with its null maps replaced by the per-draw statistics the readers take from them (module
    doc); a dataset without null maps (already summarised, or captured without a null) is returned
    as it is. Everything measured on the trained queries is kept unchanged."""
    if not has_null_draws(ds):
        return ds
    out = ds.drop_vars([name for name in NULL_DRAWS if name in ds])
    if "null_slice_kl" in ds:
        out[NULL_SITE_KL] = null_site_kl(ds)  # [draw, slicing, site]
    spread = null_read_spread(ds)
    if spread is not None:
        out[NULL_READ_SPREAD] = (("draw", "site", "head"), spread)
    if "null_weight_mean" in ds and ds.sizes["head"] >= 2 and "slice_kl" in ds:
        rows = [null_deviation_draws(ds, fs) for fs in SUMMARY_FIRST_SITES]
        draws = ds.sizes["draw"]
        for key, name in NULL_DEV.items():
            if all(r[key].size == draws for r in rows):  # [NaN] where the capture had no halves
                out[name] = ((DEV_SITES, "draw"), np.stack([r[key] for r in rows]))
        out = out.assign_coords({DEV_SITES: [_sites_key(fs) for fs in SUMMARY_FIRST_SITES]})
    out.attrs[NULL_FORM] = "summary"
    return out
