"""Reading and writing routing datasets: atomic netCDF (h5netcdf) and a clear error for other files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import xarray as xr

from ..atomic import write_with
from ..outputs import OutputKind
from ..outputs import check_output as guard
from .checks import check_routing_dataset
from .errors import CaptureError
from .schema import DATASET_KIND, DATASET_MARKER

ENGINE = "h5netcdf"


def is_routing_dataset(path: Path) -> bool:
    """A file `mhar capture` wrote (a netCDF file with the routing-dataset marker)."""
    try:
        open_routing_dataset(path, load=False).close()
    except CaptureError:
        return False
    return True


#: what `mhar capture` writes: --overwrite replaces only one of these
ROUTING_DATASET = OutputKind("routing dataset", directory=False, is_own=is_routing_dataset,
                             marker=f"netCDF attribute {DATASET_MARKER}={DATASET_KIND}", error=CaptureError)


def check_output(path: str | os.PathLike, overwrite: bool, inputs: Iterable[tuple[str, Any]] = ()) -> Path:
    """Refuse to write over an input (`inputs`: (what, path) pairs), an existing file unless
    `overwrite`, and with it anything but a routing dataset; make the parent folder."""
    path = Path(path)
    guard(path, ROUTING_DATASET, overwrite=overwrite, inputs=inputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, *, overwrite: bool = False,
                  append_to: Path | None = None) -> Path:
    """Write `ds` to `path` atomically (`mhar_probe.atomic`). With `append_to` (a temporary from
    `atomic.temp_file` that already holds streamed per-token variables) the dataset is added to it
    and it is renamed."""
    path = check_output(path, overwrite)
    mode = "a" if append_to is not None else "w"
    encoding = storage_encoding(ds)
    return write_with(path, lambda tmp: ds.to_netcdf(tmp, mode=mode, engine=ENGINE, encoding=encoding),
                      into=append_to)


#: the random-query null's maps per draw, as `mhar capture` writes them: a sampling distribution,
#: stored in float32. A committed study keeps per-draw statistics of them instead
#: (`analysis.probes.null_summary`), stored as computed.
NULL_DRAWS = ("null_slice_kl", "null_weight_mean", "null_weight_mean_half")


def storage_encoding(ds: xr.Dataset) -> dict[str, dict[str, Any]]:
    """How each data variable is stored: deflate (zlib level 4, byte shuffle) for all, and the
    null's maps (`NULL_DRAWS`, most of the bytes) in float32, whose 7 digits are far below the draws'
    own spread. Everything measured on the real data, and the null's per-draw statistics of the
    summary form, keep their dtype. An 8-head 100M capture with 64 draws goes from 8.8 MB to 2.1 MB;
    reading gives float32 null maps."""
    encoding: dict[str, dict[str, Any]] = {}
    for name, var in ds.data_vars.items():
        if var.dtype.kind not in "biuf" or var.ndim == 0:
            continue
        enc: dict[str, Any] = {"zlib": True, "complevel": 4, "shuffle": True}
        if name in NULL_DRAWS and var.dtype == "float64":
            enc["dtype"] = "float32"
        encoding[name] = enc
    return encoding


def open_routing_dataset(path: str | os.PathLike, *, load: bool = True) -> xr.Dataset:
    """Open a dataset written by `capture_routing`, checked against its schema (`checks.py`);
    anything else raises `CaptureError`.

    `load=True` reads the (small) reduced variables into memory and closes the file; per-token
    weights, if present, stay lazy either way when `load=False`.
    """
    path = Path(path)
    if not path.exists():
        raise CaptureError(f"{path} does not exist; create a routing dataset with `mhar capture RUN`")
    if path.is_dir():
        raise CaptureError(f"{path} is a directory, not a routing dataset file (.nc)")
    try:
        ds = xr.open_dataset(path, engine=ENGINE)
    except Exception as exc:  # h5py / h5netcdf raise many types for a foreign file
        raise CaptureError(f"{path} is not a netCDF4/HDF5 file, so not a routing dataset "
                           f"(written by `mhar capture`): {type(exc).__name__}") from None
    if ds.attrs.get(DATASET_MARKER) != DATASET_KIND:
        ds.close()
        raise CaptureError(f"{path} is a netCDF file but not a routing dataset (its attribute "
                           f"{DATASET_MARKER!r} is not {DATASET_KIND!r}); create one with `mhar capture RUN`")
    try:
        check_routing_dataset(ds, path)
    except Exception:
        ds.close()
        raise
    if load:
        keep = [v for v in ds.data_vars if "sample" not in ds[v].dims]
        small = ds[keep].load()
        if len(keep) == len(ds.data_vars):
            ds.close()
            return small
        return ds
    return ds
