"""Training-curve statistics: tail-means, paired per-seed deltas, best-vs-best over LR.

A run record is a plain dict (`analysis.run.Run.record`)
    {"method", "H", "kv", "lr", "seed", "preset", "curve", "path", "scale", "tail_mean"}
where `curve` is the list of evaluation points {"step", "tokens", "flops", "val_loss"} of the
run's `metrics.jsonl` (lines with `step`, `tokens`, `flops`, `lr`, `loss`, `grad_norm`,
`tokens_per_s`, and `val_loss` on evaluation steps).

Definitions (paper, Experiments "Metric" and appendix "Robustness"):
    tail-mean          = mean of the last k evaluations' val_loss after step 0 (k = 11; `mhar_probe.tail`)
    paired delta, seed = tail(method, seed) - tail(baseline, seed)   (same seed => same data order)
    mean, sd (n-1), SE = sd / sqrt(n), t-interval mean +- t_{(1+level)/2, n-1} SE, |mean| / SE,
    p                  = two-sided paired t-test (= scipy.stats.ttest_rel)
    best-vs-best       = each configuration at the LR minimising its seed-averaged tail-mean,
                         delta against the best baseline of the same preset;
    gain over training = at every evaluation step t the paired delta d_s(t) = val_loss(method, s, t)
                         - val_loss(reference, s, t), its mean over seeds and t-interval (`GainCurve`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy import stats as sps

from mhar_probe.tail import TAIL_K

from ..run import Run, eval_curve, parse_metrics, scale_label  # noqa: F401 (eval_curve, scale_label: re-exported)
from .errors import StatsError

RunRecord = dict[str, Any]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Parse a metrics.jsonl (`analysis.run.parse_metrics`); a missing or empty file, or a
    malformed line, raises StatsError naming file and line."""
    path = Path(path)
    if not path.exists():
        raise StatsError(f"{path} does not exist")
    rows = parse_metrics(path, error=StatsError)
    if not rows:
        raise StatsError(f"{path}: no lines (empty file)")
    return rows


class ShortRun(StatsError):
    """A run with too few evaluations after step 0 for the tail-mean (`mhar_probe.tail`)."""


def load_run(path: str | Path, k: int = TAIL_K) -> RunRecord:
    """Run record (`analysis.run.Run.record`) of a run directory or a metrics.jsonl path; a run
    too short for the tail-mean (k evaluations after step 0) is a `ShortRun`."""
    run = Run.read(path, error=StatsError)
    if not run.metrics:
        read_metrics(run.metrics_path)  # raises: the file is missing or empty
    return run.record(k, error=ShortRun)


