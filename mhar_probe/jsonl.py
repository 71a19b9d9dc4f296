"""Reading JSON-lines files (metrics.jsonl, corpus .jsonl): one JSON value per non-blank line.

A line that is not UTF-8 text or not JSON is refused with `error("FILE:LINE: ...")`, so the
user is told which line of which file to fix; what each record must hold is the caller's check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def not_text(path: str | Path, exc: UnicodeDecodeError, lineno: int | None = None) -> str:
    """The one message for bytes that are not UTF-8 text (binary garbage, another encoding):
    "FILE:LINE: not UTF-8 text (byte 0x.. at offset N) ..."."""
    where = f"{path}:{lineno}" if lineno is not None else str(path)
    return (f"{where}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            f"the file is damaged or not the file expected")


def read_jsonl(path: str | Path, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of `path`, in order."""
    with Path(path).open("rb") as f:
        for lineno, data in enumerate(f, start=1):
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(not_text(path, exc, lineno)) from None
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise error(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
            yield lineno, value
