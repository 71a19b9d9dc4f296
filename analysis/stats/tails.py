"""`mhar stats tails`: the tail-mean of each run, paired per-seed deltas against the baseline
(when both are present) and best-vs-best over learning rate (when runs differ in LR); the
definitions are `analysis.stats.curves`'."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..run import run_paths
from .curves import TAIL_K, BestLR, RunRecord, SeedDeltas, ShortRun, best_vs_best, load_run, paired_seed_deltas
from .errors import StatsError
from .text import fmt, text_table, write_json_new


def load_runs(paths: Sequence[str | Path], k: int = TAIL_K,
              note: Callable[[str], object] = lambda line: print(line, file=sys.stderr)) -> list[RunRecord]:
    """The run records of the runs among `paths` (`analysis.run.run_paths`: what is not a run is
    skipped with a note). Of several runs, one too short for the tail-mean (`mhar_probe.tail`)
    is skipped with a `note` too; a single one, or none left, is an error that says why."""
    found = run_paths([str(p) for p in paths], error=StatsError)
    records, short = [], []
    for path in found:
        try:
            records.append(load_run(path, k))
        except ShortRun as exc:
            if len(found) == 1:
                raise
            short.append(str(exc))
            note(f"skipped {path}: {exc}")
    if not records:
        raise StatsError(f"none of the {len(found)} runs has a tail-mean: {short[0]}")
    return records


@dataclass
class Tails:
    """Tail-means of `runs` (records without their curves), the seed deltas and the best-vs-best
    rows (None where not computed), and the JSON file written, if any."""

    k: int
    baseline: str
    level: float
    runs: list[RunRecord]
    seed_deltas: list[SeedDeltas] | None = None
    best_vs_best: list[BestLR] | None = None
    written: list[Path] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON document: k, the runs, and seed_deltas / best_vs_best where computed."""
        doc: dict[str, Any] = {"k": self.k, "runs": [{k: v for k, v in r.items() if k != "curve"} for r in self.runs]}
        if self.seed_deltas is not None:
            doc["seed_deltas"] = [r.as_dict() for r in self.seed_deltas]
        if self.best_vs_best is not None:
            doc["best_vs_best"] = [r.as_dict() for r in self.best_vs_best]
        return doc

    def lines(self) -> list[str]:
        """What `mhar stats tails` prints: the tables, then the file written."""
        out = [f"tail-mean of the last {self.k} evaluations"]
        out += text_table(["run", "preset", "method", "H", "kv", "lr", "seed", "evals", "tail-mean"],
                          [[r["path"], fmt(r["preset"]), r["method"], fmt(r["H"]), fmt(r["kv"]), fmt(r["lr"], "g"),
                            fmt(r["seed"]), str(len(r["curve"])), fmt(r["tail_mean"])] for r in self.runs])
        if self.seed_deltas is not None:
            out += ["", f"paired per-seed deltas vs {self.baseline} (method - baseline; t-interval {self.level:.0%})"]
            def spread(r: SeedDeltas) -> list[str]:  # sd, SE, CI, |d|/SE, p: none from one seed
                if r.n < 2:
                    return ["-"] * 5
                return [fmt(r.sd), fmt(r.se), f"[{fmt(r.ci_low, '+.4f')}, {fmt(r.ci_high, '+.4f')}]",
                        fmt(r.abs_over_se, ".1f"), fmt(r.p_value, ".3g")]

            out += text_table(
                ["preset", "method", "H", "kv", "lr", "n", "mean", "sd", "SE", "CI", "|d|/SE", "p", "unpaired"],
                [[fmt(r.preset), r.method, fmt(r.H), fmt(r.kv), fmt(r.lr, "g"), str(r.n), fmt(r.mean, "+.4f"),
                  *spread(r), ",".join(map(str, r.unpaired_seeds)) or "-"]
                 for r in self.seed_deltas])
            if any(r.n < 2 for r in self.seed_deltas):
                out += ["n = 1: one seed pair, so no spread, interval or p (-)"]
        if self.best_vs_best is not None:
            out += ["", "best-vs-best learning rate (delta vs the best baseline of the preset)"]
            out += text_table(["preset", "method", "H", "kv", "best lr", "tail-mean", "delta", "by lr"],
                              [[fmt(r.preset), r.method, fmt(r.H), fmt(r.kv), fmt(r.best_lr, "g"), fmt(r.tail_mean),
                                fmt(r.delta, "+.4f"), " ".join(f"{k}:{v:.4f}" for k, v in r.by_lr.items())]
                               for r in self.best_vs_best])
        return out + [f"wrote {p}" for p in self.written]


def tails(runs: Sequence[str | Path], *, k: int = TAIL_K, baseline: str = "baseline", level: float = 0.95,
          json: str | Path | None = None, overwrite: bool = False) -> Tails:
    """Tail-means (last `k` evaluations) of the runs among `runs`; paired per-seed deltas of each
    method against `baseline` (t-interval at `level`) when both are there; best-vs-best when the
    runs span learning rates. `json`: also write `Tails.as_dict()` there."""
    records = load_runs(runs, k)
    result = Tails(k=k, baseline=baseline, level=level, runs=records)
    if any(r["method"] == baseline for r in records) and any(r["method"] != baseline for r in records):
        result.seed_deltas = paired_seed_deltas(records, baseline=baseline, level=level)
    if len({r["lr"] for r in records}) > 1:
        result.best_vs_best = best_vs_best(records, baseline=baseline)
    if json:
        result.written.append(write_json_new(json, result.as_dict(), overwrite=overwrite))
    return result
