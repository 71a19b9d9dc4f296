"""Read LM Evaluation Harness `--log_samples` output and pair two arms item by item.

A harness run writes, under `<output_path>/<model_name_sanitized>/` (lm_eval
`loggers/evaluation_tracker.py`, `save_results_aggregated` / `save_results_samples`):

* `results_<date>.json`: aggregated metrics plus `configs[task]` (`output_type`,
  `filter_list`, `metric_list`) and `task_hashes`;
* `samples_<task>_<date>.jsonl` (or `.jsonl.gz`, gzipped, or `.compact.jsonl.gz`, the form study
  exports commit: each run's per-item results with the prompts stored once per prompt set in
  `prompts/`, `mhar_probe.samplestore`, read back as the same records): one JSON
  object per (document, filter) built in `lm_eval/evaluator.py`: `doc_id`, `doc`, `target`, `arguments`, `resps`, `filtered_resps`,
  `doc_hash`, `prompt_hash`, `target_hash` (since 0.4.3), `filter` and `metrics` (the
  list of metric names; both since 0.4.7), then one key per metric with the item's value.

Before 0.4.7 ("legacy" here) a task with several filters wrote one line per document per
filter with nothing naming the filter. The harness loops filter by filter (all documents for
the first filter, then the next ...), in the order of the task's `filter_list`, so the k-th
line of a document belongs to the k-th filter; the order is taken from the results file
(`configs[task].filter_list`, else the order of `"<metric>,<filter>"` keys), and is just
`["none"]` for tasks without filters. Lines beyond the known filters count as duplicates.

Pairing is on (doc_id, filter). Items present in one arm only, items that appear twice in an
arm, and items whose `doc_hash` / `prompt_hash` / `target_hash` differ between the arms are
counted and reported and left out of the test; nothing is dropped silently.

Distinct items: two documents with different ids can pose the same question (a task built
with repeated passages). `item_key` names what the model was asked, from the line itself: its
requests (`arguments`: the context and continuation of each loglikelihood request, the context
and generation settings of a generation request) and its `target`. The requests are compared
as a set, so a multiple-choice item whose choices come in another order (each choice is scored
on its own) is the same item, its answer being named by the choice the target points at. Lines
without `arguments` fall back on `doc`. `PairedItems.keys` carries the key of every pair, so
the number of distinct items can be reported next to the test.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from mhar_probe.jsonl import gzip_lines, not_text, open_bytes
from mhar_probe.runfiles import RunFileError, read_json
from mhar_probe.samplestore import COMPACT_SUFFIX, SampleStoreError, is_compact, read_compact

from .errors import StatsError

DATE = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
#: the harness's file, gzipped as exports wrote it before, or the compact form results folders commit
SAMPLES_RE = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{DATE})(?:\.jsonl(?:\.gz)?|{re.escape(COMPACT_SUFFIX)})$")
RESULTS_RE = re.compile(rf"^results_(?P<date>{DATE})\.json$")
HASH_FIELDS = ("doc_hash", "prompt_hash", "target_hash")
#: keys of a sample line that are not per-item metric values
NON_METRIC_KEYS = frozenset({"doc_id", "doc", "target", "arguments", "resps", "filtered_resps",
                             "filter", "metrics", *HASH_FIELDS})
#: default metric preference (multiple-choice tasks try acc_norm first)
METRIC_PREFERENCE = ("acc", "exact_match", "pass@1", "pass_at_1", "em", "correct", "acc_norm")


def _is_metric_value(value: Any) -> bool:
    """A per-item metric value: a number or bool, or a list of numbers (e.g. perplexity's pair)."""
    if isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, list) and all(isinstance(v, (bool, int, float)) for v in value)


def _unlisted_metrics(rec: dict[str, Any], where: str) -> list[str]:
    """The metric names of a line that has no `metrics` list (writers other than the harness
    itself): every key that is not a known sample field, provided each holds a metric value.
    A line with other keys is ambiguous and refused."""
    extra = [k for k in rec if k not in NON_METRIC_KEYS]
    unclear = [k for k in extra if not _is_metric_value(rec[k])]
    if unclear:
        raise StatsError(f"{where}: no 'metrics' list, and the key(s) {', '.join(unclear)} are neither known sample "
                         f"fields nor metric values; add a 'metrics' list naming the per-item metrics")
    return extra


@dataclass(frozen=True)
class Sample:
    """One (document, filter) line of a samples file."""

    doc_id: Any
    filter: str
    scores: dict[str, Any]
    hashes: dict[str, str]
    path: Path
    line: int
    item_key: str | None = None  # what the model was asked (see `item_key`); None if unknown


