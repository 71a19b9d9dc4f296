"""Load a corpus from any source: the embedded default, the installed packages, the user's files,
or a folder written by ``mhar corpus build``; split it, cap it, record its make-up.

Caps
    A run's ``corpus_max_bytes`` is resolved by :func:`resolve_cap`: unset means the corpus's own
    default, which is :data:`EMBEDDED_DEFAULT_CAP` for the embedded corpus (the demo-sized slice
    of the standard library) and no cap for every other corpus; 0 means no cap; N caps at N bytes.
    A cap that drops text says so in the corpus's metadata (``cap``: bytes before, kept, dropped),
    which the trainer prints and records.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..corpusnames import EMBEDDED, INSTALLED, NAMED_CORPORA
from .built import is_built_corpus, load_built
from .corpus import Composition, Corpus, cap_splits, corpus_fingerprint, split_documents
from .embedded import embedded_documents, embedded_meta
from .errors import DataError
from .files import read_path
from .installed import scan_installed

#: the cap a run on the embedded corpus gets unless it asks for another (--corpus-max-bytes)
EMBEDDED_DEFAULT_CAP = 4_000_000


def resolve_cap(spec: str | None, max_bytes: int | None) -> int:
    """The cap a run on corpus `spec` trains with, as saved in its train_config.json: `max_bytes` as
    given (0: no cap), or where unset (None) the corpus's default: :data:`EMBEDDED_DEFAULT_CAP` for the
    embedded corpus, 0 (none) for any other."""
    if max_bytes is not None:
        return int(max_bytes)
    return EMBEDDED_DEFAULT_CAP if spec in (None, EMBEDDED) else 0


def load_run_corpus(settings: Mapping[str, Any]) -> Corpus:
    """The corpus a run trains on, from its options (train_config.json's `corpus` and
    `corpus_max_bytes`, the cap resolved by :func:`resolve_cap`)."""
    spec = settings.get("corpus")
    return load_corpus(spec, max_bytes=resolve_cap(spec, settings.get("corpus_max_bytes")))


def load_corpus(
    spec: str | None = None,
    *,
    val_fraction: float = 0.05,
    max_bytes: int | None = None,
    text_field: str = "text",
) -> Corpus:
    """Load, split and (optionally) cap a corpus.

    Args:
        spec: ``None`` or ``"embedded"`` for the stdlib/pydoc corpus shipped with Python;
            ``"installed"`` for the text of every installed package as well
            (:mod:`mhar_probe.data.installed`);
            a folder written by ``mhar corpus build`` (its own split and tokenizer,
            :mod:`mhar_probe.data.built`);
            otherwise a ``.txt`` / ``.jsonl`` / ``.parquet`` file or a directory of them
            (see :mod:`mhar_probe.data.files` for the conventions).
        val_fraction: expected share of documents held out for validation, in (0, 1).
        max_bytes: cap on the total UTF-8 bytes kept (train + val), chosen by hash order; None or
            0: no cap (a run's unset cap is resolved first, :func:`resolve_cap`).
        text_field: jsonl field / parquet column holding the text.

    Raises:
        DataError: the path is missing, empty or unusable, or a split ends up empty.
    """
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if max_bytes is not None and max_bytes < 0:
        raise DataError(f"max_bytes must not be negative, got {max_bytes}")
    max_bytes = max_bytes or None
    if spec is not None and spec not in NAMED_CORPORA and is_built_corpus(spec):
        return load_built(spec, max_bytes=max_bytes)
    if spec is None or spec == EMBEDDED:
        name = EMBEDDED
        docs = embedded_documents()
        meta: dict[str, object] = {"corpus": name, **embedded_meta()}
    elif spec == INSTALLED:
        name = INSTALLED
        scan = scan_installed()
        docs = list(scan.documents)
        meta = {"corpus": name, **scan.meta()}
    else:
        name = str(spec)
        docs = read_path(spec, text_field=text_field)
        meta = {"corpus": name, "text_field": text_field}
    if len(docs) < 2:
        raise DataError(
            f"{name}: only {len(docs)} document(s); a train/val split needs at least two "
            f"(use several files, a .jsonl with one document per line, or separate "
            f"documents in a .txt file with <|endoftext|>)"
        )
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        raise DataError(f"{name}: duplicate document ids")  # cannot happen for file-derived ids
    train, val = split_documents(docs, val_fraction)
    cap = None
    if max_bytes is not None:
        train, val, cap = cap_splits(name, train, val, max_bytes, val_fraction)
    meta.update(val_fraction=val_fraction, max_bytes=max_bytes, documents=len(train) + len(val),
                **({"cap": cap} if cap else {}))
    return Corpus(
        name=name,
        train=train,
        val=val,
        composition=Composition.measure({"train": train, "val": val}, meta),
        fingerprint=corpus_fingerprint(train, val),
    )
