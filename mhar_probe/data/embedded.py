"""The default corpus: text that ships with every CPython install, so nothing is downloaded.

Three sources, each document one file or topic:

``stdlib-code``
    The standard library's ``.py`` files (``sysconfig.get_paths()["stdlib"]``), without
    tests (any directory named ``test*`` or ``idle_test``), ``site-packages`` /
    ``dist-packages``, ``lib-dynload``, ``__pycache__``, the platform build directory
    (``config-*``), the platform-specific ``_sysconfigdata_*.py`` and
    ``pydoc_data/topics.py`` (whose text is the next source).
``pydoc-topics``
    ``pydoc_data.topics.topics``: the English reference-manual texts behind ``help()``,
    one document per topic.
``stdlib-text``
    Prose text files in the stdlib tree (``*.txt`` and ``README*``: the license, IDLE's
    README/NEWS/HISTORY/...), excluding grammar files.

Ids are POSIX relative paths (``stdlib/json/decoder.py``) or ``pydoc-topics/<topic>``, so
the split is the same on every machine with the same Python version. Line endings are
normalised to ``\\n``.
"""

from __future__ import annotations

import io
import os
import platform
import sysconfig
import tokenize
from collections.abc import Iterator
from pathlib import Path

from .document import Document

CODE_SOURCE = "stdlib-code"
TOPICS_SOURCE = "pydoc-topics"
TEXT_SOURCE = "stdlib-text"
#: Sources whose documents are natural language rather than code.
PROSE_SOURCES = frozenset({TOPICS_SOURCE, TEXT_SOURCE})

_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "lib-dynload", "idle_test"}


def stdlib_root() -> Path:
    """Directory holding the pure-Python standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def _skip_dir(name: str) -> bool:
    return (
        name in _SKIP_DIRS
        or name.startswith("test")
        or name.startswith("config-")
        or name.startswith(".")
    )


def _kind(rel: str) -> str | None:
    """Source tag for a stdlib file, or None to leave it out."""
    name = rel.rsplit("/", 1)[-1]
    if name.endswith(".py"):
        if name.startswith("_sysconfigdata_") or rel == "pydoc_data/topics.py":
            return None
        return CODE_SOURCE
    if (name.endswith(".txt") or name.startswith("README")) and "Grammar" not in name:
        return TEXT_SOURCE
    return None


def _decode(raw: bytes, is_python: bool) -> str:
    """Decode a source file as Python would (PEP 263), falling back to latin-1."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        if is_python:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
            text = raw.decode(encoding, errors="replace")
        else:
            text = raw.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def stdlib_files(root: Path | None = None) -> Iterator[tuple[str, str, Path]]:
    """Yield ``(relative posix path, source tag, absolute path)`` in sorted order."""
    root = stdlib_root() if root is None else root
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _skip_dir(d))
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            kind = _kind(rel)
            if kind is not None:
                yield rel, kind, Path(dirpath) / name


def embedded_documents() -> list[Document]:
    """All documents of the embedded corpus, sorted by id."""
    docs: list[Document] = []
    for rel, kind, path in stdlib_files():
        text = _decode(path.read_bytes(), is_python=rel.endswith(".py"))
        if text.strip():
            docs.append(Document(id=f"stdlib/{rel}", source=kind, text=text))

    from pydoc_data.topics import topics

    for name in sorted(topics):
        text = topics[name].replace("\r\n", "\n")
        if text.strip():
            docs.append(Document(id=f"{TOPICS_SOURCE}/{name}", source=TOPICS_SOURCE, text=text))
    docs.sort(key=lambda d: d.id)
    return docs


def embedded_meta() -> dict[str, str]:
    """Where the embedded corpus came from; recorded in its composition metadata."""
    return {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }
