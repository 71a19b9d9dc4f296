"""Where the data layer caches tokenizers and token arrays, and how it writes there.

The root is ``$MHAR_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/mhar-probe``, else
``~/.cache/mhar-probe``. Everything is written to a temporary name beside its final
place and renamed, so concurrent processes (e.g. torchrun ranks) never see half a file
and never corrupt each other's output: the first rename wins, the rest are discarded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

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


def write_dir_atomically(final: Path, fill: Callable[[Path], None]) -> Path:
    """Create directory ``final`` by calling ``fill(tmp_dir)`` and renaming ``tmp_dir``.

    If another process created ``final`` first, our copy is discarded and theirs kept.
    Returns ``final``.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        fill(tmp)
        try:
            os.rename(tmp, final)  # atomic; fails if final exists and is non-empty
        except OSError:
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def save_npy_atomically(final: Path, array: np.ndarray) -> Path:
    """Write ``array`` to ``final`` (.npy) via a temporary file and ``os.replace``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.tmp-", suffix=".npy", dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, array)
        os.replace(tmp_name, final)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return final
