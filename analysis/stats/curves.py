"""Training-curve statistics: tail-means, paired per-seed deltas, best-vs-best over LR.

A run record is a plain dict
    {"method", "H", "kv", "lr", "seed", "preset", "tail_mean", "curve", "path"}
where `curve` is the list of evaluation points {"step", "tokens", "flops", "val_loss"} of the
run's `metrics.jsonl` (lines with `step`, `tokens`, `flops`, `lr`, `loss`, `grad_norm`,
`tokens_per_s`, and `val_loss` on evaluation steps).

Definitions (paper, Experiments "Metric" and appendix "Robustness"):
    tail-mean          = mean of the last k evaluations' val_loss (k = 11)
    paired delta, seed = tail(method, seed) - tail(baseline, seed)   (same seed => same data order)
    mean, sd (n-1), SE = sd / sqrt(n), t-interval mean +- t_{(1+level)/2, n-1} SE, |mean| / SE,
    p                  = two-sided paired t-test (= scipy.stats.ttest_rel)
    best-vs-best       = each configuration at the LR minimising its seed-averaged tail-mean,
                         delta against the best baseline of the same preset.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import stats as sps

from mhar_probe.model.methods import routing_heads_of
from mhar_probe.tail import TAIL_K, full_tail_mean

from .errors import StatsError

RunRecord = dict[str, Any]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Parse a metrics.jsonl; a malformed line raises StatsError naming file and line."""
    path = Path(path)
    if not path.exists():
        raise StatsError(f"{path} does not exist")
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise StatsError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or "step" not in rec:
                raise StatsError(f"{path}:{lineno}: expected an object with a 'step' field")
            if "val_loss" in rec and not isinstance(rec["val_loss"], (int, float)):
                raise StatsError(f"{path}:{lineno}: 'val_loss' must be a number, got {rec['val_loss']!r}")
            rows.append(rec)
    if not rows:
        raise StatsError(f"{path}: no lines (empty file)")
    return rows


def eval_curve(rows: Iterable[dict[str, Any]]) -> list[dict[str, float]]:
    """The evaluation points (lines carrying val_loss), in step order."""
    pts = [{"step": r["step"], "tokens": r.get("tokens"), "flops": r.get("flops"), "val_loss": float(r["val_loss"])}
           for r in rows if r.get("val_loss") is not None]
    return sorted(pts, key=lambda p: p["step"])


def tail_mean(values: Sequence[float], k: int = TAIL_K, *, where: str = "run") -> float:
    """Mean of the last k values; at least k are required (`mhar_probe.tail.full_tail_mean`)."""
    try:
        return full_tail_mean(values, k, where=where)
    except ValueError as exc:
        raise StatsError(str(exc)) from None


def _first(d: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if d.get(key) is not None:
            return d[key]
    return None


def scale_label(preset: Any, d: Any, L: Any) -> str:
    """The preset's name, or "preset/d{d}L{L}" when the run overrode the preset's width or depth
    (e.g. the rungs of a compute ladder), so that runs of different sizes are never pooled."""
    from mhar_probe.model.config import PRESETS

    dims = PRESETS.get(str(preset))
    if dims is None or d is None or L is None:
        return str(preset)
    if (int(d), int(L)) == (dims["hidden_size"], dims["num_hidden_layers"]):
        return str(preset)
    return f"{preset}/d{d}L{L}"


def load_run(path: str | Path, k: int = TAIL_K) -> RunRecord:
    """Run record from a run directory (metrics.jsonl + train_config.json / summary.json /
    config.json) or from a metrics.jsonl path."""
    path = Path(path)
    run_dir = path.parent if path.is_file() else path
    metrics = path if path.is_file() else path / "metrics.jsonl"
    if not run_dir.exists():
        raise StatsError(f"run {path} does not exist")
    meta: dict[str, Any] = {}
    for name in ("config.json", "summary.json", "train_config.json"):  # later files win
        p = run_dir / name
        if p.exists():
            try:
                meta.update(json.loads(p.read_text(encoding="utf-8")))
            except json.JSONDecodeError as e:
                raise StatsError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    curve = eval_curve(read_metrics(metrics))
    method = _first(meta, "method", "residual_method")
    rec = {
        "method": method,
        "H": routing_heads_of(method, meta),
        "kv": _first(meta, "kv_heads", "num_key_value_heads"),
        "lr": _first(meta, "lr"),
        "seed": _first(meta, "seed"),
        "preset": _first(meta, "preset"),
        "curve": curve,
        "path": str(run_dir),
    }
    if rec["method"] is None:
        raise StatsError(f"{run_dir}: no method recorded (train_config.json / config.json missing?)")
    rec["scale"] = scale_label(rec["preset"], meta.get("hidden_size"), meta.get("num_hidden_layers"))
    rec["tail_mean"] = tail_mean([p["val_loss"] for p in curve], k, where=str(metrics))
    return rec


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


def paired_seed_deltas(
    runs: Sequence[RunRecord],
    *,
    baseline: str = "baseline",
    pair_on: Sequence[str] = ("preset", "kv", "lr", "seed"),
    level: float = 0.95,
) -> list[SeedDeltas]:
    """The seeds table: for every non-baseline configuration, deltas against the baseline run
    that shares `pair_on` (same seed => same data order)."""
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
    rows = []
    for (preset, method, H, kv, lr), by_seed in groups.items():
        seeds, deltas, unpaired = [], [], []
        for seed, r in sorted(by_seed.items(), key=lambda kv_: str(kv_[0])):
            b = base.get(tuple(_field(r, f) for f in pair_on))
            if b is None:
                unpaired.append(seed)
                continue
            seeds.append(seed)
            deltas.append(r["tail_mean"] - b["tail_mean"])
        if not deltas:
            continue
        mean, sd, se, lo, hi = t_interval(deltas, level)
        p = float(sps.ttest_1samp(deltas, 0.0).pvalue) if len(deltas) > 1 and sd > 0 else math.nan
        rows.append(SeedDeltas(preset=preset, method=method, H=H, kv=kv, lr=lr, n=len(deltas), seeds=seeds,
                               deltas=deltas, mean=mean, sd=sd, se=se, ci_low=lo, ci_high=hi,
                               abs_over_se=abs(mean) / se if se and se > 0 else math.nan,
                               p_value=p, unpaired_seeds=unpaired))
    return rows


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
