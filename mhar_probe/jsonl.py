"""Reading JSON-lines files (metrics.jsonl, corpus .jsonl; `.gz` too): one JSON value per non-blank line.

A line that is not UTF-8 text or not JSON is refused with `error("FILE:LINE: ...")`, so the
user is told which line of which file to fix; what each record must hold is the caller's check.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import IO, Any, Iterator


def not_text(path: str | Path, exc: UnicodeDecodeError, lineno: int | None = None) -> str:
    """The one message for bytes that are not UTF-8 text (binary garbage, another encoding):
    "FILE:LINE: not UTF-8 text (byte 0x.. at offset N) ..."."""
    where = f"{path}:{lineno}" if lineno is not None else str(path)
    return (f"{where}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            f"the file is damaged or not the file expected")


def open_bytes(path: str | Path) -> IO[bytes]:
    """`path` for reading bytes; a name ending in `.gz` (the form results folders commit) is
    decompressed."""
    path = Path(path)
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def gzip_lines(f: IO[bytes], path: str | Path, error: type[Exception]) -> Iterator[bytes]:
    """The lines of `f`; a damaged gzip stream is one `error` naming the file."""
    try:
        yield from f
    except (OSError, EOFError, zlib.error) as exc:
        raise error(f"{path}: not a readable gzip file ({type(exc).__name__}: {exc})") from None


def read_jsonl(path: str | Path, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of `path` (`.gz`: gzipped), in order."""
    with open_bytes(path) as f:
        for lineno, data in enumerate(gzip_lines(f, path, error), start=1):
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