@dataclass
class SeedDeltas:
    """Paired per-seed deltas of one configuration against the baseline (method - baseline)."""

    preset: Any
    method: str
    H: Any
    kv: Any
    lr: Any
    n: int
    seeds: list[Any]
    deltas: list[float]
    mean: float
    sd: float
    se: float
    ci_low: float
    ci_high: float
    abs_over_se: float
    p_value: float
    unpaired_seeds: list[Any]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def t_interval(x: Sequence[float], level: float = 0.95) -> tuple[float, float, float, float, float]:
    """(mean, sd, se, low, high) with sd on n-1 degrees of freedom and a Student-t interval."""
    a = np.asarray(x, dtype=float)
    n = a.size
    if n == 0:
        raise StatsError("no values for a t-interval")
    mean = float(a.mean())
    if n == 1:
        return mean, math.nan, math.nan, math.nan, math.nan
    sd = float(a.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(sps.t.ppf((1 + level) / 2, n - 1)) * se
    return mean, sd, se, mean - half, mean + half


def _field(r: RunRecord, f: str) -> Any:
    """A record's value for pairing; "preset" means the run's scale (preset, or preset/dXLY when
    the width or depth was overridden), so runs of different sizes are never paired."""
    return (r.get("scale") or r.get("preset")) if f == "preset" else r.get(f)


def paired_runs(
    runs: Sequence[RunRecord],
    *,
    baseline: str = "baseline",
    pair_on: Sequence[str] = ("preset", "kv", "lr", "seed"),
) -> dict[tuple, tuple[list[tuple[Any, RunRecord, RunRecord]], list[Any]]]:
    """Every non-`baseline` configuration (preset, method, H, kv, lr) -> ([(seed, run, its baseline)],
    unpaired seeds): each run beside the baseline run that shares `pair_on` (same seed => same data
    order), in seed order. Two baselines for one key, or two runs of a configuration at one seed, or
    no baseline at all, raise StatsError."""
    base: dict[tuple, RunRecord] = {}
    groups: dict[tuple, dict[Any, RunRecord]] = defaultdict(dict)
    for r in runs:
        if r["method"] == baseline:
            key = tuple(_field(r, f) for f in pair_on)
            if key in base:
                raise StatsError(f"two baseline runs for {dict(zip(pair_on, key))}: {base[key]['path']} and {r['path']}")
            base[key] = r
        else:
            g = (_field(r, "preset"), r["method"], r.get("H"), r.get("kv"), r.get("lr"))
            if r.get("seed") in groups[g]:
                raise StatsError(f"two runs of {g} with seed {r.get('seed')}: {groups[g][r.get('seed')]['path']} "
                                 f"and {r['path']}")
            groups[g][r.get("seed")] = r
    if not base:
        raise StatsError(f"no baseline runs (method {baseline!r}) among the {len(runs)} runs")
    out = {}
    for g, by_seed in groups.items():
        pairs, unpaired = [], []
        for seed, r in sorted(by_seed.items(), key=lambda kv_: str(kv_[0])):
            b = base.get(tuple(_field(r, f) for f in pair_on))
            if b is None:
                unpaired.append(seed)
            else:
                pairs.append((seed, r, b))
        out[g] = (pairs, unpaired)
    return out


def paired_seed_deltas(
    runs: Sequence[RunRecord],
    *,
    baseline: str = "baseline",
    pair_on: Sequence[str] = ("preset", "kv", "lr", "seed"),
    level: float = 0.95,
) -> list[SeedDeltas]:
    """The seeds table: for every non-baseline configuration, deltas against the baseline run
    that shares `pair_on` (same seed => same data order)."""
    rows = []
    for (preset, method, H, kv, lr), (pairs, unpaired) in paired_runs(runs, baseline=baseline, pair_on=pair_on).items():
        if not pairs:
            continue
        seeds = [seed for seed, _, _ in pairs]
        deltas = [r["tail_mean"] - b["tail_mean"] for _, r, b in pairs]
        mean, sd, se, lo, hi = t_interval(deltas, level)
        p = float(sps.ttest_1samp(deltas, 0.0).pvalue) if len(deltas) > 1 and sd > 0 else math.nan
        rows.append(SeedDeltas(preset=preset, method=method, H=H, kv=kv, lr=lr, n=len(deltas), seeds=seeds,
                               deltas=deltas, mean=mean, sd=sd, se=se, ci_low=lo, ci_high=hi,
                               abs_over_se=abs(mean) / se if se and se > 0 else math.nan,
                               p_value=p, unpaired_seeds=unpaired))
    return rows


@dataclass
class GainCurve:
    """The paired held-out-loss delta of one configuration against a reference method at every
    evaluation step all its paired runs share: per seed s and step t,
        d_s(t) = val_loss(method, s, t) - val_loss(reference, s, t)      (same seed => same data order)
    and over seeds the mean and a Student t interval (`t_interval`; one seed: NaN bounds, no band)."""

    preset: Any
    method: str
    H: Any
    kv: Any
    lr: Any
    reference: str
    seeds: list[Any]
    steps: list[int]  # [E]
    tokens: list[Any]  # [E], the method's run of the first seed (None where not logged)
    deltas: list[list[float]]  # [seed][E]
    mean: list[float]  # [E]
    low: list[float]  # [E]
    high: list[float]  # [E]
    unpaired_seeds: list[Any]
    level: float = 0.95

    @property
    def n(self) -> int:
        return len(self.seeds)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "n": self.n}


def _at_steps(record: RunRecord) -> dict[int, dict[str, Any]]:
    return {int(p["step"]): p for p in record["curve"]}


