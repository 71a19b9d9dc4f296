"""A larger offline corpus: the source and documentation text of the installed packages.

``load_corpus("installed")`` reads every distribution in this interpreter's site-packages
(``site.getsitepackages()`` and the user site; not ``PYTHONPATH`` extras, so wheels carried
in for one job do not change the corpus) plus the standard library (the embedded corpus),
so a GPU machine with no network still has hundreds of megabytes of text. What a machine
has is what it gets: the corpus is recorded by package and version, never downloaded.

Documents
    One per file listed in a distribution's ``RECORD`` whose suffix is in
    :data:`TEXT_SUFFIXES` (Python, C/C++/CUDA sources and headers, Markdown, reST, plain
    text). Ids are ``<package>/<path in site-packages>``; the source tag is
    ``<package>==<version>`` (the normalised name), so the composition table says which
    release each byte came from. The standard library keeps its embedded ids under the
    source tag ``python-stdlib==<version>``.
Left out (counted in the metadata)
    This project itself; files above :data:`MAX_FILE_BYTES`; files that are not UTF-8;
    generated data (a mean line longer than :data:`MAX_MEAN_LINE`); and exact duplicates
    of a text already taken (packages in name order, files in path order; the first copy
    stays), which vendored and re-shipped files would otherwise repeat.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re
import site
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .document import Document
from .embedded import embedded_documents

TEXT_SUFFIXES = frozenset({".py", ".pyi", ".pyx", ".pxd", ".md", ".rst", ".txt",
                           ".h", ".hpp", ".hh", ".c", ".cc", ".cpp", ".cu", ".cuh"})
MAX_FILE_BYTES = 1_000_000
MAX_MEAN_LINE = 200
STDLIB_PACKAGE = "python-stdlib"
EXCLUDED_PACKAGES = frozenset({"mhar-probe"})


def normalise(name: str) -> str:
    """PEP 503 normalised distribution name (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def default_paths() -> list[str]:
    """This interpreter's site-packages directories (user site included where it exists)."""
    paths = list(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str) and Path(user).is_dir():
        paths.append(user)
    return paths


@dataclass(frozen=True)
class InstalledScan:
    """The documents of one scan and what it left out (kept in the corpus metadata)."""

    documents: tuple[Document, ...]
    packages: int
    skipped_large: int
    skipped_binary: int
    skipped_generated: int
    duplicates: int

    def meta(self) -> dict[str, object]:
        return {
            "python_version": platform.python_version(),
            "packages": self.packages,
            "files_left_out": f"{self.skipped_large} over {MAX_FILE_BYTES:,} bytes, {self.skipped_binary} not UTF-8, "
                              f"{self.skipped_generated} generated (mean line > {MAX_MEAN_LINE}), "
                              f"{self.duplicates} exact duplicates",
        }


def _distributions(paths: tuple[str, ...]) -> list[metadata.Distribution]:
    """One distribution per normalised name (the first on `paths` wins, as for imports), by name."""
    seen: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(paths)):
        name = normalise(dist.metadata["Name"] or "")
        if name and name not in seen and name not in EXCLUDED_PACKAGES:
            seen[name] = dist
    return [seen[k] for k in sorted(seen)]


def _text_of(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        return None


@functools.lru_cache(maxsize=4)
def scan_installed(paths: tuple[str, ...] | None = None, include_stdlib: bool = True) -> InstalledScan:
    """Read the text files of every distribution on `paths` (default: :func:`default_paths`).

    Cached per process: a sweep trains many runs on one corpus and the scan reads every file.
    """
    paths = tuple(default_paths()) if paths is None else paths
    docs: list[Document] = []
    seen_text: set[bytes] = set()
    large = binary = generated = dups = 0

    def add(doc_id: str, source: str, text: str) -> None:
        nonlocal dups
        digest = hashlib.sha1(text.encode("utf-8")).digest()
        if digest in seen_text:
            dups += 1
            return
        seen_text.add(digest)
        docs.append(Document(id=doc_id, source=source, text=text))

    if include_stdlib:
        tag = f"{STDLIB_PACKAGE}=={platform.python_version()}"
        for doc in embedded_documents():
            add(doc.id, tag, doc.text)
    dists = _distributions(paths)
    for dist in dists:
        name = normalise(dist.metadata["Name"])
        tag = f"{name}=={dist.version}"
        files = sorted((f for f in dist.files or () if Path(str(f)).suffix in TEXT_SUFFIXES), key=str)
        for f in files:
            path = Path(str(f.locate()))
            try:
                size = path.stat().st_size
            except OSError:  # listed in RECORD but not on disk
                continue
            if size > MAX_FILE_BYTES:
                large += 1
                continue
            text = _text_of(path.read_bytes())
            if text is None:
                binary += 1
                continue
            if not text.strip():
                continue
            if len(text) / (text.count("\n") + 1) > MAX_MEAN_LINE:
                generated += 1
                continue
            add(f"{name}/{Path(str(f)).as_posix()}", tag, text)
    docs.sort(key=lambda d: d.id)
    return InstalledScan(tuple(docs), len(dists), large, binary, generated, dups)
