"""Harness samples files stored compactly: each run's per-item results, the prompts once per prompt set.

The LM Evaluation Harness writes, per task, `samples_<task>_<date>.jsonl`: one JSON object per
(document, filter) holding what the model was asked (`doc`, `arguments`) and the hashes of it
(`doc_hash`, `prompt_hash`, `target_hash`) beside the run's own answers (`resps`,
`filtered_resps`) and per-item metrics. Every run of a study is evaluated on the same items, so
the prompt part repeats in every run's file, and it is about 90% of a gzipped one (1,000
`mhar_lastword` items: 0.32 MB gzipped, 0.03 MB without the prompts and their hashes, which are
64 hex digits each and do not compress). This module owns the committed form that stores it once:

* **the compact samples file** `samples_<task>_<date>.compact.jsonl.gz` (gzip, beside where the
  harness file was): line 1 is a header
  `{"mhar_compact_samples": 1, "task": T, "prompts": "<shard name>", "lines": N}`; each further line
  is the harness line with every PROMPT_FIELDS value replaced by `null` (the key stays, so the
  field order is kept) and one key added at the end, `"mhar_prompt": i`, the index of its prompt
  in the shard.
* **the prompt shard** `prompts/<task>.<digest>.jsonl.gz` in an ancestor folder of the compact
  file (`runs/evals/prompts/` for a study): line 1 is a header
  `{"mhar_prompts": 1, "task": T, "items": M}`, then line i + 2 holds item i:
  `{"doc_id": ..., <the PROMPT_FIELDS the harness wrote, in its order>}`. Items are distinct
  (doc_id, prompt) pairs sorted by doc_id, then by the prompt's JSON, so one prompt set
  gives one shard whatever the run. `<digest>` is the first 16 hex digits of the SHA-256 of the
  shard's uncompressed bytes: a shard's name is its content. Runs asked the same items share one
  shard; a run whose prompts differ at even one item gets a shard of its own, and both stay (an
  export's part unpacked over a committed folder can add a shard, never change one). Nothing is
  merged: a shard under an existing name with other content is refused, and so is a shard whose
  bytes no longer match its name.

Reading (`read_compact`) re-joins each line with its prompt and gives back the harness's record
exactly, key order included: `json.dumps(record, ensure_ascii=False) + "\\n"` is the harness's
line, byte for byte, which `compact` checks before it reports success (a file it cannot restore
exactly is refused, never stored lossily). `analysis.stats.lm_eval_io` reads both forms, so no
reader downstream needs to know which one a folder holds.

`convert_folder(evals)` converts a committed evaluations folder in place (idempotent: compact
files already there are checked, not rewritten) and says which tasks have more than one prompt
set and at which items they differ.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .atomic import write_bytes
from .errors import UserError
from .jsonl import read_jsonl

#: the fields of a harness line that describe the item, not the run (the same in every run asked it)
PROMPT_FIELDS = ("doc", "arguments", "doc_hash", "prompt_hash", "target_hash")
#: the key a compact line adds: the index of its item in the prompt shard
REF = "mhar_prompt"
HEADER = "mhar_compact_samples"
SHARD_HEADER = "mhar_prompts"
VERSION = 1
COMPACT_SUFFIX = ".compact.jsonl.gz"
PROMPTS_DIR = "prompts"
DIGEST_CHARS = 16
DATE = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"  # the harness's file date (as analysis.stats.lm_eval_io)
#: the harness's samples file (`.gz`: as exports gzipped it before the compact form)
HARNESS_RE = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{DATE})\.jsonl(?:\.gz)?$")
TASK_RE = re.compile(rf"^samples_(?P<task>.+)_{DATE}(?:\.compact)?\.jsonl(?:\.gz)?$")


class SampleStoreError(UserError):
    """A compact samples file or prompt shard that cannot be read or written as it must (one line)."""


# ----------------------------------------------------------------------------- names
def is_compact(path: str | Path) -> bool:
    """Whether `path` names a compact samples file (`samples_*.compact.jsonl.gz`)."""
    name = Path(path).name
    return name.startswith("samples_") and name.endswith(COMPACT_SUFFIX)


def is_harness_samples(path: str | Path) -> bool:
    """Whether `path` names a harness samples file (`samples_<task>_<date>.jsonl`, or `.jsonl.gz`)."""
    return HARNESS_RE.match(Path(path).name) is not None


def compact_name(harness: str | Path) -> str:
    """`samples_<task>_<date>.jsonl[.gz]` -> `samples_<task>_<date>.compact.jsonl.gz`."""
    m = HARNESS_RE.match(Path(harness).name)
    if m is None:
        raise SampleStoreError(f"{harness}: not a harness samples file (samples_<task>_<date>.jsonl[.gz])")
    return f"samples_{m['task']}_{m['date']}{COMPACT_SUFFIX}"


# ----------------------------------------------------------------------------- bytes
def _line(record: dict[str, Any]) -> str:
    """A record as the harness writes it (`json.dumps(..., ensure_ascii=False)` plus a newline)."""
    return json.dumps(record, ensure_ascii=False) + "\n"


def _exact(value: Any) -> str:
    """A value's identity, key order included (two prompts are the same only if they restore the same bytes)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _gzip(data: bytes) -> bytes:
    """Level 9, no name and no time in the header: the bytes depend on the content alone."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def _read_bytes(path: Path) -> bytes:
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")) as f:
            return f.read()
    except (OSError, EOFError) as exc:
        raise SampleStoreError(f"{path}: not readable ({type(exc).__name__}: {exc})") from None


def _records(path: Path) -> list[tuple[int, Any]]:
    return list(read_jsonl(path, SampleStoreError))


def _doc_order(doc_id: Any) -> tuple[str, str]:
    return (type(doc_id).__name__, f"{doc_id:020d}" if isinstance(doc_id, int) else str(doc_id))


# ----------------------------------------------------------------------------- shards
@dataclass(frozen=True)
class Shard:
    """One prompt set of a task: `items[i]` = {"doc_id": ..., prompt fields ...}."""

    task: str
    items: list[dict[str, Any]]

    def text(self) -> str:
        header = {SHARD_HEADER: VERSION, "task": self.task, "items": len(self.items)}
        return _line(header) + "".join(_line(item) for item in self.items)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text().encode("utf-8")).hexdigest()[:DIGEST_CHARS]

    @property
    def name(self) -> str:
        return f"{self.task}.{self.digest}.jsonl.gz"


def read_shard(path: Path) -> Shard:
    """A prompt shard, checked: its header, its item count, and that its bytes still hash to its name."""
    data = _read_bytes(path)
    rows = _records(path)
    if not rows or not isinstance(rows[0][1], dict) or rows[0][1].get(SHARD_HEADER) != VERSION:
        raise SampleStoreError(f"{path}: not a prompt shard (line 1 must be {{\"{SHARD_HEADER}\": {VERSION}, ...}})")
    header = rows[0][1]
    items = [rec for _, rec in rows[1:]]
    if header.get("items") != len(items) or not all(isinstance(r, dict) and "doc_id" in r for r in items):
        raise SampleStoreError(f"{path}: damaged prompt shard (its header counts {header.get('items')} items, "
                               f"it holds {len(items)})")
    shard = Shard(task=str(header.get("task")), items=items)
    if shard.text().encode("utf-8") != data or shard.name != path.name:
        raise SampleStoreError(f"{path}: the shard's content does not match its name (edited or damaged); "
                               "a shard is named by its content and never changed")
    return shard


def write_shard(shard: Shard, prompts_dir: Path) -> tuple[Path, bool]:
    """Write `shard` into `prompts_dir` unless the same shard is there; returns (path, written).
    A file under its name with other content is refused: nothing is merged or overwritten."""
    path = prompts_dir / shard.name
    if path.exists():
        try:
            same = _read_bytes(path) == shard.text().encode("utf-8")
        except SampleStoreError:
            same = False
        if not same:
            raise SampleStoreError(f"{path}: prompt conflict: a shard of this name holds other prompts; "
                                   "refusing to overwrite it (remove the damaged file if it is one)")
        return path, False
    write_bytes(path, _gzip(shard.text().encode("utf-8")))
    return path, True


def find_shard(samples: Path, name: str) -> Path:
    """The shard `name` in the nearest `prompts/` folder above the compact file `samples`."""
    for folder in samples.resolve().parents:
        candidate = folder / PROMPTS_DIR / name
        if candidate.is_file():
            return candidate
    raise SampleStoreError(f"{samples}: its prompt shard {name} is in no {PROMPTS_DIR}/ folder above it; "
                           "commit the folder's prompts/ with its samples")


# ----------------------------------------------------------------------------- compact / read
@dataclass
class Compacted:
    """What `compact` wrote: the compact file, its shard (and whether the shard is new)."""

    source: Path
    path: Path
    shard: Path
    shard_written: bool
    lines: int
    items: int


def split(task: str, records: list[dict[str, Any]]) -> tuple[Shard, list[dict[str, Any]]]:
    """Harness records -> (their prompt shard, the compact lines)."""
    prompts: dict[tuple[str, str], dict[str, Any]] = {}
    keys = []
    for rec in records:
        item = {"doc_id": rec.get("doc_id"), **{k: rec[k] for k in rec if k in PROMPT_FIELDS}}
        key = (_exact(item["doc_id"]), _exact(item))
        prompts.setdefault(key, item)
        keys.append(key)
    order = sorted(prompts, key=lambda k: (_doc_order(prompts[k]["doc_id"]), k[1]))
    index = {k: i for i, k in enumerate(order)}
    lines = [{**{k: (None if k in PROMPT_FIELDS else v) for k, v in rec.items()}, REF: index[key]}
             for rec, key in zip(records, keys)]
    return Shard(task=task, items=[prompts[k] for k in order]), lines


def join(line: dict[str, Any], item: dict[str, Any], where: str) -> dict[str, Any]:
    """A compact line with its prompt put back where the harness wrote it: the original record."""
    if line.get("doc_id") != item["doc_id"]:
        raise SampleStoreError(f"{where}: doc_id {line.get('doc_id')!r}, but its prompt is doc_id {item['doc_id']!r}")
    missing = [k for k in item if k != "doc_id" and k not in line]
    if missing:
        raise SampleStoreError(f"{where}: no placeholder for the prompt field(s) {', '.join(missing)}")
    return {k: (item[k] if k in item and k != "doc_id" else v) for k, v in line.items() if k != REF}


def compact(samples: str | Path, prompts_dir: str | Path, out: str | Path | None = None,
            task: str | None = None) -> Compacted:
    """Store the harness samples file `samples` compactly: its shard into `prompts_dir` (kept if the
    same shard is there), its compact lines into `out` (default: `compact_name(samples)` beside it,
    which must be below `prompts_dir`'s parent so the reader finds the shard). The result is read
    back and must restore `samples`' bytes exactly, or `SampleStoreError` is raised (and the
    compact file removed); `samples` itself is left as it is."""
    samples, prompts_dir = Path(samples), Path(prompts_dir)
    out = Path(out) if out is not None else samples.with_name(compact_name(samples))
    if task is None:
        task = _task(samples)
    if out.exists():
        raise SampleStoreError(f"{out}: exists; remove it or convert the folder with convert_folder")
    original = _read_bytes(samples)
    records = []
    for lineno, rec in _records(samples):
        if not isinstance(rec, dict):
            raise SampleStoreError(f"{samples}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        if REF in rec:
            raise SampleStoreError(f"{samples}:{lineno}: already has a field {REF!r}; it cannot be stored compactly")
        records.append(rec)
    if not records:
        raise SampleStoreError(f"{samples}: no samples (empty file)")
    shard, lines = split(task, records)
    shard_path, shard_written = write_shard(shard, prompts_dir)
    header = {HEADER: VERSION, "task": task, "prompts": shard.name, "lines": len(lines)}
    write_bytes(out, _gzip((_line(header) + "".join(_line(x) for x in lines)).encode("utf-8")))
    try:
        try:
            restored = "".join(_line(rec) for _, rec in read_compact(out)).encode("utf-8")
        except SampleStoreError as exc:
            raise SampleStoreError(f"{samples}: its compact form does not read back ({exc})") from None
        if restored != original:
            raise SampleStoreError(f"{samples}: its compact form does not restore the file byte for byte "
                                   "(not the harness's JSON layout?); left uncompacted")
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return Compacted(source=samples, path=out, shard=shard_path, shard_written=shard_written,
                     lines=len(lines), items=len(shard.items))


def _task(path: Path) -> str:
    """The task of `samples_<task>_<date>...`: the name without the harness's date suffix."""
    m = TASK_RE.match(path.name)
    return m["task"] if m else path.name.split(".")[0].removeprefix("samples_")


