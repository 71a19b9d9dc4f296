"""What a corpus is once loaded, and the rules that split, cap and fingerprint it.

A :class:`Corpus` holds train and validation documents, a per-source composition table in
the style of the paper's ``tab:datamix`` and a fingerprint used as the cache key for
tokenizers and token arrays. ``mhar_probe.data.load.load_corpus`` makes one from any source
(the embedded default, the installed packages, the user's files, a built corpus folder).

Split
    Each document gets a number ``u`` in [0, 1) from the SHA-1 of its id. Within each
    source, documents with ``u < val_fraction`` are held out for validation; a source with
    at least two documents always keeps at least one on each side (its lowest-``u``
    document goes to validation, its highest-``u`` to train, if needed), and so does the
    corpus as a whole. So validation of the embedded corpus contains both code and prose.
    Apart from those forced moves, membership depends only on the id, never on the
    filesystem order, the other documents or ``max_bytes``.
Order
    Both splits are listed in ``u`` order: a deterministic shuffle, so neighbouring
    documents in the packed stream are unrelated files.
Cap
    ``max_bytes`` caps the total UTF-8 bytes: validation gets ``val_fraction`` of it and
    train the rest. Within a split, documents are taken in ``u`` order (skipping any that
    would overflow) first each source's smallest document (if it fits in an equal share
    of the budget, so tiny caps still see every source), then up to each source's byte
    share of the split, then from any source until the budget is full. The result is a
    subset of the uncapped split with roughly the same composition.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .document import Document
from .errors import DataError

SPLITS = ("train", "val")


def hash_unit(doc_id: str) -> float:
    """Stable number in [0, 1) from the SHA-1 of a document id."""
    return int(hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:15], 16) / 16**15


@dataclass(frozen=True)
class CompositionRow:
    """Documents and UTF-8 bytes of one source in one split; ``share`` is of the split's bytes."""

    split: str
    source: str
    documents: int
    bytes: int
    share: float


@dataclass
class Composition:
    """Per-source make-up of a corpus's splits, plus where the corpus came from (``meta``)."""

    rows: list[CompositionRow]
    meta: dict[str, object] = field(default_factory=dict)

    @classmethod
    def measure(cls, splits: dict[str, list[Document]], meta: dict[str, object]) -> "Composition":
        """Count documents and bytes per (split, source)."""
        rows: list[CompositionRow] = []
        for split, docs in splits.items():
            n_docs: dict[str, int] = defaultdict(int)
            n_bytes: dict[str, int] = defaultdict(int)
            for doc in docs:
                n_docs[doc.source] += 1
                n_bytes[doc.source] += doc.n_bytes
            total = sum(n_bytes.values())
            rows.extend(
                CompositionRow(split, src, n_docs[src], n_bytes[src], n_bytes[src] / total if total else 0.0)
                for src in sorted(n_docs)
            )
        return cls(rows=rows, meta=dict(meta))

    def to_rows(self) -> list[dict[str, object]]:
        """One dict per (split, source): split, source, documents, bytes, share."""
        return [
            {"split": r.split, "source": r.source, "documents": r.documents, "bytes": r.bytes, "share": r.share}
            for r in self.rows
        ]

    def totals(self, split: str) -> tuple[int, int]:
        """``(documents, bytes)`` of one split."""
        rows = [r for r in self.rows if r.split == split]
        return sum(r.documents for r in rows), sum(r.bytes for r in rows)

    def to_markdown(self) -> str:
        """A markdown table: per split, one row per source and a total row; meta below."""
        lines = ["| Split | Source | Documents | Bytes | % bytes |", "|---|---|---:|---:|---:|"]
        for split in dict.fromkeys(r.split for r in self.rows):
            for r in (r for r in self.rows if r.split == split):
                lines.append(f"| {split} | `{r.source}` | {r.documents:,} | {r.bytes:,} | {100 * r.share:.1f} |")
            docs, nbytes = self.totals(split)
            lines.append(f"| {split} | **total** | {docs:,} | {nbytes:,} | 100.0 |")
        if self.meta:
            lines.append("")
            lines.extend(f"- {k}: {v}" for k, v in self.meta.items())
        return "\n".join(lines)


