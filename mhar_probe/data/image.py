"""A corpus built from a machine's own text (issue 52): the source code and documentation installed
on the machine that trains, walked under its roots, together with a carried corpus folder (what
`mhar corpus build` makes: books, dictionaries, manuals), built where it runs, on all its cores.

    mhar corpus image --out DIR --lock LOCK [--with CORPUS_DIR] [--new-manifest] [--roots /usr /opt /root]

Which files (the rules, in order: `file_kind`, `select_path`, `read_kept`)
  path   under a root, in no folder of SKIP_DIRS nor a hidden one (but KEEP_HIDDEN), not a link, not under
         a SKIP_PREFIXES path, the checkout that runs, the output or a folder the caller excludes; its suffix names a kind (KIND_BY_SUFFIX: code, docs, data);
         not a licence file (LICENCE_NAME) nor a generated one by its name (GENERATED_NAME); of
         MIN_FILE_BYTES to MAX_FILE_BYTES bytes.
  text   UTF-8 without a NUL byte (else binary); a mean line of at most MAX_MEAN_LINE characters and no
         line over MAX_LINE (else minified or data); no generated-file marker (GENERATED_MARK: "DO NOT
         EDIT", "@generated", "automatically generated", ...) in its first GENERATED_HEAD characters.
  HTML is read as its visible text (`extract.html_to_text`), every other file tidied (`extract.tidy`).
  A document's source tag is its area and kind ("python-code", "cuda-docs", ...: `area_of`).

Manifest and lock
  The files chosen by path, sorted, as "path<TAB>size<TAB>SHA-256 prefix" lines (image_manifest.tsv.gz);
  its SHA-256 is the image's *source fingerprint*. A lock folder (committed with the study) holds the
  manifest a corpus was built from, its tokenizer (tokenizer.json.gz), the carried corpus's fingerprint and the corpus
  fingerprint. A build on an image whose manifest differs from the lock's is refused in one line that
  counts the files added, removed and changed; `new_manifest` builds a new corpus under a new
  fingerprint instead. Either way the build writes the lock of what it built into DIR/lock/.

Processing
  As `mhar corpus build` does: paragraphs deduplicated across all documents in priority order (the
  carried corpus first, then the image's files in path order; `dedup.dedup_keyed`), then the
  document-hash split (`corpus.split_documents`). Reading, extraction and paragraph keys run in
  `workers` processes; the dedup is one pass over the keys.

Tokenizer
  The lock's, where it has one (its fingerprint checked). Otherwise (the first build) a byte-level
  BPE is trained at each of `vocab_sizes` on the same sample of the train split (TOKENIZER_SAMPLE
  bytes in hash order), tokens per byte are measured on the held-out split, and the size that
  needs the fewest training FLOPs per byte of text at the 350M shape is kept (tokens per byte x
  FLOPs per token, `mhar_probe.flops`): `choose_vocab`.

Output: DIR is a built corpus folder (`mhar_probe.data.built` reads it: `--corpus DIR`) whose token
arrays are written straight into the token cache (`packing.load_packed` finds them there).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import multiprocessing
import os
import re
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..atomic import build_dir
from . import extract
from .corpus import corpus_fingerprint, split_documents
from .dedup import KeyedParagraphs, code_bytes, dedup_keyed, paragraph_keys
from .document import Document
from .errors import DataError

DEFAULT_ROOTS = ("/usr", "/opt", "/root")
KIND_BY_SUFFIX: dict[str, str] = {
    **dict.fromkeys((".py", ".pyi", ".pyx", ".pxd", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx",
                     ".cu", ".cuh", ".inl", ".ipp", ".rs", ".go", ".java", ".js", ".ts", ".sh", ".bash", ".cmake",
                     ".pl", ".pm", ".rb", ".lua", ".jl", ".f90", ".s", ".asm", ".ptx", ".sql", ".r", ".m",
                     ".mlir", ".td", ".proto"), "code"),
    **dict.fromkeys((".md", ".rst", ".txt", ".html", ".htm", ".tex", ".texi", ".pod", ".adoc", ".org"), "docs"),
    **dict.fromkeys((".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".xml", ".csv"), "data"),
}
KINDS = ("code", "docs", "data")
#: folders never walked: caches, pseudo file systems, build trees, and every hidden folder (version control,
#: a home's caches and settings, which change as programs run) but a virtual environment's
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "proc", "sys", "dev"})
KEEP_HIDDEN = frozenset({".venv"})
#: paths never walked: the driver mount (it follows the host's driver, not the image), temporaries
SKIP_PREFIXES = ("/usr/local/nvidia", "/tmp", "/var/tmp", "/proc", "/sys", "/dev")
LICENCE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|COPYRIGHT|NOTICE|AUTHORS|CONTRIBUTORS|THIRD[-_]PARTY)", re.I)
GENERATED_NAME = re.compile(r"(_pb2(_grpc)?\.pyi?|\.pb\.(h|cc)|\.min\.(js|css)|_generated\.\w+|\.g\.\w+"
                            r"|^__editable__.*)$", re.I)
GENERATED_MARK = re.compile(r"DO NOT EDIT|@generated|automatically generated|auto-generated|autogenerated|"
                            r"generated by (the )?(protoc|cython|swig|flatc|sphinx|doxygen)", re.I)
GENERATED_HEAD = 2000
MIN_FILE_BYTES = 64
MAX_FILE_BYTES = 1_000_000
MAX_MEAN_LINE = 200
MAX_LINE = 5000
#: bytes of the train split (in its hash order) each candidate tokenizer is trained on
TOKENIZER_SAMPLE = 128 * 2**20
DEFAULT_VOCAB_SIZES = (16384, 32768, 65536)
MANIFEST_FILE = "image_manifest.tsv.gz"
LOCK_FILE = "lock.json"
TOKENIZER_DIR = "tokenizer"
#: the lock's tokenizer: the Rust tokenizer's JSON, gzipped (a 65,536-token BPE is 4.7 MB as text, and the
#: lock travels with every device call)
LOCK_TOKENIZER = "tokenizer.json.gz"
#: areas of the image, by path (first match wins); the rest is "other"
AREAS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("python", re.compile(r"/(site|dist)-packages/|/usr/lib/python3")),
    ("cuda", re.compile(r"/usr/local/cuda|/opt/nvidia/")),
    ("c-headers", re.compile(r"/usr/include/|/usr/local/include/")),
    ("system-docs", re.compile(r"/usr/share/(doc|man|info)/")),
)


def area_of(path: str) -> str:
    """Which part of the image a file is in (AREAS)."""
    return next((name for name, rx in AREAS if rx.search(path)), "other")


def file_kind(path: Path) -> str | None:
    """The kind of a file by its name (code, docs, data), or None when the rules leave it out."""
    name = path.name
    if LICENCE_NAME.match(name) or GENERATED_NAME.search(name):
        return None
    return KIND_BY_SUFFIX.get(path.suffix.lower())


@dataclass(frozen=True)
class Candidate:
    """A file chosen by its path: what the manifest lists (with its hash)."""

    path: str
    size: int
    kind: str

    @property
    def source(self) -> str:
        return f"{area_of(self.path)}-{self.kind}"


def select_path(roots: Sequence[str | Path], exclude: Sequence[Path] = ()) -> list[Candidate]:
    """The files under `roots` that the path rules keep (module docstring), sorted by path."""
    found: list[Candidate] = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        top = str(root.resolve())  # a root inside a skipped prefix (a test's /tmp) is walked all the same
        excluded = tuple(p for p in (*SKIP_PREFIXES, *(str(Path(e).resolve()) for e in exclude))
                         if not (top == p or top.startswith(p + "/")))
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and (not d.startswith(".") or d in KEEP_HIDDEN)
                       and not _skipped(os.path.join(folder, d), excluded)]
            for name in files:
                path = os.path.join(folder, name)
                kind = file_kind(Path(name))
                if kind is None or os.path.islink(path):
                    continue
                try:
                    size = os.stat(path).st_size
                except OSError:
                    continue
                if MIN_FILE_BYTES <= size <= MAX_FILE_BYTES:
                    found.append(Candidate(path, size, kind))
    found.sort(key=lambda c: c.path)
    return found


def _skipped(path: str, excluded: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in excluded)


def text_of(raw: bytes, path: str) -> tuple[str | None, str]:
    """(the document's text, "") or (None, why it is left out) by the text rules."""
    if b"\0" in raw:
        return None, "binary"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, "binary"
    lines = text.count("\n") + 1
    if len(text) / lines > MAX_MEAN_LINE or max(map(len, text.split("\n"))) > MAX_LINE:
        return None, "minified"
    if GENERATED_MARK.search(text[:GENERATED_HEAD]):
        return None, "generated"
    text = extract.html_to_text(text) if path.lower().endswith((".html", ".htm")) else extract.tidy(text)
    return (text, "") if text.strip() else (None, "empty")


@dataclass(frozen=True)
class ReadFile:
    """One candidate as a worker read it: its hash, and its paragraphs with their dedup keys, or
    why it was left out."""

    sha256: str
    keyed: KeyedParagraphs | None
    reason: str


def read_kept(path: str) -> ReadFile:
    """Hash a candidate and, when the text rules keep it, split it into keyed paragraphs."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return ReadFile("", None, "unreadable")
    text, reason = text_of(raw, path)
    return ReadFile(hashlib.sha256(raw).hexdigest(), paragraph_keys(text) if text is not None else None, reason)


# ----------------------------------------------------------------------------- the manifest
#: hex digits of each file's SHA-256 the manifest keeps (64 bits: a changed file is told apart, and the
#: committed manifest stays a few MB for the ~10^5 files of an image)
MANIFEST_HASH_DIGITS = 16


def manifest_lines(files: Iterable[tuple[Candidate, str]]) -> list[str]:
    """"path<TAB>size<TAB>sha256 prefix" per file (files with their hashes, in path order)."""
    return [f"{c.path}\t{c.size}\t{sha[:MANIFEST_HASH_DIGITS]}" for c, sha in files]


def manifest_fingerprint(lines: Sequence[str]) -> str:
    """SHA-256 of the manifest's text (its lines, each ending in a newline)."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()


def write_bytes_gz(path: Path, data: bytes) -> None:
    """`data` gzipped deterministically (no name or time in the gzip header)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as fh:
        fh.write(data)


def write_manifest(path: Path, lines: Sequence[str]) -> None:
    """The manifest, gzipped deterministically."""
    write_bytes_gz(path, "".join(line + "\n" for line in lines).encode("utf-8"))


def read_manifest(path: Path) -> list[str]:
    """The lines of a manifest written by `write_manifest`."""
    try:
        return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"{path}: not a readable image manifest ({exc})") from exc


def manifest_difference(locked: Sequence[str], found: Sequence[str]) -> tuple[int, int, int]:
    """(files added, removed, changed) from the locked manifest to the one found."""
    def table(lines: Sequence[str]) -> dict[str, str]:
        return {line.split("\t", 1)[0]: line for line in lines}

    a, b = table(locked), table(found)
    return (len(b.keys() - a.keys()), len(a.keys() - b.keys()),
            sum(a[p] != b[p] for p in a.keys() & b.keys()))


# ----------------------------------------------------------------------------- the tokenizer
def choose_vocab(tokens_per_byte: dict[int, float], flops_per_token: Callable[[int], float]) -> int:
    """The vocabulary size whose training FLOPs per byte of text (tokens per byte x FLOPs per token at
    that size) is lowest; the smaller size on a tie."""
    return min(sorted(tokens_per_byte), key=lambda v: tokens_per_byte[v] * flops_per_token(v))


def measure_tokenizers(train: list[Document], held_out: list[Document], sizes: Sequence[int],
                       log: Callable[[str], None]) -> tuple[dict, dict]:
    """Train a BPE at each of `sizes` on the train sample, measure tokens per byte on `held_out`:
    ({size: tokenizer}, {size: {"tokens_per_byte", "train_seconds"}})."""
    from .tokenizer import training_sample

    sample = training_sample(train, TOKENIZER_SAMPLE)
    global _MEASURE
    _MEASURE = (sample, held_out)  # read by the forked workers (one BPE each, all at once)
    tokenizers, measured = {}, {}
    jobs = list(_pool_map(_train_and_measure, list(sizes), len(sizes), chunk=1))
    _MEASURE = None
    for size, (tok, result) in zip(sizes, jobs):
        tokenizers[size], measured[size] = tok, result
        log(f"BPE {size:,}: {result['tokens_per_byte']:.4f} tokens per byte of the held-out split "
            f"({result['train_seconds']} s)")
    return tokenizers, measured


_MEASURE: tuple[list[Document], list[Document]] | None = None


def _train_and_measure(size: int) -> tuple:
    """One candidate BPE of `size` trained on the sample and its tokens per byte of the held-out split."""
    from .tokenizer import train_corpus_tokenizer

    assert _MEASURE is not None
    sample, held_out = _MEASURE
    start = time.perf_counter()
    tok, info = train_corpus_tokenizer(sample, size, sample_bytes=TOKENIZER_SAMPLE)
    tokens = sum(len(e.ids) for e in tok.backend_tokenizer.encode_batch_fast(
        [d.text for d in held_out], add_special_tokens=False))
    return tok, dict(tokens_per_byte=tokens / sum(d.n_bytes for d in held_out),
                     train_seconds=round(time.perf_counter() - start, 1), vocab_size=len(tok),
                     train_bytes=info["train_bytes"])


# ----------------------------------------------------------------------------- the composition
def carried_sources(folder: Path) -> dict[str, dict]:
    """Registry, package, version, licence and kind of each source of a carried corpus folder (its
    composition.json; a source it does not describe is of kind "docs")."""
    try:
        rows = json.loads((Path(folder) / "composition.json").read_text())
    except (OSError, ValueError):
        rows = []
    keys = ("registry", "package", "version", "licence", "kind")
    return {r["source"]: {k: r.get(k, "") for k in keys} for r in rows if isinstance(r, dict) and "source" in r}


def composition(meta: dict[str, dict], train: list[Document], val: list[Document], stats,
                tokens: dict[str, dict[str, int]], code: dict[str, int]) -> list[dict]:
    """One row per source (in `meta` order, those with a document kept): where it came from, documents,
    bytes and tokens per split, duplicates removed, code share (`build.composition_markdown`'s rows)."""
    rows = []
    for name, where in meta.items():
        row: dict = dict(source=name, **{k: where.get(k, "") for k in ("registry", "package", "version", "licence")},
                         kind=where.get("kind") or "docs", paragraphs_removed=stats.paragraphs_removed.get(name, 0),
                         bytes_removed=stats.bytes_removed.get(name, 0),
                         documents_emptied=stats.documents_emptied.get(name, 0))
        for split, docs in (("train", train), ("val", val)):
            mine = [d for d in docs if d.source == name]
            row[f"{split}_documents"] = len(mine)
            row[f"{split}_bytes"] = sum(d.n_bytes for d in mine)
            row[f"{split}_tokens"] = tokens[split].get(name, 0)
        total = row["train_bytes"] + row["val_bytes"]
        if not total:
            continue
        row["code_bytes"] = code.get(name, 0)
        row["code_share"] = row["code_bytes"] / total
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- the build
@dataclass(frozen=True)
class ImageLock:
    """A lock folder: the manifest, the tokenizer and the fingerprints of a built corpus."""

    folder: Path

    @property
    def exists(self) -> bool:
        return (self.folder / LOCK_FILE).is_file()

    def read(self) -> dict:
        try:
            return json.loads((self.folder / LOCK_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise DataError(f"{self.folder / LOCK_FILE}: not a readable corpus lock ({exc})") from exc

    def manifest(self) -> list[str]:
        return read_manifest(self.folder / MANIFEST_FILE)


def _pool_map(fn: Callable, items: Sequence, workers: int, chunk: int = 64) -> Iterator:
    if workers <= 1:
        return map(fn, items)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
    try:
        return iter(list(pool.map(fn, items, chunksize=chunk)))
    finally:
        pool.shutdown()


def build_image_corpus(out: Path, lock: Path, *, roots: Sequence[str | Path] = DEFAULT_ROOTS,
                       carried: Path | None = None, new_manifest: bool = False,
                       vocab_sizes: Sequence[int] = DEFAULT_VOCAB_SIZES, val_fraction: float = 0.02,
                       workers: int | None = None, exclude: Sequence[Path] = (),
                       flops_per_token: Callable[[int], float] | None = None,
                       log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> dict:
    """Build the corpus folder `out` (must not exist) from the image under `roots` and the `carried`
    corpus folder, against the lock in `lock` (module docstring); returns its manifest
    (mhar_corpus.json). `flops_per_token(vocab_size)`: the training FLOPs per token of the model the
    corpus is for, by which a first build chooses its vocabulary (`mhar_probe.flops.preset_flops_per_token`,
    passed by the command line: the data layer knows no model). Raises `DataError` (one line) for what
    it refuses."""
    from .built import load_built
    from tokenizers import Tokenizer

    from .tokenizer import tokenizer_fingerprint, wrap_tokenizer

    out = Path(out)
    if out.exists():
        raise DataError(f"{out}: already exists; remove it or choose another --out")
    start = time.perf_counter()
    workers = workers or len(os.sched_getaffinity(0))
    locked = ImageLock(Path(lock))
    lock_doc = locked.read() if locked.exists else None
    from ..provenance import CHECKOUT_DIR

    skip = [out, CHECKOUT_DIR, *exclude, *([carried] if carried else [])]
    candidates = select_path(roots, exclude=skip)
    log(f"{len(candidates):,} candidate files ({sum(c.size for c in candidates) / 1e6:,.0f} MB) under "
        f"{', '.join(map(str, roots))}; reading them on {workers} processes")
    read = list(_pool_map(read_kept, [c.path for c in candidates], workers))
    lines = manifest_lines((c, r.sha256) for c, r in zip(candidates, read))
    source_fp = manifest_fingerprint(lines)
    if lock_doc is not None and not new_manifest and source_fp != lock_doc["source_fingerprint"]:
        added, removed, changed = manifest_difference(locked.manifest(), lines)
        raise DataError(f"this image's text differs from the lock's manifest ({lock_doc['source_fingerprint'][:12]}): "
                        f"{added:,} files added, {removed:,} removed, {changed:,} changed; --new-manifest builds a "
                        f"new corpus under a new fingerprint")
    dropped = Counter(r.reason for r in read if r.keyed is None)
    log(f"image: {len(lines):,} files in the manifest ({source_fp[:12]}); left out by the text rules: "
        + ", ".join(f"{n:,} {why}" for why, n in sorted(dropped.items())))

    heads: list[tuple[str, str]] = []
    keyed: list[KeyedParagraphs] = []
    carried_doc = None
    if carried is not None:
        prior = load_built(carried)
        docs = [*prior.train, *prior.val]
        docs.sort(key=lambda d: d.id)
        heads += [(d.id, d.source) for d in docs]
        keyed += list(_pool_map(paragraph_keys, [d.text for d in docs], workers))
        carried_doc = dict(folder=Path(carried).name, fingerprint=prior.fingerprint, documents=len(docs))
        log(f"carried: {len(docs):,} documents of {carried} ({prior.fingerprint[:12]})")
        if lock_doc is not None and lock_doc.get("carried") and not new_manifest \
                and lock_doc["carried"]["fingerprint"] != prior.fingerprint:
            raise DataError(f"the carried corpus {carried} is {prior.fingerprint[:12]}, the lock's is "
                            f"{lock_doc['carried']['fingerprint'][:12]}: carry that one, or --new-manifest")
    meta = carried_sources(carried) if carried is not None else {}
    for c, r in zip(candidates, read):
        if r.keyed is not None:
            heads.append((f"image:{c.path}", c.source))
            keyed.append(r.keyed)
            meta.setdefault(c.source, dict(registry="image", package=area_of(c.path), version=source_fp[:12],
                                           licence="each file's own", kind=c.kind))
    del read
    docs, stats = dedup_keyed(heads, keyed)
    del keyed
    if len(docs) < 2:
        raise DataError(f"{len(docs)} document(s) of text under {', '.join(map(str, roots))}: a corpus needs "
                        f"at least two")
    train, val = split_documents(docs, val_fraction)
    fingerprint = corpus_fingerprint(train, val)
    log(f"deduplicated and split: {len(train):,} train / {len(val):,} held-out documents "
        f"({sum(d.n_bytes for d in train) / 1e6:,.0f} / {sum(d.n_bytes for d in val) / 1e6:,.0f} MB), "
        f"corpus {fingerprint[:12]} ({time.perf_counter() - start:.0f} s)")
    if lock_doc is not None and not new_manifest and fingerprint != lock_doc["fingerprint"]:
        raise DataError(f"the corpus built is {fingerprint[:12]}, the lock's is {lock_doc['fingerprint'][:12]} "
                        f"although its sources match: the build's rules changed; --new-manifest builds anew")

    choice = None
    if lock_doc is not None and (locked.folder / LOCK_TOKENIZER).is_file():
        tok = wrap_tokenizer(Tokenizer.from_str(gzip.decompress((locked.folder / LOCK_TOKENIZER).read_bytes()).decode()))
        if tokenizer_fingerprint(tok) != lock_doc["tokenizer_fingerprint"]:
            raise DataError(f"{locked.folder / TOKENIZER_DIR}: its fingerprint is not the lock's")
        choice = lock_doc.get("tokenizer_choice")
    else:
        tokenizers, measured = measure_tokenizers(train, val, vocab_sizes, log)
        if flops_per_token is None:
            raise DataError("a first build chooses its vocabulary by training FLOPs per byte: pass flops_per_token")
        chosen = choose_vocab({v: m["tokens_per_byte"] for v, m in measured.items()}, flops_per_token)
        tok = tokenizers[chosen]
        choice = dict(chosen=chosen, rule="least training FLOPs per byte at the 350M shape",
                      measured={str(v): {**m, "flops_per_byte": m["tokens_per_byte"] * flops_per_token(v)}
                                for v, m in measured.items()})
        log(f"tokenizer: {chosen:,} tokens chosen")

    code = Counter()
    for doc, n in zip((*train, *val), _pool_map(code_bytes, [d.text for d in (*train, *val)], workers)):
        code[doc.source] += n
    from .cache import save_npy_atomically
    from .packing import token_cache_key, token_cache_path, tokenize_split

    tokens: dict[str, dict[str, int]] = {}
    for split, part in (("train", train), ("val", val)):  # written where `load_packed` looks first
        lengths: list[int] = []
        ids = tokenize_split(part, tok, batch_docs=8192, lengths=lengths)  # [N]
        save_npy_atomically(token_cache_path(token_cache_key(fingerprint, tok, split)), ids)
        per: dict[str, int] = defaultdict(int)
        for doc, n in zip(part, lengths):
            per[doc.source] += n
        tokens[split] = dict(per)
    log(f"tokenized: {sum(tokens['train'].values()):,} train / {sum(tokens['val'].values()):,} held-out tokens "
        f"({time.perf_counter() - start:.0f} s)")
    rows = composition(meta, train, val, stats, tokens, code)
    lock_out = dict(format=1, source_fingerprint=source_fp, fingerprint=fingerprint, carried=carried_doc,
                    roots=[str(r) for r in roots], files=len(lines), tokenizer_fingerprint=tokenizer_fingerprint(tok),
                    vocab_size=len(tok), tokenizer_choice=choice, val_fraction=val_fraction,
                    train_tokens=sum(tokens["train"].values()), val_tokens=sum(tokens["val"].values()),
                    text_rules_dropped=dict(sorted(dropped.items())))

    def fill(tmp: Path) -> None:
        from .build import FORMAT_VERSION, MANIFEST, _write_shards, composition_markdown

        shards = {split: _write_shards(tmp / split, part) for split, part in (("train", train), ("val", val))}
        tok.save_pretrained(str(tmp / TOKENIZER_DIR))
        manifest = dict(
            format=FORMAT_VERSION, fingerprint=fingerprint, val_fraction=val_fraction,
            split_rule="held out when sha1(id) as a number in [0,1) < val_fraction, stratified per source",
            shards=shards, documents=dict(train=len(train), val=len(val)),
            bytes=dict(train=sum(d.n_bytes for d in train), val=sum(d.n_bytes for d in val)),
            train_tokens=lock_out["train_tokens"], val_tokens=lock_out["val_tokens"], vocab_size=len(tok),
            vocab_size_requested=len(tok), tokenizer=TOKENIZER_DIR, sources=sorted({s for _, s in heads}),
            image=dict(source_fingerprint=source_fp, files=len(lines), carried=carried_doc),
            build_seconds=round(time.perf_counter() - start, 1), workers=workers)
        (tmp / "composition.json").write_text(json.dumps(rows, indent=1) + "\n")
        (tmp / "composition.md").write_text(composition_markdown(rows, manifest))
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        lock_dir = tmp / "lock"
        lock_dir.mkdir()
        write_manifest(lock_dir / MANIFEST_FILE, lines)
        write_bytes_gz(lock_dir / LOCK_TOKENIZER, tok.backend_tokenizer.to_str().encode("utf-8"))
        (lock_dir / "composition.json").write_text(json.dumps(rows, indent=1) + "\n")
        (lock_dir / LOCK_FILE).write_text(json.dumps({**lock_out, "build_seconds": manifest["build_seconds"],
                                                      "workers": workers}, indent=1) + "\n")

    build_dir(out, fill)
    log(f"{out}: built in {time.perf_counter() - start:.0f} s")
    return json.loads((out / "mhar_corpus.json").read_text())
