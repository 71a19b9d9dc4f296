"""`mhar stats ceg`: a power-law fit L = A C^-alpha to the baseline runs' curves and the
compute-equivalent gain of every other configuration, CEG = (L_base / L_method)^(1/alpha)
[/ (1 + extra FLOP fraction) with `divide_routing`] (the math is `analysis.stats.ceg`'s)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mhar_probe.model.methods import run_label

from .ceg import CEGRow, PowerLawFit, ceg_table, final_points, fit_power_law, lower_envelope
from .curves import TAIL_K, RunRecord
from .errors import StatsError
from .tails import load_runs
from .text import fmt, text_table, write_json_new


@dataclass
class Gain:
    """The fits by name (envelope, final), the exponents used by label, one CEG row per
    configuration (`entries`: its inputs, with the extra FLOP fraction), the notes, and the JSON
    file written, if any."""

    fits: dict[str, PowerLawFit]
    alphas: dict[str, float]
    rows: list[CEGRow]
    entries: list[dict[str, Any]]
    notes: list[str]
    divide_routing: bool = False
    baseline_runs: int = 0  # how many baseline runs were given (fit and L_base)
    written: list[Path] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON document: fits, alphas, rows, notes."""
        return {"fits": {k: f.as_dict() for k, f in self.fits.items()}, "alphas": self.alphas,
                "rows": [r.as_dict() for r in self.rows], "notes": self.notes}

    def lines(self) -> list[str]:
        """What `mhar stats ceg` prints: the fits, the gains, the notes, then the file written."""
        out = ["power-law fits L = A C^-alpha (least squares in log-log space)"]
        out += text_table(["fit", "alpha", "A", "R^2 (log)", "points", "C range"],
                          [[k, f"{f.alpha:.4f}", f"{f.A:.4g}", fmt(f.r2), str(f.n), f"{f.c_min:.3g}..{f.c_max:.3g}"]
                           for k, f in self.fits.items()])
        out += ["", "compute-equivalent gain (L_base / L_method)^(1/alpha)"
                + (" / (1 + extra FLOP fraction)" if self.divide_routing else "")]
        out += text_table(
            ["scale", "method", "seeds (base; method)", "L_base", "L_method", "extra FLOPs"]
            + [f"CEG {k}" for k in self.alphas] + ["bracket"],
            [[r.scale, r.method, f"{_seeds(e['base_seeds'])}; {_seeds(e['seeds'])}", f"{r.L_base:.4f}",
              f"{r.L_method:.4f}", f"{100 * e['routing_fraction']:.2f}%"]
             + [f"{r.ceg[k]:.3f}x" for k in self.alphas] + [f"{r.low:.2f}-{r.high:.2f}x"]
             for r, e in zip(self.rows, self.entries)])
        out.append("L_base, L_method: tail-means averaged over the seeds listed (runs given: "
                   f"{sum(len(e['seeds']) for e in self.entries)} method, {self.baseline_runs} baseline)")
        return out + [f"note: {n}" for n in self.notes] + [f"wrote {p}" for p in self.written]


def _seeds(seeds: Sequence[Any]) -> str:
    """'42' or '42, 43' (the seeds a mean is over)."""
    return ", ".join(str(s) for s in seeds) or "-"


def extra_flops(method_runs: Sequence[RunRecord], base_runs: Sequence[RunRecord]) -> float:
    """Extra FLOPs per step of the method: cumulative FLOPs at the same last step, ratio - 1."""
    ratios = []
    for r in method_runs:
        last = {p["step"]: p.get("flops") for p in r["curve"]}
        for b in base_runs:
            common = [p for p in b["curve"] if p["step"] in last and p.get("flops") and last[p["step"]]]
            if common:
                p = common[-1]
                ratios.append(last[p["step"]] / p["flops"] - 1.0)
    return float(np.mean(ratios)) if ratios else 0.0


def compute_equivalent_gain(runs: Sequence[str | Path], *, alpha: Sequence[float] = (), baseline: str = "baseline",
                            k: int = TAIL_K, min_flops: float = 0.0, divide_routing: bool = False,
                            json: str | Path | None = None, overwrite: bool = False) -> Gain:
    """Fit the baseline runs among `runs` (their lower envelope above `min_flops`, and their final
    points where they span two budgets), then the CEG of each (preset, method, H, kv, lr) of the
    others against the mean baseline tail-mean (last `k` evaluations) of its preset, for every
    fitted exponent > 0 and each extra `alpha`. `json`: also write `Gain.as_dict()` there."""
    records = load_runs(runs, k)
    base = [r for r in records if r["method"] == baseline]
    others = [r for r in records if r["method"] != baseline]
    if not base:
        raise StatsError(f"no baseline runs (method {baseline!r}) among the given runs")
    if not others:
        raise StatsError("no method runs besides the baseline; pass method run directories too")
    curves = []
    for r in base:
        pts = [p for p in r["curve"] if p.get("flops")]
        if len(pts) < 2:
            raise StatsError(f"{r['path']}: fewer than two evaluations with positive 'flops' in metrics.jsonl")
        curves.append(([p["flops"] for p in pts], [p["val_loss"] for p in pts]))
    fits = {"envelope": fit_power_law(*lower_envelope(curves, min_flops=min_flops))}
    notes = []
    fc, fl = final_points(curves)
    if np.unique(fc).size >= 2:
        fits["final"] = fit_power_law(fc, fl)
    else:
        notes.append("final-points fit skipped: needs baseline runs at two or more compute budgets")
    alphas = {name: f.alpha for name, f in fits.items() if f.alpha > 0}
    for name, f in fits.items():
        if f.alpha <= 0:
            notes.append(f"{name} fit has alpha={f.alpha:.4f} <= 0 (loss not falling with compute); not used")
    for a in alpha:
        if a <= 0:
            raise StatsError(f"--alpha must be positive, got {a}")
        alphas[f"alpha={a:g}"] = a
    if not alphas:
        raise StatsError("no usable exponent: the fits gave alpha <= 0 and no --alpha was given")
    # per preset: mean tail-mean of the baseline and of every method configuration
    by_preset: dict[Any, list[RunRecord]] = defaultdict(list)
    for r in base:
        by_preset[r["scale"]].append(r)
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for r in others:
        groups[(r["scale"], r["method"], r["H"], r["kv"], r["lr"])].append(r)
    entries = []
    for (preset, method, H, kv, lr), rs in groups.items():
        if preset not in by_preset:
            notes.append(f"{method} at preset {preset}: no baseline run at that preset; skipped")
            continue
        bs = by_preset[preset]
        label = run_label(method, H) + (f" lr={lr:g}" if isinstance(lr, float) else "")
        entries.append(dict(scale=str(preset), method=label, L_base=float(np.mean([b["tail_mean"] for b in bs])),
                            L_method=float(np.mean([r["tail_mean"] for r in rs])),
                            routing_fraction=extra_flops(rs, bs),
                            seeds=sorted({r["seed"] for r in rs}, key=str),
                            base_seeds=sorted({b["seed"] for b in bs}, key=str)))
    result = Gain(fits=fits, alphas=alphas, rows=ceg_table(entries, alphas, divide_routing=divide_routing),
                  entries=entries, notes=notes, divide_routing=divide_routing, baseline_runs=len(base))
    if json:
        result.written.append(write_json_new(json, result.as_dict(), overwrite=overwrite))
    return result