@dataclass
class Corpus:
    """Train and validation documents of one data source.

    ``fingerprint`` is a SHA-256 over the split, id and text of every document; equal
    fingerprints mean equal data, so it keys the tokenizer and token caches.
    """

    name: str
    train: list[Document]
    val: list[Document]
    composition: Composition
    fingerprint: str
    tokenizer_dir: Path | None = None  # a built corpus's own tokenizer (mhar_probe.data.built)
    tokenizer_vocab: int | None = None  # the vocabulary size it was trained for

    def split(self, name: str) -> list[Document]:
        """The documents of ``"train"`` or ``"val"``."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return self.train if name == "train" else self.val


def split_documents(docs: list[Document], val_fraction: float) -> tuple[list[Document], list[Document]]:
    """Stratified hash split (see module docstring); both lists in ``hash_unit`` order."""
    by_source: dict[str, list[Document]] = defaultdict(list)
    for doc in docs:
        by_source[doc.source].append(doc)
    train: list[Document] = []
    val: list[Document] = []
    for group in by_source.values():
        group = sorted(group, key=lambda d: (hash_unit(d.id), d.id))
        n_val = sum(hash_unit(d.id) < val_fraction for d in group)
        if len(group) >= 2:
            n_val = min(max(n_val, 1), len(group) - 1)
        val.extend(group[:n_val])
        train.extend(group[n_val:])
    order = lambda d: (hash_unit(d.id), d.id)  # noqa: E731
    train.sort(key=order)
    val.sort(key=order)
    if len(docs) >= 2 and not val:  # every source has a single document
        val.append(train.pop(0))
    if len(docs) >= 2 and not train:
        train.append(val.pop())
    return train, val


def cap_documents(docs: list[Document], budget: int) -> list[Document]:
    """Deterministic subset of ``docs`` (in ``hash_unit`` order) with at most ``budget`` bytes."""
    sizes = {d.id: d.n_bytes for d in docs}
    by_source: dict[str, list[Document]] = defaultdict(list)
    for doc in docs:
        by_source[doc.source].append(doc)
    total = sum(sizes.values()) or 1
    chosen: set[str] = set()
    used = 0

    def take(candidates: list[Document], limit: int) -> None:
        nonlocal used
        spent = sum(sizes[d.id] for d in candidates if d.id in chosen)
        for d in candidates:
            if d.id not in chosen and spent + sizes[d.id] <= limit and used + sizes[d.id] <= budget:
                chosen.add(d.id)
                spent += sizes[d.id]
                used += sizes[d.id]

    for group in by_source.values():  # each source's smallest document, if it fits
        smallest = min(group, key=lambda d: sizes[d.id])  # first in hash order among ties
        if sizes[smallest.id] <= budget // len(by_source):
            take([smallest], budget)
    for src, group in by_source.items():  # each source up to its byte share
        take(group, math.floor(budget * sum(sizes[d.id] for d in group) / total))
    take(docs, budget)  # fill what is left
    return [d for d in docs if d.id in chosen]


def corpus_fingerprint(train: list[Document], val: list[Document]) -> str:
    """SHA-256 over split names, ids and texts (length-prefixed, so unambiguous)."""
    h = hashlib.sha256()
    for split, docs in (("train", train), ("val", val)):
        h.update(f"{split}\0{len(docs)}\0".encode())
        for doc in docs:
            for part in (doc.id, doc.text):
                data = part.encode("utf-8")
                h.update(len(data).to_bytes(8, "little"))
                h.update(data)
    return h.hexdigest()


def cap_splits(name: str, train: list[Document], val: list[Document], max_bytes: int,
               val_fraction: float) -> tuple[list[Document], list[Document], dict[str, int]]:
    """Both splits capped at ``max_bytes`` in all (validation gets ``val_fraction`` of it, each split
    by :func:`cap_documents`), and what the cap kept and dropped: {"max_bytes", "bytes_before",
    "bytes_kept", "bytes_dropped"}. A split the cap leaves empty is a `DataError`."""
    if max_bytes <= 0:
        raise DataError(f"max_bytes must be positive, got {max_bytes}")
    val_budget = max(1, round(max_bytes * val_fraction))
    capped = {"train": cap_documents(train, max_bytes - val_budget), "val": cap_documents(val, val_budget)}
    for split, full, budget in (("train", train, max_bytes - val_budget), ("val", val, val_budget)):
        if not capped[split]:
            smallest = min((d.n_bytes for d in full), default=0)
            raise DataError(f"{name}: max_bytes={max_bytes} leaves the {split} split {budget} bytes, "
                            f"less than its smallest document ({smallest} bytes); raise max_bytes")
    before = sum(d.n_bytes for d in (*train, *val))
    kept = sum(d.n_bytes for d in (*capped["train"], *capped["val"]))
    return capped["train"], capped["val"], dict(max_bytes=max_bytes, bytes_before=before, bytes_kept=kept,
                                                bytes_dropped=before - kept)