def paired_gain_curves(
    runs: Sequence[RunRecord],
    *,
    reference: str = "baseline",
    methods: Sequence[str] | None = None,
    pair_on: Sequence[str] = ("preset", "kv", "lr", "seed"),
    level: float = 0.95,
) -> list[GainCurve]:
    """The gain over training (`GainCurve`) of every configuration of `methods` (None: every method
    but `reference`) paired by seed with `reference` (`paired_runs`), at the evaluation steps that
    every one of its paired runs, both arms, logged (a configuration with none in common is left out)."""
    curves = []
    for (preset, method, H, kv, lr), (pairs, unpaired) in paired_runs(runs, baseline=reference,
                                                                      pair_on=pair_on).items():
        if not pairs or (methods is not None and method not in methods):
            continue
        points = [(_at_steps(r), _at_steps(b)) for _, r, b in pairs]
        steps = sorted(set.intersection(*(set(a) & set(b) for a, b in points)))
        if not steps:
            continue
        deltas = [[a[t]["val_loss"] - b[t]["val_loss"] for t in steps] for a, b in points]  # [seed][E]
        stats = [t_interval([d[i] for d in deltas], level) for i in range(len(steps))]
        curves.append(GainCurve(preset=preset, method=method, H=H, kv=kv, lr=lr, reference=reference,
                                seeds=[seed for seed, _, _ in pairs], steps=steps,
                                tokens=[points[0][0][t].get("tokens") for t in steps], deltas=deltas,
                                mean=[s[0] for s in stats], low=[s[3] for s in stats], high=[s[4] for s in stats],
                                unpaired_seeds=unpaired, level=level))
    return curves


@dataclass
class BestLR:
    preset: Any
    method: str
    H: Any
    kv: Any
    best_lr: Any
    tail_mean: float
    n_seeds: int
    by_lr: dict[str, float]
    delta: float  # vs the best baseline of the same preset

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def best_vs_best(runs: Sequence[RunRecord], *, baseline: str = "baseline") -> list[BestLR]:
    """The LR table: each (preset, method, H, kv) at its own best learning rate."""
    cells: dict[tuple, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.get("lr") is None:
            raise StatsError(f"run {r.get('path')} has no learning rate recorded")
        cells[(r.get("preset"), r["method"], r.get("H"), r.get("kv"))][r["lr"]].append(r["tail_mean"])
    rows = []
    for (preset, method, H, kv), by_lr in cells.items():
        means = {lr: float(np.mean(v)) for lr, v in by_lr.items()}
        lr = min(means, key=means.get)
        rows.append(BestLR(preset=preset, method=method, H=H, kv=kv, best_lr=lr, tail_mean=means[lr],
                           n_seeds=len(by_lr[lr]), by_lr={str(k): v for k, v in sorted(means.items())},
                           delta=math.nan))
    best_base = {}
    for row in rows:
        if row.method == baseline:
            cur = best_base.get(row.preset)
            best_base[row.preset] = row.tail_mean if cur is None else min(cur, row.tail_mean)
    for row in rows:
        if row.preset in best_base:
            row.delta = row.tail_mean - best_base[row.preset]
    return rows


#: the gains over training a study reads: every method against the baseline, and the multi-head
#: methods against single-head attention residuals (reference, its methods; None: every other method)
GAIN_REFERENCES: tuple[tuple[str, tuple[str, ...] | None], ...] = (("baseline", None), ("attnres", ("mhar", "mhar_hw")))


def study_gain_curves(runs: Sequence[RunRecord], level: float = 0.95) -> list[GainCurve]:
    """`paired_gain_curves` against each reference of `GAIN_REFERENCES` that `runs` hold (none: []), each
    reference's in (method, H, kv, lr) order."""
    present = {r["method"] for r in runs}
    return [c for reference, methods in GAIN_REFERENCES if reference in present
            for c in sorted(paired_gain_curves(runs, reference=reference, methods=methods, level=level),
                            key=lambda c: (c.method, c.H or 0, str(c.kv), str(c.lr), str(c.preset)))]
