"""Reading JSON-lines files (metrics.jsonl, corpus .jsonl): one JSON value per non-blank line.

A line that is not JSON is refused with `error("FILE:LINE: not valid JSON (reason)")`, so the
user is told which line of which file to fix; what each record must hold is the caller's check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def read_jsonl(path: str | Path, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of `path`, in order."""
    with Path(path).open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            yield lineno, value
