"""Compare two harness runs task by task: pairing, exact McNemar, bootstrap CI, Holm.

Every row also says how many of its n paired items are distinct (`n_distinct`: different
questions, by `lm_eval_io.item_key`), and gives the exact McNemar test on one pair per distinct
item (`b_distinct`, `c_distinct`, `p_distinct`): an item repeated k times otherwise counts k times
in b or c, and the p-value is smaller than the evidence allows.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from .errors import StatsError
from .lm_eval_io import EvalRun, default_metric, load_eval_run, pair_task
from .mcnemar import compare_binary, holm, mcnemar_exact


@dataclass
class McNemarRow:
    """One (task, filter) comparison; delta = acc_B - acc_A; b = A right & B wrong, c = reverse."""

    task: str
    filter: str
    metric: str
    n: int
    acc_a: float
    acc_b: float
    delta: float
    b: int
    c: int
    p_value: float
    p_holm: float
    ci_low: float
    ci_high: float
    n_a: int
    n_b: int
    only_a: int
    only_b: int
    duplicated_a: int
    duplicated_b: int
    hash_mismatch: int
    hash_unchecked: int
    n_distinct: int | None = None  # distinct items among the n pairs (None: no arguments/doc to tell)
    b_distinct: int | None = None  # b and c over one pair per distinct item (its first by doc_id)
    c_distinct: int | None = None
    p_distinct: float = float("nan")  # exact McNemar on b_distinct, c_distinct
    # item key -> (A right, B right) over one pair per distinct item (None: keys unknown); read by the
    # line across seeds (`mcnemar_seeds`), never written to a row's files
    items: dict[str, tuple[float, float]] | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The row's fields as its files hold them (ROW_COLUMNS: every field but `items`)."""
        return {k: v for k, v in asdict(self).items() if k in ROW_COLUMNS}


#: the columns of a row's files, in order
ROW_COLUMNS = tuple(f.name for f in fields(McNemarRow) if f.name != "items")


@dataclass
class Comparison:
    dir_a: str
    dir_b: str
    date_a: str
    date_b: str
    rows: list[McNemarRow]
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def _select(names: Sequence[str], patterns: Sequence[str] | None, what: str) -> list[str]:
    if not patterns:
        return list(names)
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        raise StatsError(f"{what} {', '.join(map(repr, unmatched))} not found; available: {', '.join(names)}")
    return chosen


def distinct_pairs(keys: Sequence[Any], x_a: Sequence[float], x_b: Sequence[float]
                   ) -> tuple[list[int], int] | None:
    """Indices of the first pair of each distinct key, and how many keys have pairs whose scores
    differ (the same question answered differently by one arm: a nondeterministic evaluation).
    None when some key is unknown."""
    if any(k is None for k in keys):
        return None
    first: dict[Any, int] = {}
    scores: dict[Any, set[tuple[float, float]]] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
        scores.setdefault(k, set()).add((float(x_a[i]), float(x_b[i])))
    return sorted(first.values()), sum(len(v) > 1 for v in scores.values())


#: the largest share of a task's items that may be left out of the pairing before it is refused
MAX_UNPAIRED = 0.05


