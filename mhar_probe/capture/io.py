"""Reading and writing routing datasets: atomic netCDF (h5netcdf) and a clear error for other files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import xarray as xr

from .errors import CaptureError
from .schema import DATASET_KIND, DATASET_MARKER

ENGINE = "h5netcdf"


def check_output(path: str | os.PathLike, overwrite: bool) -> Path:
    """Refuse to clobber an existing file unless `overwrite`; make the parent folder."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise CaptureError(f"{path} already exists; pass --overwrite to replace it")
    if path.exists() and path.is_dir():
        raise CaptureError(f"{path} is a directory; give a file name such as routing.nc")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def temp_path(path: Path) -> Path:
    """A fresh temporary file name beside `path` (renamed over it once complete)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, *, overwrite: bool = False,
                  append_to: Path | None = None) -> Path:
    """Write `ds` to `path` atomically (temp + rename). With `append_to` (a temp file that
    already holds streamed per-token variables) the dataset is added to it and it is renamed."""
    path = check_output(path, overwrite)
    tmp = append_to if append_to is not None else temp_path(path)
    try:
        ds.to_netcdf(tmp, mode="a" if append_to is not None else "w", engine=ENGINE)
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    return path


def open_routing_dataset(path: str | os.PathLike, *, load: bool = True) -> xr.Dataset:
    """Open a dataset written by `capture_routing`; anything else raises `CaptureError`.

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
    if load:
        keep = [v for v in ds.data_vars if "sample" not in ds[v].dims]
        small = ds[keep].load()
        if len(keep) == len(ds.data_vars):
            ds.close()
            return small
        return ds
    return ds
