"""Read a corpus folder written by :mod:`mhar_probe.data.build` (``mhar corpus build``).

``mhar_probe.data.load.load_corpus(DIR)`` comes here when ``DIR`` holds ``mhar_corpus.json``: the split is the
folder's own (documents in ``train/`` and ``val/``, never re-split), the fingerprint is
recomputed from the texts and must equal the manifest's (a changed folder is refused), and
the corpus carries its tokenizer (``DIR/tokenizer``), which :func:`get_tokenizer` uses when
the requested vocabulary size is the one it was trained with.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..jsonl import read_jsonl
from .corpus import Composition, Corpus, cap_splits, corpus_fingerprint
from .document import Document
from .errors import DataError

MANIFEST = "mhar_corpus.json"


def is_built_corpus(spec: str | Path | None) -> bool:
    """Whether ``spec`` is a folder written by the corpus builder."""
    return spec is not None and (Path(spec).expanduser() / MANIFEST).is_file()


def read_manifest(folder: str | Path) -> dict:
    """The folder's manifest (``mhar_corpus.json``)."""
    path = Path(folder).expanduser() / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable corpus manifest ({exc})") from exc


def _read_split(folder: Path, split: str, shards: list[str]) -> list[Document]:
    docs = []
    for name in shards:
        path = folder / split / name
        if not path.is_file():
            raise DataError(f"{path}: shard listed in {MANIFEST} is missing (was the folder unpacked whole?)")
        for lineno, rec in read_jsonl(path, DataError):
            if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) for k in ("id", "source", "text")):
                raise DataError(f"{path}:{lineno}: a record needs string fields id, source and text")
            docs.append(Document(id=rec["id"], source=rec["source"], text=rec["text"]))
    return docs


def load_built(spec: str | Path, max_bytes: int | None = None) -> Corpus:
    """The built corpus in folder ``spec`` (``max_bytes``: a deterministic cap, as for other corpora)."""
    folder = Path(spec).expanduser()
    manifest = read_manifest(folder)
    train = _read_split(folder, "train", manifest["shards"]["train"])
    val = _read_split(folder, "val", manifest["shards"]["val"])
    fingerprint = corpus_fingerprint(train, val)
    if fingerprint != manifest["fingerprint"]:
        raise DataError(f"{folder}: its texts do not match the fingerprint in {MANIFEST} "
                        f"({fingerprint[:12]} vs {manifest['fingerprint'][:12]}); rebuild it")
    cap = None
    if max_bytes:
        train, val, cap = cap_splits(str(folder), train, val, max_bytes, manifest["val_fraction"])
        fingerprint = corpus_fingerprint(train, val)
    meta = {"corpus": str(folder), "built_fingerprint": manifest["fingerprint"],
            "train_tokens_full": manifest.get("train_tokens"), "vocab_size": manifest.get("vocab_size"),
            "val_fraction": manifest["val_fraction"], "max_bytes": max_bytes, "documents": len(train) + len(val),
            **({"cap": cap} if cap else {})}
    tok = folder / manifest.get("tokenizer", "tokenizer")
    return Corpus(name=f"built:{folder.name}", train=train, val=val,
                  composition=Composition.measure({"train": train, "val": val}, meta), fingerprint=fingerprint,
                  tokenizer_dir=tok if (tok / "tokenizer.json").is_file() else None,
                  tokenizer_vocab=manifest.get("vocab_size_requested"))
