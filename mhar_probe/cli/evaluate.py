"""`mhar eval RUN --tasks T[,T...]`: the LM Evaluation Harness on a trained run, offline.

The main CLI calls `add_eval_subparser(subparsers)`; the handler `cmd_eval` returns an exit
code and raises `EvalError` (a `UserError`) for input the user can fix.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from ..errors import UserError
from .args import leading_words, require_existing


def early_check(words: Sequence[str]) -> None:
    """RUN exists, checked in `mhar eval`'s words before its parser is built (its help names the
    shipped tasks, whose module loads torch) where RUN comes first, as in `mhar eval RUN --tasks T`."""
    require_existing("run directory", *leading_words(words, 1))


def _task_list(value: str) -> list[str]:
    names = [t.strip() for t in value.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one task name")
    return names


def add_eval_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `eval` to an argparse subparsers object."""
    from ..evaluate.heldout import SHIPPED_TASKS

    p = subparsers.add_parser(
        "eval", help="run lm-eval (offline) on a trained run; writes results_*.json + samples_*.jsonl",
        description="Evaluate a run with EleutherAI's LM Evaluation Harness in-process and offline. "
                    f"Shipped tasks (built from the run's held-out text): {', '.join(SHIPPED_TASKS)}. "
                    "The output directory is what `mhar stats mcnemar` reads.")
    p.add_argument("run", help="run directory made by `mhar train` (needs model.safetensors)")
    p.add_argument("--tasks", type=_task_list, metavar="TASK[,TASK...]",
                   help=f"comma-separated task names (shipped: {', '.join(SHIPPED_TASKS)}; "
                        "or tasks from --tasks-dir); required unless --export-tasks")
    p.add_argument("--export-tasks", default=None, metavar="DIR",
                   help="instead of evaluating, write the run's shipped task YAMLs and data into DIR "
                        "(new or empty) for stock lm_eval: --include_path DIR")
    p.add_argument("--out", default=None, help="output directory (default: RUN/eval)")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N items of each task")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--max-length", type=int, default=None,
                   help="context length given to the model (default: the run's training sequence length)")
    p.add_argument("--tasks-dir", action="append", default=[], metavar="DIR",
                   help="directory of task YAMLs with local data files (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="harness random seeds (few-shot sampling)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.set_defaults(func=cmd_eval)
    return p


def cmd_eval(args: argparse.Namespace) -> int:
    """Handler of `mhar eval`: evaluate, print the headline metrics and the output paths (or,
    with --export-tasks, write the shipped tasks and print the stock `lm_eval` command)."""
    require_existing("run directory", args.run)  # (before the imports: torch takes seconds)
    if args.export_tasks:
        from ..evaluate.harness import export_tasks, stock_command

        files = export_tasks(args.run, args.export_tasks, overwrite=args.overwrite)
        for task in files.tasks:
            print(f"{task:22s} {files.counts.get(task, 0):6d} items  {files.root / (task + '.yaml')}")
        for line in stock_command(args.run, files, device=args.device):
            print(line)
        return 0
    if not args.tasks:
        raise UserError("give --tasks TASK[,TASK...] (or --export-tasks DIR)")
    from ..evaluate.harness import EvalConfig, run_eval

    summary = run_eval(EvalConfig(
        run=args.run, tasks=args.tasks, out=args.out, limit=args.limit, batch_size=args.batch_size,
        device=args.device, max_length=args.max_length, tasks_dirs=args.tasks_dir, overwrite=args.overwrite,
        seed=args.seed))
    for line in summary.lines():
        print(line)
    return 0
