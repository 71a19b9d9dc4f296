"""`make demo`: train the four methods at the `tiny` preset on the embedded corpus and compare.

Every run shares seed and data order (paired). A finished run (summary.json) is skipped on a
second invocation, and an interrupted one resumes from its checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .errors import UserError
from .train import TrainConfig, train

DEMO_METHODS = (("baseline", None), ("hyper", None), ("attnres", None), ("mhar", None))
DEMO_STEPS = 150
DEMO_RECIPE = dict(preset="tiny", lr=2e-3, batch_size=8, eval_every=15, eval_batches=2,
                   checkpoint_every=50, seed=42)


def demo_run_name(method: str, heads: int | None) -> str:
    return method if heads is None else f"{method}-h{heads}"


def run_demo(out: Path, steps: int | None = None, overwrite: bool = False) -> int:
    steps = steps or DEMO_STEPS
    if steps < 1:
        raise UserError("--steps must be at least 1")
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    results = []
    start = time.perf_counter()
    for method, heads in DEMO_METHODS:
        run = runs / demo_run_name(method, heads)
        summary_file = run / "summary.json"
        if summary_file.exists() and not overwrite:
            summary = json.loads(summary_file.read_text())
            print(f"[demo] {run.name}: finished earlier, skipped")
        else:
            print(f"[demo] training {run.name} ({steps} steps)")
            cfg = TrainConfig(out=str(run), method=method, heads=heads, steps=steps,
                              resume=not overwrite, overwrite=overwrite, **DEMO_RECIPE)
            summary = train(cfg)
        results.append((run.name, summary))
    print()
    print(comparison_table(results))
    print(f"\n[demo] done in {time.perf_counter() - start:.0f} s; runs in {runs}")
    return 0


def comparison_table(results: list[tuple[str, dict]]) -> str:
    """Markdown table of tail-mean validation loss, delta vs baseline and the drop from step 0."""
    base = next((s["tail_mean_val_loss"] for name, s in results if name == "baseline"), None)
    lines = ["| run | H | tail-mean val loss | Δ vs baseline | step-0 val loss | drop |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, s in results:
        tail = s["tail_mean_val_loss"]
        delta = f"{tail - base:+.4f}" if base is not None and name != "baseline" else "–"
        drop = 1 - s["final_val_loss"] / s["initial_val_loss"]
        lines.append(f"| {name} | {s.get('routing_heads', '–')} | {tail:.4f} | {delta} | "
                     f"{s['initial_val_loss']:.4f} | {100 * drop:.0f}% |")
    return "\n".join(lines)
