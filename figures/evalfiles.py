"""Where a run's LM-eval harness output lives and its headline numbers.

Layout: EVALS/<run name>/ is the harness --output_path of the run named <run name> (the run
directory's name; for a sweep, the manifest's run name). Headline metric per task: the first
of word_perplexity, acc, acc_norm, exact_match, pass@1 found in the latest results file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.stats.errors import StatsError
from analysis.stats.lm_eval_io import discover, read_results

HEADLINE = ("word_perplexity", "acc", "acc_norm", "exact_match", "pass@1", "pass_at_1")


def eval_dir(evals: Path | None, run_name: str) -> Path | None:
    if evals is None:
        return None
    d = evals / Path(run_name).name
    return d if d.is_dir() else None


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
