"""Where the data layer caches tokenizers and token arrays, and how it writes there.

The root is ``$MHAR_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/mhar-probe``, else
``~/.cache/mhar-probe``. Everything is written to a temporary name beside its final
place and renamed (`mhar_probe.atomic`), so concurrent processes (e.g. torchrun ranks)
never see half a file and never corrupt each other's output: for directories the first
rename wins and the rest are discarded (``atomic.build_dir``), a token array
(`save_npy_atomically`) is simply replaced by an identical one.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..atomic import write_with
from .errors import DataError


def cache_root() -> Path:
    """Return the cache root directory (not created)."""
    env = os.environ.get("MHAR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mhar-probe"


def cache_subdir(kind: str) -> Path:
    """Return (and create) ``<cache root>/<kind>``, e.g. ``tokenizers`` or ``tokens``."""
    path = cache_root() / kind
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(
            f"{path}: cannot create the cache directory ({exc.strerror}); "
            f"set MHAR_CACHE_DIR to a writable directory"
        ) from exc
    return path


def save_npy_atomically(final: Path, array: np.ndarray) -> Path:
    """Write ``array`` to ``final`` (.npy) atomically (``mhar_probe.atomic.write_with``)."""
    def save(tmp: Path) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.save would add ".npy" to a bare name
            np.save(fh, array)

    return write_with(final, save)