def read_header(path: Path) -> dict[str, Any]:
    """The header of a compact samples file (checked)."""
    rows = read_jsonl(path, SampleStoreError)
    try:
        return _header(path, next(rows, None))
    finally:
        rows.close()


def _header(path: Path, first: tuple[int, Any] | None) -> dict[str, Any]:
    if first is None or first[0] != 1 or not isinstance(first[1], dict) or first[1].get(HEADER) != VERSION \
            or not isinstance(first[1].get("prompts"), str):
        raise SampleStoreError(f"{path}: not a compact samples file (line 1 must be "
                               f"{{\"{HEADER}\": {VERSION}, \"prompts\": ...}})")
    return first[1]


def read_compact(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number in `path`, the harness's original record) for every sample of a compact file,
    in the harness's order, each re-joined with its prompt from the shard the header names."""
    path = Path(path)
    rows = read_jsonl(path, SampleStoreError)
    header = _header(path, next(rows, None))
    shard = read_shard(find_shard(path, header["prompts"]))
    count = 0
    for lineno, line in rows:
        where = f"{path}:{lineno}"
        if not isinstance(line, dict):
            raise SampleStoreError(f"{where}: expected a JSON object, got {type(line).__name__}")
        ref = line.get(REF)
        if not isinstance(ref, int) or isinstance(ref, bool) or not 0 <= ref < len(shard.items):
            raise SampleStoreError(f"{where}: {REF!r} must index the shard's {len(shard.items)} prompts, got {ref!r}")
        count += 1
        yield lineno, join(line, shard.items[ref], where)
    if count != header.get("lines"):
        raise SampleStoreError(f"{path}: holds {count} samples, its header says {header.get('lines')} (truncated?)")


def expand(path: str | Path) -> bytes:
    """The harness samples file a compact file stores, byte for byte (uncompressed)."""
    return "".join(_line(rec) for _, rec in read_compact(path)).encode("utf-8")


# ----------------------------------------------------------------------------- folders
@dataclass
class Conversion:
    """What `convert_folder` did, and the tasks whose runs were asked different prompts."""

    converted: list[Compacted] = field(default_factory=list)
    checked: list[Path] = field(default_factory=list)  # compact files already there, read back whole
    shards: dict[str, dict[str, list[Path]]] = field(default_factory=dict)  # task -> shard name -> compact files
    differing: dict[str, list[Any]] = field(default_factory=dict)  # task -> doc_ids whose prompt differs

    def lines(self) -> list[str]:
        out = [f"compacted {c.source} -> {c.path.name} ({c.lines} lines, {c.items} prompts in {c.shard.name})"
               for c in self.converted]
        out += [f"already compact: {p}" for p in self.checked]
        for task, by_shard in sorted(self.shards.items()):
            if len(by_shard) > 1:
                ids = self.differing.get(task, [])
                out.append(f"task {task}: {len(by_shard)} prompt sets kept side by side "
                           f"({', '.join(f'{n}: {len(f)} runs' for n, f in sorted(by_shard.items()))}); "
                           f"{len(ids)} doc_id(s) differ: {', '.join(map(repr, ids[:10]))}"
                           f"{' ...' if len(ids) > 10 else ''}")
        return out


def convert_folder(evals: str | Path) -> Conversion:
    """Convert every harness samples file under `evals` (a study's `runs/evals`) to the compact form
    in place, its shards into `evals/prompts/`; each original is removed only after its compact
    form restored it exactly. Idempotent: compact files already there are read back whole (their
    shard found and checked) and left as they are. A shard conflict is refused before anything of
    that file is written (`SampleStoreError`, one line)."""
    evals = Path(evals)
    if not evals.is_dir():
        raise SampleStoreError(f"{evals}: no such folder (pass a study's runs/evals)")
    prompts = evals / PROMPTS_DIR
    report = Conversion()
    files = sorted(p for p in evals.rglob("samples_*") if p.is_file() and prompts not in p.parents)
    for path in files:
        if is_compact(path):
            for _ in read_compact(path):
                pass
            report.checked.append(path)
        elif is_harness_samples(path):
            out = path.with_name(compact_name(path))
            if out.exists():
                raise SampleStoreError(f"{path}: both it and its compact form {out.name} exist; "
                                       "remove the one that is not wanted")
            done = compact(path, prompts, out)
            os.utime(out, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
            path.unlink()
            report.converted.append(done)
    for path in sorted(p for p in evals.rglob("samples_*" + COMPACT_SUFFIX) if prompts not in p.parents):
        header = read_header(path)
        report.shards.setdefault(str(header["task"]), {}).setdefault(header["prompts"], []).append(path)
    for task, by_shard in report.shards.items():
        if len(by_shard) > 1:
            report.differing[task] = differing_items([read_shard(find_shard(f[0], n)) for n, f in by_shard.items()])
    return report


def differing_items(shards: list[Shard]) -> list[Any]:
    """doc_ids whose prompt is not the same in every shard (absent from one counts as differing)."""
    sets = []
    for shard in shards:
        by_doc: dict[str, set[str]] = {}
        for item in shard.items:
            by_doc.setdefault(_exact(item["doc_id"]), set()).add(_exact(item))
        sets.append(by_doc)
    ids = set().union(*sets)
    out = [json.loads(d) for d in ids if len({frozenset(s.get(d, ())) for s in sets}) > 1]
    return sorted(out, key=_doc_order)


def share_shards(root: str | Path) -> list[Path]:
    """Keep one copy of each prompt shard under `root`, in `root/prompts/`: every other `prompts/`
    folder below `root` gives up the shards that copy holds (moving its first copy there). Readers
    find a shard in the nearest `prompts/` above a compact file (`find_shard`), so every study
    folder below `root` (a rate, a rung, a scale, each exported with its own `runs/evals/prompts/`)
    reads the one copy. A shard is named by its content and each copy is checked (`read_shard`)
    before one is removed; a folder left empty is removed. Returns the shard files removed."""
    root = Path(root)
    shared = root / PROMPTS_DIR
    removed: list[Path] = []
    for folder in sorted(p for p in root.rglob(PROMPTS_DIR) if p.is_dir() and p != shared):
        for path in sorted(folder.glob("*.jsonl.gz")):
            shard = read_shard(path)
            target, written = write_shard(shard, shared)
            read_shard(target)
            path.unlink()
            if not written:
                removed.append(path)
        if not any(folder.iterdir()):
            folder.rmdir()
    return removed