def compare_runs(
    run_a: EvalRun,
    run_b: EvalRun,
    *,
    tasks: Sequence[str] | None = None,
    filters: Sequence[str] | None = None,
    metric: str | None = None,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    max_unpaired: float = MAX_UNPAIRED,
) -> Comparison:
    """Per-task paired comparison of two loaded runs (tasks / filters accept shell patterns).

    A task whose items pair for fewer than all but `max_unpaired` of the larger arm (items in one
    arm only, duplicated, or with other document / prompt hashes) is refused: its arms were not
    evaluated on the same items. `max_unpaired=1.0` accepts whatever pairs (`--allow-unpaired`).

    Every (task, filter) pair present in both arms is a row; Holm's adjustment runs over all
    rows. Without `filters`, every filter of a task is reported.
    """
    notes: list[str] = []
    names_a, names_b = list(run_a.tasks), list(run_b.tasks)
    common = [t for t in names_a if t in run_b.tasks]
    if tasks is None:
        for t in names_a:
            if t not in run_b.tasks:
                notes.append(f"task {t} only in A ({run_a.root}); not compared")
        for t in names_b:
            if t not in run_a.tasks:
                notes.append(f"task {t} only in B ({run_b.root}); not compared")
    else:
        for arm, names, root in (("A", names_a, run_a.root), ("B", names_b, run_b.root)):
            _select(names, tasks, f"task pattern(s) in arm {arm} ({root}):")
    selected = _select(common, tasks, "task pattern(s)") if tasks else common
    if not selected:
        raise StatsError(f"no task in common between {run_a.root} ({', '.join(names_a)}) and "
                         f"{run_b.root} ({', '.join(names_b)})")
    for run in (run_a, run_b):
        if run.other_dates:
            notes.append(f"{run.root}: used run {run.date}; other runs present: {', '.join(run.other_dates)}")
    rows: list[McNemarRow] = []
    for t in selected:  # without --task / --metric, tasks with no 0/1 metric are skipped with a note
        ta, tb = run_a.tasks[t], run_b.tasks[t]
        flts = [f for f in ta.filters if f in tb.filters]
        for f in set(ta.filters) ^ set(tb.filters):
            notes.append(f"task {t}: filter {f} present in one arm only; not compared")
        if filters:
            flts = [f for f in flts if any(fnmatch.fnmatchcase(f, p) for p in filters)]
            if not flts:
                raise StatsError(f"task {t}: no filter matches {', '.join(filters)}; "
                                 f"available: {', '.join(ta.filters)}")
        if metric is None and tasks is None:
            try:
                m = default_metric(ta, tb)
            except StatsError as exc:  # e.g. a perplexity task: nothing per-item to test
                notes.append(f"{exc}; task skipped (name it with --task and --metric to include it)")
                continue
        else:
            m = metric or default_metric(ta, tb)
        for arm, ts in (("A", ta), ("B", tb)):
            if ts.legacy and len(ts.filters) > 1:
                notes.append(f"task {t} arm {arm}: pre-0.4.7 samples file; filters assigned by line order "
                             f"({', '.join(ts.filters)})")
        for f in flts:
            items = pair_task(ta, tb, f, m)
            if len(items.doc_ids) == 0:
                raise StatsError(
                    f"task {t} filter {f}: no item could be paired (A has {items.n_a}, B has {items.n_b}, "
                    f"only in A {items.only_a}, only in B {items.only_b}, hash mismatches {items.hash_mismatch}); "
                    "are both arms evaluated on the same documents and prompts?")
            unpaired = 1 - len(items.doc_ids) / max(items.n_a, items.n_b)
            if unpaired > max_unpaired:
                raise StatsError(
                    f"task {t} filter {f}: only {len(items.doc_ids)} of {max(items.n_a, items.n_b)} items pair "
                    f"(only in A {items.only_a}, only in B {items.only_b}, hash mismatches {items.hash_mismatch}), "
                    f"more than {max_unpaired:.0%} left out: were both arms evaluated on the same items? "
                    f"Pass --allow-unpaired to test the pairs there are")
            for ex in items.mismatch_examples:
                notes.append(f"task {t} filter {f}: {ex}")
            r = compare_binary(items.x_a, items.x_b, n_boot=n_boot, level=level, seed=seed)
            distinct: dict[str, Any] = {}
            if (found := distinct_pairs(items.keys, items.x_a, items.x_b)) is not None:
                idx, inconsistent = found
                xa, xb = items.x_a[idx], items.x_b[idx]
                bd, cd = int(((xa == 1) & (xb == 0)).sum()), int(((xa == 0) & (xb == 1)).sum())
                distinct = dict(n_distinct=len(idx), b_distinct=bd, c_distinct=cd, p_distinct=mcnemar_exact(bd, cd),
                                items={items.keys[i]: (float(a), float(b)) for i, a, b in zip(idx, xa, xb)})
                if inconsistent:
                    notes.append(f"task {t} filter {f}: {inconsistent} repeated item(s) scored differently across "
                                 "their copies; the distinct-item test keeps the first copy")
            else:
                notes.append(f"task {t} filter {f}: samples without 'arguments' or 'doc'; distinct items not counted")
            rows.append(McNemarRow(
                task=t, filter=f, metric=m, n=r.n, acc_a=r.acc_a, acc_b=r.acc_b, delta=r.delta,
                b=r.b, c=r.c, p_value=r.p_value, p_holm=float("nan"), ci_low=r.ci_low, ci_high=r.ci_high,
                n_a=items.n_a, n_b=items.n_b, only_a=items.only_a, only_b=items.only_b,
                duplicated_a=items.duplicated_a, duplicated_b=items.duplicated_b,
                hash_mismatch=items.hash_mismatch, hash_unchecked=items.hash_unchecked, **distinct))
    if not rows:
        raise StatsError("no task with a per-item 0/1 metric to compare; " + "; ".join(notes))
    for row, adj in zip(rows, holm([r.p_value for r in rows])):
        row.p_holm = adj
    for row in rows:
        if row.n_distinct is not None and row.n_distinct < row.n:
            notes.append(f"task {row.task} filter {row.filter}: only {row.n_distinct} of the {row.n} paired items "
                         f"are distinct; on one pair per distinct item b/c = {row.b_distinct}/{row.c_distinct}, "
                         f"p = {row.p_distinct:.3g}")
        dropped = row.only_a + row.only_b + row.duplicated_a + row.duplicated_b + row.hash_mismatch
        if dropped:
            notes.append(f"task {row.task} filter {row.filter}: {dropped} item(s) left out "
                         f"(only A {row.only_a}, only B {row.only_b}, duplicated A {row.duplicated_a}, "
                         f"duplicated B {row.duplicated_b}, hash mismatch {row.hash_mismatch})")
        if row.hash_unchecked:
            notes.append(f"task {row.task} filter {row.filter}: {row.hash_unchecked} pair(s) without hash "
                         "fields; same document/prompt not verified")
    return Comparison(dir_a=str(run_a.root), dir_b=str(run_b.root), date_a=run_a.date, date_b=run_b.date,
                      rows=rows, notes=notes,
                      settings=dict(n_boot=n_boot, level=level, seed=seed, metric=metric,
                                    filters=list(filters) if filters else None,
                                    tasks=list(tasks) if tasks else None))


def compare_eval_dirs(dir_a: str | Path, dir_b: str | Path, *, tasks: Sequence[str] | None = None,
                      date_a: str | None = None, date_b: str | None = None, **kw: Any) -> Comparison:
    """Load both harness output directories and compare them (see `compare_runs`)."""
    run_a = load_eval_run(dir_a, date=date_a)
    run_b = load_eval_run(dir_b, date=date_b)
    return compare_runs(run_a, run_b, tasks=tasks, **kw)