@dataclass
class TaskSamples:
    """All lines of one `samples_<task>_<date>.jsonl`."""

    task: str
    path: Path
    legacy: bool  # written before 0.4.7 (no `filter` / `metrics` fields)
    samples: list[Sample]
    filters: list[str]  # in order of first appearance
    metrics: list[str]  # metric names present on every line
    output_type: str | None = None
    duplicates: Counter = field(default_factory=Counter)  # (doc_id, filter) -> extra copies


@dataclass
class EvalRun:
    """One harness run (one date id) found under a directory."""

    root: Path
    date: str
    results_path: Path | None
    results: dict[str, Any] | None
    tasks: dict[str, TaskSamples]
    other_dates: list[str]  # further runs found in the same directory (not used)


# ----------------------------------------------------------------------------- discovery
def discover(root: str | Path) -> dict[str, dict[str, Any]]:
    """Map date id -> {"results": Path | None, "samples": {task: Path}} under `root` (recursive)."""
    root = Path(root)
    if not root.exists():
        raise StatsError(f"eval directory {root} does not exist")
    if not root.is_dir():
        raise StatsError(f"{root} is not a directory; pass the harness --output_path directory")
    runs: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*.json*")):
        if m := SAMPLES_RE.match(p.name):
            run = runs.setdefault(m["date"], {"results": None, "samples": {}})
            if m["task"] in run["samples"]:
                raise StatsError(f"two samples files for task {m['task']!r} and date {m['date']} under {root}: "
                                 f"{run['samples'][m['task']]} and {p}")
            run["samples"][m["task"]] = p
        elif m := RESULTS_RE.match(p.name):
            run = runs.setdefault(m["date"], {"results": None, "samples": {}})
            if run["results"] is not None:
                raise StatsError(f"two results files for date {m['date']} under {root}: {run['results']} and {p}")
            run["results"] = p
    return runs


def read_results(path: Path) -> dict[str, Any]:
    """Parse a `results_<date>.json`; errors name the file."""
    try:
        data = read_json(path)
    except RunFileError as exc:
        raise StatsError(str(exc)) from None
    if not isinstance(data, dict) or "results" not in data:
        raise StatsError(f"{path}: not a harness results file (no 'results' object)")
    return data


def filter_order(results: dict[str, Any] | None, task: str) -> list[str]:
    """The harness's filter loop order for `task` (see module docstring)."""
    if results:
        cfg = (results.get("configs") or {}).get(task) or {}
        names = [f.get("name") for f in cfg.get("filter_list") or [] if isinstance(f, dict)]
        if names and all(isinstance(n, str) for n in names):
            return names
        order: list[str] = []
        for key in (results.get("results") or {}).get(task, {}):
            if "," in key and "_stderr," not in key:
                flt = key.split(",", 1)[1]
                if flt not in order:
                    order.append(flt)
        if order:
            return order
    return ["none"]


def output_type(results: dict[str, Any] | None, task: str) -> str | None:
    if not results:
        return None
    return ((results.get("configs") or {}).get(task) or {}).get("output_type")


# ----------------------------------------------------------------------------- reading
def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def item_key(rec: dict[str, Any]) -> str | None:
    """The identity of a sample line's question: its set of requests and its answer.

    key = canonical JSON of (sorted canonical requests, answer), where the requests are the
    values of `arguments` (a dict `gen_args_k` -> args, or a list) and the answer is the request
    the integer `target` (or its decimal string) indexes when there are several requests
    (multiple choice), else the `target` itself. Without `arguments` the line's `doc` (with `target`) stands in; with
    neither, None.
    """
    target = rec.get("target")
    args = rec.get("arguments")
    if isinstance(args, dict):
        requests = list(args.values())
    elif isinstance(args, list):
        requests = args
    else:
        if "doc" not in rec:
            return None
        return _canonical(["doc", rec["doc"], target])
    answer: Any = target
    index = int(target) if isinstance(target, str) and target.isdigit() else target  # the harness writes "1"
    if len(requests) > 1 and isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(requests):
        answer = ["request", requests[index]]
    return _canonical(["arguments", sorted(_canonical(r) for r in requests), answer])


