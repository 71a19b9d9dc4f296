"""Atomic file output: write to a temporary name in the target folder, then rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import StatsError


def write_text_atomic(path: str | os.PathLike[str], text: str, *, overwrite: bool = False) -> Path:
    """Write `text` to `path` via a temp file + `os.replace`; refuse to clobber unless `overwrite`."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise StatsError(f"{path} already exists; pass --overwrite to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def check_writable(paths: list[Path], *, overwrite: bool) -> None:
    """Fail before writing anything if any of `paths` exists and `overwrite` is off."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise StatsError(f"output file(s) already exist: {', '.join(existing)}; pass --overwrite to replace them")
