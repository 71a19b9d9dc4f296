"""Where `mhar stats` writes: refuse to clobber existing outputs unless `--overwrite`; the
writing itself is `mhar_probe.atomic`'s (temporary beside the target, fsync, rename)."""

from __future__ import annotations

import os
from pathlib import Path

from mhar_probe.atomic import write_text

from .errors import StatsError


def write_text_new(path: str | os.PathLike[str], text: str, *, overwrite: bool = False) -> Path:
    """Write `text` to `path` atomically; refuse to clobber an existing file unless `overwrite`."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise StatsError(f"{path} already exists; pass --overwrite to replace it")
    return write_text(path, text)


def check_writable(paths: list[Path], *, overwrite: bool) -> None:
    """Fail before writing anything if any of `paths` exists and `overwrite` is off."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise StatsError(f"output file(s) already exist: {', '.join(existing)}; pass --overwrite to replace them")
