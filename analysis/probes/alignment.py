"""Head-alignment comparison (paper Table `tab:headalign`): MHAR (arbitrary d/H subspaces)
vs MHAR-HW (one full-width query per KV group at attention sites), matched head count: MHAR's
H must equal MHAR-HW's H (= its KV groups G); runs of unequal H are refused, not compared.

Reported per run: final validation loss (from metrics.jsonl in the run directory the dataset was
read from: RUN/routing.nc's folder, else the folder the capture recorded, which for an exported
run names the machine it was captured on), and routing statistics that should differ if head-alignment mattered: per-head
deviation size and replication, within-head slice-KL (trained, excess over the null), and the
correlation of the two runs' head-consensus routing over the cells both can see.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from mhar_probe.capture.errors import CaptureError
from mhar_probe.model.methods import routing_heads_of
from mhar_probe.runfiles import RunFiles

from ..run import parse_metrics
from .deviation import per_head_deviation
from .provenance import with_provenance
from .width import width_disagreement


def run_dir_of(ds: xr.Dataset) -> Path | None:
    """The run directory holding the dataset's metrics.jsonl: the folder of the file `ds` was read
    from (RUN/routing.nc, wherever the run now lies), else the `run_path` the capture recorded
    (valid where the capture ran); None when neither holds metrics.jsonl."""
    source = ds.encoding.get("source")
    for folder in ((Path(source).parent,) if source else ()) + ((Path(ds.attrs["run_path"]),)
                                                                 if ds.attrs.get("run_path") else ()):
        if RunFiles(folder).metrics_path.is_file():
            return folder
    return None


def final_val_loss(ds: xr.Dataset) -> float:
    """Last val_loss in RUN/metrics.jsonl of the dataset's run (`run_dir_of`; NaN when not found)."""
    run = run_dir_of(ds)
    if run is None:
        return float("nan")
    losses = [row.get("val_loss") for row in parse_metrics(RunFiles(run).metrics_path, error=CaptureError)]
    losses = [v for v in losses if v is not None]
    return float(losses[-1]) if losses else float("nan")


def heads_of(ds: xr.Dataset) -> int | None:
    """The routing head count of an mhar / mhar_hw dataset (H = its KV groups G when unrecorded)."""
    return routing_heads_of(ds.attrs.get("method"), ds.attrs, default=ds.attrs.get("G"))


def _consensus_corr(a: xr.Dataset, b: xr.Dataset) -> float:
    wa, wb = a.weight_mean.mean("head").values, b.weight_mean.mean("head").values
    if wa.shape != wb.shape:
        return float("nan")
    keep = np.isfinite(wa) & np.isfinite(wb) & (a.site_num_sources.values >= 2)[:, None]
    x, y = wa[keep] - wa[keep].mean(), wb[keep] - wb[keep].mean()
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))


def head_alignment(mhar: xr.Dataset, mhar_hw: xr.Dataset) -> xr.Dataset:
    """dims [variant] = ("mhar", "mhar_hw"), plus scalar deltas (hw - mh)."""
    if mhar.attrs.get("method") != "mhar" or mhar_hw.attrs.get("method") != "mhar_hw":
        raise CaptureError(f"head alignment compares an mhar run with an mhar_hw run; got "
                           f"{mhar.attrs.get('method')!r} and {mhar_hw.attrs.get('method')!r}")
    h_mh, h_hw = heads_of(mhar), heads_of(mhar_hw)
    if h_mh is None or h_mh != h_hw:
        raise CaptureError(f"head alignment compares runs of equal head count (MHAR H = MHAR-HW's KV groups); "
                           f"got mhar H={h_mh} and mhar_hw H={h_hw}")
    rows = {}
    for name, ds in (("mhar", mhar), ("mhar_hw", mhar_hw)):
        dev = per_head_deviation(ds)
        w = width_disagreement(ds).sel(slicing="contiguous")
        rows[name] = dict(val_loss=final_val_loss(ds), max_abs_deviation=float(dev.max_abs),
                          replication_r=float(dev.replication_r), cross_head_corr=float(dev.cross_head_corr_mean),
                          slice_kl=float(w.summary_kl), slice_kl_excess=float(w.summary_excess))
    out = xr.Dataset({k: ("variant", [rows["mhar"][k], rows["mhar_hw"][k]]) for k in rows["mhar"]},
                     coords={"variant": ["mhar", "mhar_hw"]})
    out["delta_val_loss"] = out.val_loss.sel(variant="mhar_hw") - out.val_loss.sel(variant="mhar")
    out["consensus_corr"] = _consensus_corr(mhar, mhar_hw)
    out.attrs["matched_heads"] = int(h_mh == h_hw)
    out.attrs["heads"] = int(h_mh)
    return with_provenance(out, "head_alignment", [mhar, mhar_hw])
