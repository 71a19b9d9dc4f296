"""The statistics' printed tables and their JSON files: fixed-width text with a dash rule, cells
formatted alike ('-' for missing, 'nan'), JSON with numpy scalars as plain numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .output import write_text_new


def fmt(x: Any, spec: str = ".4f") -> str:
    """A cell: '-' for None, 'nan', a float in `spec`, anything else as str."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else format(x, spec)
    return str(x)


def text_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned columns as wide as their widest cell, a dash rule under the header."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    return (["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
            + ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows])


def json_default(o: Any) -> Any:
    """numpy scalars as plain numbers (json.dumps' `default`)."""
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(type(o).__name__)


def json_text(doc: dict[str, Any]) -> str:
    """`doc` as indented JSON (numpy scalars as numbers), newline-terminated."""
    return json.dumps(doc, indent=2, default=json_default) + "\n"


def write_json_new(path: str | Path, doc: dict[str, Any], *, overwrite: bool = False) -> Path:
    """`doc` to `path` atomically; refuses an existing file unless `overwrite`."""
    return write_text_new(path, json_text(doc), overwrite=overwrite)
