"""`mhar sweep`: train a grid of runs into one directory (resumable, with a manifest).

    mhar sweep --out sweeps/heads --methods baseline attnres mhar --heads 1 2 4 8 \
        --kv-heads 1 2 4 --lrs 5e-4 --seeds 1 2 3 --presets tiny --steps 300
    mhar sweep --out sweeps/heads --grid grid.json      # the same axes from a JSON file

The shared training options are those of `mhar train` (--batch-size, --eval-every, ...).
--time-limit SECONDS is one deadline for the whole sweep: the run it reaches stops cleanly with a
checkpoint and no later run starts; the same command again skips the finished runs and resumes it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import UserError
from .args import (RawDescriptionDefaultsHelpFormatter, add_train_arguments, check_corpus, command_deadline,
                   option_value, require_existing)
from .flags import flag_fields, option_values

if TYPE_CHECKING:
    from ..sweep.grid import SweepGrid

#: `TrainConfig` fields that the sweep's axes replace (--methods, --heads, --kv-heads, --lrs,
#: --seeds, --presets, --steps), those of the run directory (the sweep's own --out, --overwrite),
#: and --time-limit (the whole sweep's, not each run's)
_AXIS_DESTS = ("preset", "method", "heads", "kv_heads", "lr", "seed", "steps")
_NOT_SHARED = (*_AXIS_DESTS, "out", "resume", "overwrite", "time_limit")


def common_options() -> tuple[str, ...]:
    """Every `TrainConfig` field with a `mhar train` flag that a sweep passes to each of its runs:
    all but the axes and the run directory's (so a new training option reaches swept runs by
    construction: its flag and this list are both made from its field)."""
    from ..runoptions import TrainConfig

    return tuple(f.name for f in flag_fields(TrainConfig, exclude=_NOT_SHARED))


def check_paths(corpus: str | None, grid: str | None) -> None:
    """What `mhar sweep` reads exists: --corpus and the --grid file."""
    check_corpus(corpus)
    require_existing("grid file", grid)


def early_check(words: Sequence[str]) -> None:
    """`check_paths` on `mhar sweep`'s words, before its parser is built (its options load torch)."""
    check_paths(option_value(words, "--corpus"), option_value(words, "--grid"))


def add_sweep_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `sweep` on the `mhar` sub-command parser; handler: cmd_sweep."""
    from ..sweep.grid import AXES

    p = subparsers.add_parser("sweep", help="train a grid of runs (method x H x KV x lr x seed x preset x steps)",
                              conflict_handler="resolve", description=__doc__,
                              formatter_class=RawDescriptionDefaultsHelpFormatter)
    add_train_arguments(p)  # shared options; the grid axes below replace the single-valued ones
    p.add_argument("--out", required=True, help="sweep directory (one sub-directory per run)")
    p.add_argument("--grid", default=None, help="JSON file with the grid (keys: " + ", ".join(AXES) + ", common)")
    p.add_argument("--methods", "--method", nargs="+", default=None, help="residual methods")
    p.add_argument("--heads", nargs="+", default=None, help="routing heads H (routed methods; 'kv' = KV heads)")
    p.add_argument("--kv-heads", nargs="+", default=None, help="KV heads ('preset' = the preset's)")
    p.add_argument("--lrs", "--lr", nargs="+", type=float, default=None, help="peak learning rates")
    p.add_argument("--seeds", "--seed", nargs="+", type=int, default=None, help="seeds (fix init and data order)")
    p.add_argument("--presets", "--preset", nargs="+", default=None, help="model presets")
    p.add_argument("--steps", nargs="+", type=int, default=None, help="training steps (several: budgets)")
    p.add_argument("--overwrite", action="store_true", help="retrain every run of the grid from scratch")
    p.add_argument("--dry-run", action="store_true", help="list the runs and their status; train nothing")
    p.set_defaults(func=cmd_sweep)
    return p


def _opt_ints(values: list[str], what: str, none_word: str) -> list[int | None]:
    out: list[int | None] = []
    for v in values:
        if v == none_word:
            out.append(None)
            continue
        try:
            out.append(int(v))
        except ValueError:
            raise UserError(f"--{what} takes integers or '{none_word}', got {v!r}") from None
    return out


def grid_from_args(args: argparse.Namespace, parser_defaults: dict[str, Any]) -> SweepGrid:
    """The grid file (if any), then every axis or shared option given on the command line."""
    values: dict[str, Any] = {}
    if args.grid:
        path = Path(args.grid)
        if not path.is_file():
            raise UserError(f"grid file {path} does not exist")
        try:
            values = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
        if not isinstance(values, dict):
            raise UserError(f"{path}: expected a JSON object with the grid axes")
    axes = dict(methods=args.methods, lrs=args.lrs, seeds=args.seeds, presets=args.presets, steps=args.steps,
                heads=_opt_ints(args.heads, "heads", "kv") if args.heads else None,
                kv_heads=_opt_ints(args.kv_heads, "kv-heads", "preset") if args.kv_heads else None)
    values.update({k: v for k, v in axes.items() if v is not None})
    from ..runoptions import TrainConfig

    common = dict(values.get("common") or {})
    for name, value in option_values(TrainConfig, args, exclude=_NOT_SHARED).items():
        if name == "extra":  # the model overrides given add to the grid file's
            value = {**(common.get("extra") or {}), **value}
            if value:
                common["extra"] = value
        elif value != parser_defaults.get(name) or name not in common:
            common[name] = value
    values["common"] = common
    from ..sweep.grid import SweepGrid

    return SweepGrid.from_dict(values)


def cmd_sweep(args: argparse.Namespace) -> int:
    check_paths(args.corpus, args.grid)  # (before the imports: torch takes seconds)
    from ..sweep.runner import run_sweep
    grid = grid_from_args(args, _defaults())

    def report(spec, action: str) -> None:
        print(f"{action:8s} {spec.name}", flush=True)

    result = run_sweep(grid, args.out, overwrite=args.overwrite, progress=args.progress,
                       dry_run=args.dry_run, on_run=None if args.dry_run else report,
                       deadline=command_deadline(args.time_limit))
    if args.dry_run:
        for spec in result.runs:
            print(f"{result.before[spec.name]:12s} {spec.name}")
        print(f"{len(result.runs)} runs in {args.out} (dry run: nothing trained)")
        return 0
    print(f"{args.out}: {len(result.trained)} trained, {len(result.skipped)} already finished, "
          f"manifest {Path(args.out) / 'manifest.json'}")
    if result.time_limited:
        left = [s.name for s in result.runs if result.after.get(s.name) != "finished"]
        limit = f" ({args.time_limit:g} s)" if args.time_limit is not None else ""
        print(f"{args.out}: stopped at the time limit{limit} with {len(left)} runs unfinished "
              f"(from {left[0]}); run the same command again to continue: finished runs are skipped, an "
              f"interrupted one resumes from its checkpoint")
    return 0


def _defaults() -> dict[str, Any]:
    """Defaults of the shared options, as `TrainConfig` declares them."""
    from ..runoptions import TrainConfig

    defaults = TrainConfig()
    return {name: getattr(defaults, name) for name in common_options()}