def read_samples(path: str | Path, task: str | None = None,
                 filters: list[str] | None = None) -> TaskSamples:
    """Read one samples file (either format). `filters`: legacy filter order (default ["none"]).

    Malformed input raises `StatsError` naming the file and line.
    """
    path = Path(path)
    if task is None:
        m = SAMPLES_RE.match(path.name)
        task = m["task"] if m else path.stem
    legacy_order = filters or ["none"]
    samples: list[Sample] = []
    seen: Counter = Counter()  # legacy: occurrences of a doc_id
    keys: Counter = Counter()
    duplicates: Counter = Counter()
    legacy: bool | None = None
    metric_sets: list[frozenset[str]] = []
    for lineno, rec in _sample_lines(path):
        where = f"{path}:{lineno}"
        if not isinstance(rec, dict):
            raise StatsError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        if "doc_id" not in rec:
            raise StatsError(f"{where}: missing field 'doc_id'")
        doc_id = rec["doc_id"]
        if not isinstance(doc_id, (int, str)) or isinstance(doc_id, bool):
            raise StatsError(f"{where}: 'doc_id' must be an integer or string, got {doc_id!r}")
        this_legacy = "filter" not in rec
        if legacy is None:
            legacy = this_legacy
        elif legacy != this_legacy:
            raise StatsError(f"{where}: mixes lines with and without a 'filter' field "
                             "(files from different harness versions?)")
        if this_legacy:
            k = seen[doc_id]
            seen[doc_id] += 1
            flt = legacy_order[k] if k < len(legacy_order) else legacy_order[-1]
            names = [key for key in rec if key not in NON_METRIC_KEYS]
        else:
            flt = rec["filter"]
            if not isinstance(flt, str):
                raise StatsError(f"{where}: 'filter' must be a string, got {flt!r}")
            names = rec["metrics"] if "metrics" in rec else _unlisted_metrics(rec, where)
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise StatsError(f"{where}: 'metrics' must be a list of metric names, got {names!r}")
            missing = [n for n in names if n not in rec]
            if missing:
                raise StatsError(f"{where}: metric(s) {', '.join(missing)} listed in 'metrics' but absent")
        if not names:
            raise StatsError(f"{where}: no per-item metric values on this line")
        hashes = {h: rec[h] for h in HASH_FIELDS if h in rec}
        for h, v in hashes.items():
            if not isinstance(v, str):
                raise StatsError(f"{where}: '{h}' must be a string, got {v!r}")
        key = (doc_id, flt)
        if keys[key]:
            duplicates[key] += 1
        keys[key] += 1
        metric_sets.append(frozenset(names))
        samples.append(Sample(doc_id=doc_id, filter=flt, scores={n: rec[n] for n in names},
                              hashes=hashes, path=path, line=lineno, item_key=item_key(rec)))
    if not samples:
        raise StatsError(f"{path}: no samples (empty file)")
    metrics = sorted(frozenset.intersection(*metric_sets))
    # keep the order of the first line for readability
    first = list(samples[0].scores)
    metrics = [m for m in first if m in metrics] + [m for m in metrics if m not in first]
    filters_seen = list(dict.fromkeys(s.filter for s in samples))
    return TaskSamples(task=task, path=path, legacy=bool(legacy), samples=samples,
                       filters=filters_seen, metrics=metrics, duplicates=duplicates)


