"""Where a run's LM-eval harness output lives and its headline numbers.

One lookup (`find_eval`) for every generator. A run's evaluation is, first found:
  1. EVALS/<run name>/ where EVALS is --evals or RUNS_DIR/evals (a study's layout: the demo and the
     committed results folders, `runs/evals/<run>/`, <run name> being the run directory's name);
  2. RUN/eval/, what `mhar eval RUN` writes by default (`mhar_probe.runfiles.EVAL`).
A candidate counts only when it holds a harness results file, so `--evals RUNS_DIR` (each run's
own folder, its eval/ inside) works too, and a run without an evaluation is left out with a note
(`missing_note`), never an error. Headline metric per task: the first of word_perplexity, acc,
acc_norm, exact_match, pass@1 found in the latest results file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from analysis.stats.errors import StatsError
from analysis.stats.lm_eval_io import discover, read_results
from mhar_probe.runfiles import EVAL

HEADLINE = ("word_perplexity", "acc", "acc_norm", "exact_match", "pass@1", "pass_at_1")
#: where `find_eval` looks, for the tables' "needs" and notes
WHERE = f"EVALS/<run name>/ (EVALS = --evals or RUNS_DIR/evals) or RUN/{EVAL}/ (`mhar eval RUN`)"


def has_results(root: Path) -> bool:
    """Whether `root` holds a harness results file (results_<date>.json, at any depth)."""
    try:
        return root.is_dir() and any(r["results"] for r in discover(root).values())
    except StatsError:
        return False


def find_eval(evals: Path | None, run_name: str, run_path: str | Path | None = None) -> Path | None:
    """The folder holding the harness output of the run named `run_name` (directory `run_path`):
    EVALS/<name>, else RUN/eval; None when neither holds a results file."""
    candidates = [evals / Path(run_name).name] if evals is not None else []
    if run_path is not None:
        candidates.append(Path(run_path) / EVAL)
    return next((c for c in candidates if has_results(c)), None)


def missing_note(names: Sequence[str], evals: Path | None) -> str:
    """The table note naming the runs left out for want of an evaluation."""
    return (f"No evaluation found for {', '.join(sorted(names))} (looked in "
            f"{f'{evals}/<run name>/ and ' if evals is not None else ''}RUN/{EVAL}/); left out.")


def headline_metrics(root: Path) -> dict[str, tuple[str, float]]:
    """task -> (metric label, value) from the latest results_<date>.json under `root`."""
    try:
        runs = {d: r for d, r in discover(root).items() if r["results"]}
    except StatsError:
        return {}
    if not runs:
        return {}
    results: dict[str, Any] = read_results(runs[sorted(runs)[-1]]["results"])["results"]
    out = {}
    for task, vals in sorted(results.items()):
        keys = [k for k in vals if "," in k and "_stderr" not in k and isinstance(vals[k], (int, float))]
        for want in HEADLINE:
            hit = [k for k in keys if k.split(",")[0] == want]
            if hit:
                out[task] = (hit[0], float(vals[hit[0]]))
                break
    return out
