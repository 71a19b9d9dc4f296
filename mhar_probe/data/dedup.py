"""Paragraph-level deduplication across documents and sources, and a prose/code tally.

A paragraph is a run of text between blank lines. Its key is the SHA-1 of its normalised
form (lower case, every run of whitespace one space, stripped). Walking the documents in
the order given (the builder passes sources in priority order, files in path order), a
paragraph whose key was seen before is removed; paragraphs shorter than
:data:`MIN_DEDUP_CHARS` normalised characters (headings, ``}``, "Example:") are always kept,
since repeating them is structure, not duplication. A document left empty is dropped.

``looks_like_code`` is the heuristic behind the composition table's code share: a
paragraph is code when at least :data:`CODE_SYMBOL_SHARE` of its non-space characters are
programming symbols, or most of its lines start with a shell/REPL prompt.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from .document import Document

MIN_DEDUP_CHARS = 32
CODE_SYMBOL_SHARE = 0.08
_SYMBOLS = frozenset("{}[]();=<>$#\\|&*_/+%@^~`")
_PROMPT = re.compile(r"^\s*(\$ |>>> |\.\.\. |# |% |octave:\d+> |> |=> |postgres=)")
_PARA_SPLIT = re.compile(r"\n[ \t]*\n")


def split_paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text`` (between blank lines), empty ones dropped."""
    return [p for p in _PARA_SPLIT.split(text) if p.strip()]


def normalise(paragraph: str) -> str:
    """Lower case, whitespace runs collapsed to one space, stripped."""
    return " ".join(paragraph.lower().split())


def looks_like_code(paragraph: str) -> bool:
    """Heuristic: symbol share of non-space characters >= CODE_SYMBOL_SHARE, or mostly prompt lines."""
    chars = [c for c in paragraph if not c.isspace()]
    if not chars:
        return False
    if sum(c in _SYMBOLS for c in chars) / len(chars) >= CODE_SYMBOL_SHARE:
        return True
    lines = [line for line in paragraph.splitlines() if line.strip()]
    return bool(lines) and sum(bool(_PROMPT.match(line)) for line in lines) * 2 > len(lines)


@dataclass
class DedupStats:
    """Per source: paragraphs and UTF-8 bytes removed as duplicates, documents left empty."""

    paragraphs_removed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes_removed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    documents_emptied: dict[str, int] = field(default_factory=lambda: defaultdict(int))


#: a document's paragraphs with their dedup keys (None: shorter than MIN_DEDUP_CHARS, always kept)
KeyedParagraphs = list[tuple[str, "bytes | None"]]


def paragraph_keys(text: str) -> KeyedParagraphs:
    """The paragraphs of ``text`` with their keys: SHA-1 of the normalised paragraph, or None for one
    shorter than MIN_DEDUP_CHARS (pure, so builders compute it in worker processes)."""
    out: KeyedParagraphs = []
    for para in split_paragraphs(text):
        norm = normalise(para)
        out.append((para, hashlib.sha1(norm.encode("utf-8")).digest() if len(norm) >= MIN_DEDUP_CHARS else None))
    return out


def dedup_keyed(heads: Sequence[tuple[str, str]], keyed: Sequence[KeyedParagraphs]
                ) -> tuple[list[Document], DedupStats]:
    """The documents (``heads``: (id, source) each, with their `paragraph_keys`) with every repeated
    paragraph removed, in the same order: the one sequential pass of the dedup."""
    seen: set[bytes] = set()
    stats = DedupStats()
    out: list[Document] = []
    for (doc_id, source), paras in zip(heads, keyed, strict=True):
        kept: list[str] = []
        for para, key in paras:
            if key is not None:
                if key in seen:
                    stats.paragraphs_removed[source] += 1
                    stats.bytes_removed[source] += len(para.encode("utf-8"))
                    continue
                seen.add(key)
            kept.append(para)
        if kept:
            out.append(Document(id=doc_id, source=source, text="\n\n".join(kept)))
        else:
            stats.documents_emptied[source] += 1
    return out, stats


def dedup_paragraphs(docs: list[Document]) -> tuple[list[Document], DedupStats]:
    """``docs`` with every repeated paragraph (see module docstring) removed, in the same order."""
    return dedup_keyed([(d.id, d.source) for d in docs], [paragraph_keys(d.text) for d in docs])


def code_bytes(text: str) -> int:
    """UTF-8 bytes of the paragraphs of ``text`` that :func:`looks_like_code`."""
    return sum(len(p.encode("utf-8")) for p in split_paragraphs(text) if looks_like_code(p))
