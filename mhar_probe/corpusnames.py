"""What a `--corpus` value may be: a named corpus or an existing path. Kept apart from the data
layer (which loads numpy and torch) so that `mhar train`, `mhar sweep` and `mhar cpt` refuse a
mistyped corpus path at once, before those imports."""

from __future__ import annotations

from pathlib import Path

#: the standard library's text and documentation, shipped with Python (the default corpus)
EMBEDDED = "embedded"
#: the text of every installed package
INSTALLED = "installed"
NAMED_CORPORA = (EMBEDDED, INSTALLED)


def is_corpus_spec(spec: str | None) -> bool:
    """Whether `spec` names a corpus: None, a named one (:data:`NAMED_CORPORA`) or an existing path
    (a built corpus folder is a directory, so an existing path)."""
    return spec is None or spec in NAMED_CORPORA or Path(spec).exists()
