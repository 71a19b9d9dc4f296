"""`mhar train --out DIR ...`: train one model from scratch (or --resume it)."""

from __future__ import annotations

import argparse
from typing import Sequence

from ..errors import UserError
from .args import add_train_arguments, check_run_paths, command_deadline, has_switch, leading_words, option_value


def add_train_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `train`; handler: cmd_train. Every flag is a `TrainConfig` field (`cli.flags`)."""
    p = subparsers.add_parser("train", help="train one model from scratch",
                              description="Train one model from scratch into a run directory (--out), or "
                                          "--resume it. Options are grouped; defaults are shown.")
    add_train_arguments(p, exclude=())
    p.set_defaults(func=cmd_train)
    return p


def early_check(words: Sequence[str]) -> None:
    """`mhar train`'s paths (`check_run_paths`), checked in its words before the parser is built
    (its options load torch); and a path given to --resume, which takes none (train has no
    positional argument, so a word right after --resume is refused by the parser too)."""
    resumed = leading_words(words[words.index("--resume") + 1:], 1) if has_switch(words, "--resume") else []
    if resumed:
        raise UserError(f"--resume takes no value; give the run to continue as --out {resumed[0]}")
    check_run_paths(option_value(words, "--corpus"), option_value(words, "--out"), has_switch(words, "--resume"),
                    has_switch(words, "--overwrite"))


def train_config_from_args(args: argparse.Namespace):
    """The TrainConfig the parsed `mhar train` options describe."""
    from ..runoptions import TrainConfig
    from .flags import options_from_args

    return options_from_args(TrainConfig, args)


def cmd_train(args: argparse.Namespace) -> int:
    """Train; prints the run's tail-mean, first and last validation loss."""
    check_run_paths(args.corpus, args.out, args.resume, args.overwrite)  # (before the imports: torch takes seconds)
    from ..train import train

    cfg = train_config_from_args(args)
    summary = train(cfg, deadline=command_deadline(cfg.time_limit))
    if summary.get("finished"):
        print(f"{args.out}: {tail_text(summary)} (step 0: {summary['initial_val_loss']:.4f}, "
              f"final: {summary['final_val_loss']:.4f})")
    else:
        return stopped_early(args.out, summary)
    return 0


def stopped_early(out: str, summary: dict) -> int:
    """What `mhar train` / `mhar cpt` say and return when the run stopped before its last step:
    0 at the time limit, 130 (as for Ctrl-C) when interrupted; both kept a checkpoint."""
    if summary.get("reason") == "time_limit":
        print(time_limit_line(out, summary["stopped_at"]))
    elif summary.get("reason") == "interrupted":
        print(f"{out}: interrupted after step {summary['stopped_at']}, with a checkpoint there; "
              f"rerun with --resume to continue")
        return 130
    return 0


def tail_text(summary: dict) -> str:
    """The run's tail-mean val loss as `mhar train` / `mhar cpt` print it, or why it has none
    (`mhar_probe.tail`: too few evaluations after step 0)."""
    if summary.get("tail_mean_val_loss") is not None:
        return f"tail-mean val loss {summary['tail_mean_val_loss']:.4f}"
    from ..tail import short_tail_note

    return "no tail-mean: " + short_tail_note("the run", summary.get("tail_evaluations", 0), summary["tail_k"])


def time_limit_line(out: str, step: int) -> str:
    """What `mhar train` / `mhar cpt` print when --time-limit stopped the run."""
    return (f"{out}: stopped at the time limit after step {step}, with a checkpoint there; "
            f"rerun with --resume to continue")
