"""The paired gain over training as a study's statistics write it: stats/gain_curves.json (every
evaluation step of every comparison, `analysis.stats.curves.study_gain_curves`) and
stats/gain_curves.md (a table of the mean delta and its 95% t interval over seeds by step; one
seed: the value alone, and the column says "one seed")."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mhar_probe.model.methods import run_label

from .curves import TAIL_K, GainCurve, study_gain_curves
from .output import write_text_new
from .tails import load_runs
from .text import json_default

#: the markdown shows every evaluation up to this many rows, else every k-th (and the last)
MAX_ROWS = 45
#: decimals the JSON keeps of a loss difference (1e-6 nats: far below any interval it is read with)
DECIMALS = 6


def compact_json(doc: Any) -> str:
    """`doc` as one-line JSON with every float rounded to DECIMALS (a study's curves: thousands of
    numbers, committed with its results and carried to the device with them)."""
    import json

    def rounded(o: Any) -> Any:
        if isinstance(o, float):
            return o if math.isnan(o) else round(o, DECIMALS)
        if isinstance(o, dict):
            return {k: rounded(v) for k, v in o.items()}
        if isinstance(o, list):
            return [rounded(v) for v in o]
        return o

    return json.dumps(rounded(doc), separators=(",", ":"), default=json_default) + "\n"


def comparison_label(c: GainCurve) -> str:
    """'mhar H=8 - baseline'."""
    return f"{run_label(c.method, c.H)} - {run_label(c.reference, None)}"


def seeds_label(c: GainCurve) -> str:
    """'3 seeds' or 'seed 0; one seed, no interval'."""
    return f"{c.n} seeds" if c.n > 1 else f"seed {c.seeds[0]}; one seed, no interval"


def cell(c: GainCurve, i: int) -> str:
    """'-0.050 [-0.071, -0.029]', or '-0.050' for one seed."""
    if math.isnan(c.low[i]):
        return f"{c.mean[i]:+.3f}"
    return f"{c.mean[i]:+.3f} [{c.low[i]:+.3f}, {c.high[i]:+.3f}]"


def shown_steps(steps: list[int], max_rows: int = MAX_ROWS) -> tuple[list[int], int]:
    """The steps the table shows: every one, or every k-th with the last (k, the stride, returned)."""
    if len(steps) <= max_rows:
        return steps, 1
    k = math.ceil(len(steps) / (max_rows - 1))
    return sorted(set(steps[::k]) | {steps[-1]}), k


def gain_markdown(curves: Sequence[GainCurve], k: int = TAIL_K) -> str:
    """One table per (scale, KV, lr): a row per evaluation step, a column per comparison."""
    lines = ["## Paired gain over training", "",
             "Held-out loss of each method minus the same-seed reference at every evaluation step (same seed: "
             "same data order); the mean over seeds with its 95% Student t interval, or the value alone where "
             f"one seed is in. The tail-mean the claims read is the mean of the last {k} evaluations.", ""]
    if not curves:
        return "\n".join(lines + ["No method and reference share a seed yet.", ""])
    groups: dict[tuple, list[GainCurve]] = defaultdict(list)
    for c in curves:
        groups[(str(c.preset), c.kv, c.lr)].append(c)
    for (preset, kv, lr), group in groups.items():
        steps = sorted({s for c in group for s in c.steps})
        shown, stride = shown_steps(steps)
        tokens = {s: t for c in group for s, t in zip(c.steps, c.tokens) if t is not None}
        lines += [f"### {preset}, KV {kv}, lr {lr:g}", ""]
        if stride > 1:
            lines += [f"Every {stride}th of {len(steps)} evaluations and the last; all of them in gain_curves.json.", ""]
        lines.append("| step | tokens (M) | " + " | ".join(f"{comparison_label(c)} ({seeds_label(c)})" for c in group)
                     + " |")
        lines.append("|---:|---:|" + "---:|" * len(group))
        index = [{s: i for i, s in enumerate(c.steps)} for c in group]
        for s in shown:
            t = ("-" if s not in tokens else f"{tokens[s] / 1e6:.1f}" if tokens[s] >= 1e6 or tokens[s] == 0
                 else f"{tokens[s] / 1e6:.3f}")  # (a CPU check's runs: thousands of tokens)
            lines.append(f"| {s:,} | {t} | " + " | ".join(cell(c, at[s]) if s in at else "-"
                                                          for c, at in zip(group, index)) + " |")
        lines.append("")
    return "\n".join(lines)


@dataclass
class GainCurves:
    curves: list[GainCurve]
    k: int
    written: list[Path] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"k": self.k, "curves": [c.as_dict() for c in self.curves]}

    def lines(self) -> list[str]:
        """One line per comparison: its seeds, evaluations and the gain at the last one; the files written."""
        out = ["paired gain over training (held-out loss, method - same-seed reference; 95% t interval)"]
        out += [f"  {comparison_label(c)} ({seeds_label(c)}): {len(c.steps)} evaluations, at step {c.steps[-1]:,} "
                f"{cell(c, len(c.steps) - 1)}" for c in self.curves]
        return out + [f"wrote {p}" for p in self.written]


def gain_curves(runs: Sequence[str | Path], *, k: int = TAIL_K, level: float = 0.95, json: str | Path | None = None,
                md: str | Path | None = None, overwrite: bool = False) -> GainCurves:
    """The paired gain over training of the runs among `runs` (`study_gain_curves`); `json` / `md`:
    also write them there."""
    result = GainCurves(study_gain_curves(load_runs(runs, k), level), k)
    if json:
        result.written.append(write_text_new(json, compact_json(result.as_dict()), overwrite=overwrite))
    if md:
        result.written.append(write_text_new(md, gain_markdown(result.curves, k), overwrite=overwrite))
    return result
