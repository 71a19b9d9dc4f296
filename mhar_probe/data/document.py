"""The unit of text the data layer moves around."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    """One document: a file, a pydoc topic, a jsonl line or a parquet row.

    ``id`` is stable across machines (a relative path, topic name or ``path:line``) and
    drives the train/val split; ``source`` is the per-document source tag used in the
    composition table.
    """

    id: str
    source: str
    text: str

    @property
    def n_bytes(self) -> int:
        """Length of the text in UTF-8 bytes."""
        return len(self.text.encode("utf-8"))