def _sample_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed record) of each non-blank line of a harness samples file, or each
    sample of a compact one re-joined with its prompt (`mhar_probe.samplestore`: the same records)."""
    if is_compact(path):
        try:
            yield from read_compact(path)
        except SampleStoreError as exc:
            raise StatsError(str(exc)) from None
        return
    with open_bytes(path) as f:
        for lineno, data in enumerate(gzip_lines(f, path, StatsError), start=1):
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise StatsError(not_text(path, exc, lineno)) from None
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise StatsError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            yield lineno, rec


def load_eval_run(root: str | Path, tasks: Iterable[str] | None = None,
                  date: str | None = None) -> EvalRun:
    """Load the harness run under `root` (the latest date id unless `date` is given)."""
    root = Path(root)
    runs = discover(root)
    runs = {d: r for d, r in runs.items() if r["samples"]}
    if not runs:
        raise StatsError(f"no samples_<task>_<date>.jsonl files under {root}; "
                         "run the harness with --log_samples (and --output_path)")
    dates = sorted(runs)
    if date is None:
        date = dates[-1]
    elif date not in runs:
        raise StatsError(f"no run with date {date} under {root}; found {', '.join(dates)}")
    run = runs[date]
    results = read_results(run["results"]) if run["results"] else None
    wanted = list(run["samples"]) if tasks is None else list(tasks)
    out: dict[str, TaskSamples] = {}
    for task in wanted:
        if task not in run["samples"]:
            raise StatsError(f"task {task!r} has no samples file in {root} (date {date}); "
                             f"found: {', '.join(sorted(run['samples']))}")
        ts = read_samples(run["samples"][task], task, filter_order(results, task))
        ts.output_type = output_type(results, task)
        out[task] = ts
    return EvalRun(root=root, date=date, results_path=run["results"], results=results, tasks=out,
                   other_dates=[d for d in dates if d != date])


# ----------------------------------------------------------------------------- pairing
def default_metric(a: TaskSamples, b: TaskSamples) -> str:
    """acc_norm for multiple-choice tasks when present, else the first of METRIC_PREFERENCE
    present in both arms."""
    common = [m for m in a.metrics if m in b.metrics]
    kind = a.output_type or b.output_type
    prefs = (("acc_norm",) if kind == "multiple_choice" or kind is None and "acc_norm" in common else ()) \
        + METRIC_PREFERENCE
    for m in prefs:
        if m in common:
            return m
    raise StatsError(f"task {a.task!r}: no default binary metric among {', '.join(common) or 'none'}; "
                     "choose one with --metric")


@dataclass
class PairedItems:
    """Item-level pairing of two arms for one (task, filter, metric)."""

    task: str
    filter: str
    metric: str
    doc_ids: list[Any]
    x_a: np.ndarray
    x_b: np.ndarray
    n_a: int  # lines of this filter in arm A
    n_b: int
    only_a: int  # (doc_id, filter) present in A only
    only_b: int
    duplicated_a: int  # doc ids with more than one line in A (all copies left out)
    duplicated_b: int
    hash_mismatch: int  # pairs whose shared hash fields differ (left out)
    hash_unchecked: int  # pairs without a common hash field to compare
    mismatch_examples: list[str]
    keys: list[str | None] = field(default_factory=list)  # item_key of each pair (arm A's, else B's)


def _score(value: Any, s: Sample, metric: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return float(value)
    raise StatsError(f"{s.path}:{s.line}: metric {metric!r} is {value!r}, not 0/1; "
                     "McNemar needs a per-item correct/incorrect metric (choose one with --metric)")


def pair_task(a: TaskSamples, b: TaskSamples, filter: str, metric: str) -> PairedItems:
    """Pair the arms on (doc_id, filter) and extract 0/1 scores of `metric`."""
    for arm, ts in (("A", a), ("B", b)):
        if metric not in ts.metrics:
            raise StatsError(f"task {ts.task!r} in arm {arm} ({ts.path}) has no metric {metric!r}; "
                             f"available: {', '.join(ts.metrics)}")
        if filter not in ts.filters:
            raise StatsError(f"task {ts.task!r} in arm {arm} ({ts.path}) has no filter {filter!r}; "
                             f"available: {', '.join(ts.filters)}")

    def index(ts: TaskSamples) -> tuple[dict[Any, Sample], set[Any], int]:
        rows = [s for s in ts.samples if s.filter == filter]
        counts = Counter(s.doc_id for s in rows)
        dup = {d for d, k in counts.items() if k > 1}
        return {s.doc_id: s for s in rows if s.doc_id not in dup}, dup, len(rows)

    ia, dup_a, n_a = index(a)
    ib, dup_b, n_b = index(b)
    ids_a = set(ia) | dup_a
    ids_b = set(ib) | dup_b
    common = [d for d in ia if d in ib]
    try:
        common.sort()
    except TypeError:
        common.sort(key=str)
    kept, xa, xb, examples, keys = [], [], [], [], []
    mismatch = unchecked = 0
    for d in common:
        sa, sb = ia[d], ib[d]
        shared = [h for h in HASH_FIELDS if h in sa.hashes and h in sb.hashes]
        if not shared:
            unchecked += 1
        bad = [h for h in shared if sa.hashes[h] != sb.hashes[h]]
        if bad:
            mismatch += 1
            if len(examples) < 5:
                examples.append(f"doc_id {d!r}: {', '.join(bad)} differ ({sa.path}:{sa.line} vs {sb.path}:{sb.line})")
            continue
        kept.append(d)
        keys.append(sa.item_key if sa.item_key is not None else sb.item_key)
        xa.append(_score(sa.scores[metric], sa, metric))
        xb.append(_score(sb.scores[metric], sb, metric))
    return PairedItems(
        task=a.task, filter=filter, metric=metric, doc_ids=kept,
        x_a=np.asarray(xa, dtype=float), x_b=np.asarray(xb, dtype=float), n_a=n_a, n_b=n_b,
        only_a=len(ids_a - ids_b), only_b=len(ids_b - ids_a),
        duplicated_a=len(dup_a), duplicated_b=len(dup_b), hash_mismatch=mismatch,
        hash_unchecked=unchecked, mismatch_examples=examples, keys=keys,
    )
