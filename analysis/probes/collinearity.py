"""Source collinearity: mean pairwise cosine of the sources a site reads.

    col_s = mean_{n < n' < N_s} E_p cos(x_n(p), x_n'(p))
and over all sources: the final site, which reads all N = 2L+1 (or all delta sources).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .provenance import require_probes, with_provenance


def source_collinearity(ds: xr.Dataset) -> xr.Dataset:
    """`site_cosine` [site] (NaN for one-source sites), `all_sources_cosine` (final site)."""
    require_probes(ds, "source collinearity")
    C = ds.source_cosine.values  # [site, source, source_b], NaN beyond the site's sources
    N = C.shape[1]
    upper = np.triu(np.ones((N, N), dtype=bool), k=1)
    per_site = np.array([np.nanmean(c[upper]) if np.isfinite(c[upper]).any() else np.nan for c in C])
    out = xr.Dataset({"site_cosine": ("site", per_site)}, coords={k: ds[k] for k in ("site", "site_label", "site_num_sources")})
    out["all_sources_cosine"] = float(per_site[-1])
    out["num_sources_all"] = int(ds.site_num_sources.values[-1])
    return with_provenance(out, "source_collinearity", [ds])
