"""One stage of a study device call: the runs of one grid of the `study100m` (or `middle`, or
`study350m`) plan, narrowed to a method and a seed if given, through the workbench's own `run_demo` stages.

    python results/study100m/device_runs.py --out /tmp/study100m --stages sweep main baseline 0
    python results/study100m/device_runs.py --out /tmp/middle --stages capture eval middle
    python results/study100m/device_runs.py --out /tmp/study350m --stages sweep scale350m mhar 0

GRID is a grid of STUDY (lrsweep, main, extra, hw, bestvsbest), `middle` (MIDDLE's main grid),
`scale350m` (STUDY350's main grid: the 350M pair) or `paper350m` / `paper350m-extra` (PAPER350's grids:
the 350M study, results/study350m/run_on_device.sh). `--steps N` and `--tiny` exist for the CPU check
of the device script (a tiny stand-in model and corpus cap; the run names keep the plan's preset). Finished runs are skipped and interrupted runs
resume from their checkpoint (mhar_probe.sweep). `--time-limit S` stops the sweep stage cleanly
S seconds after it starts: the run training then stops at a step boundary with a checkpoint there
(before the limit, leaving room for one more step, evaluation and checkpoint write as long as the
last ones took), no later run starts, and the next call resumes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from mhar_probe.demo.plan import MIDDLE, PAPER350, STUDY, STUDY350, Plan

#: the CPU stand-in: 2 layers of width 64, 8 heads (8 channels), KV 4 (the grid's), T = 128, 3 MB of the corpus
TINY_MODEL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                  intermediate_size=128)
TINY_RECIPE = dict(batch_size=4, seq_len=128, eval_every=5, eval_batches=1, checkpoint_every=5,
                   corpus_max_bytes=3_000_000)
#: grids trained by a plan of their own (name -> plan, its grid); every other GRID is one of STUDY's
OWN_PLANS = {"middle": (MIDDLE, "main"), "scale350m": (STUDY350, "main"), "paper350m": (PAPER350, "main"),
             "paper350m-extra": (PAPER350, "extra")}


def narrowed(grid: str, method: str | None, seed: int | None, tiny: bool,
             lr: float | None = None, progress: bool = False) -> tuple[Plan, str]:
    """The plan holding only `grid`, its axes narrowed to `method` / `seed` / `lr` (checked); `progress`
    shows the trainer's bar (a runtime field: the run is the same)."""
    plan, name = OWN_PLANS.get(grid, (STUDY, grid))
    if name not in plan.grids:
        sys.exit(f"device_runs: unknown grid {grid!r}; grids: {', '.join([*STUDY.grids, *OWN_PLANS])}")
    axes = dict(plan.grids[name])
    if method is not None:
        if method not in axes["methods"]:
            sys.exit(f"device_runs: grid {grid} has no method {method!r} (it has {', '.join(axes['methods'])})")
        axes["methods"] = [method]
    if seed is not None:
        if seed not in axes["seeds"]:
            sys.exit(f"device_runs: grid {grid} has no seed {seed} (it has {axes['seeds']})")
        axes["seeds"] = [seed]
    if lr is not None:
        rates = axes.get("lrs") or [plan.recipe["lr"]]
        if lr not in rates:
            sys.exit(f"device_runs: grid {grid} has no rate {lr:g} (it has {', '.join(f'{r:g}' for r in rates)})")
        axes["lrs"] = [lr]
    plan = dataclasses.replace(plan, grids={name: axes})
    if progress:
        plan = dataclasses.replace(plan, recipe={**plan.recipe, "progress": True})
    if tiny:
        recipe = {**plan.recipe, **TINY_RECIPE}
        if plan.recipe.get("micro_batch"):  # accumulate over as many micro-batches as the plan does
            recipe["micro_batch"] = TINY_RECIPE["batch_size"] * plan.recipe["micro_batch"] // plan.recipe["batch_size"]
        plan = dataclasses.replace(plan, model={**plan.model, **TINY_MODEL}, recipe=recipe,
                                   eval_limit=20, eval_batch_size=4, capture_tokens=512)
    return plan, name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the study folder on the device (/tmp/...: outside $OUT)")
    p.add_argument("--stages", nargs="+", required=True, help="sweep | capture eval")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: the plan's)")
    p.add_argument("--tiny", action="store_true", help="a tiny stand-in model (the CPU check)")
    p.add_argument("--lr", type=float, default=None, help="train only the grid's runs at this rate")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds the sweep stage may train; its run then stops cleanly with a checkpoint")
    p.add_argument("--progress", action="store_true",
                   help="the trainer's progress bar (steps, rate, tokens/s) on stderr: a detached run's log")
    p.add_argument("grid")
    p.add_argument("method", nargs="?")
    p.add_argument("seed", nargs="?", type=int)
    args = p.parse_args(argv)
    from mhar_probe.demo.run import run_demo

    plan, name = narrowed(args.grid, args.method, args.seed, args.tiny, args.lr, args.progress)
    from mhar_probe.cli.args import command_deadline
    from mhar_probe.errors import UserError

    try:  # the limit counts from the start of this process: its imports and data loading included
        deadline = command_deadline(args.time_limit)
    except UserError as exc:
        p.error(str(exc))
    return run_demo(Path(args.out), steps=args.steps, plan=plan, stages=args.stages, grids=[name],
                    deadline=deadline)


if __name__ == "__main__":
    sys.exit(main())
