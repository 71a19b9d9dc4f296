"""`mhar cpt SRC --out DIR`: mid-train a converted model (or, with --control, the plain base).

Wired into `mhar` by `add_cpt_subparser(subparsers)`; the handler is `cmd_cpt(args)` (user
errors are raised as `UserError` and printed by `mhar` on one line, exit status 2). Also
run under torchrun as `torchrun --nproc_per_node 8 -m mhar_probe.cli cpt SRC --out DIR --fsdp`, the one
entry point (`main` below is `mhar cpt` for Python callers: the same parser, errors and exit codes).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def add_cpt_arguments(p: argparse.ArgumentParser) -> None:
    """A flag per `CPTConfig` field (`cli.flags`), in the run commands' help groups."""
    from ..cpt.config import CPTConfig
    from .flags import add_option_flags

    add_option_flags(p, CPTConfig)


def add_cpt_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `cpt` subcommand; its handler is `args.func` (= `cmd_cpt`)."""
    p = subparsers.add_parser(
        "cpt", help="mid-train a converted model (or its plain-base control)",
        description="Continue training a model converted by `mhar convert` (delta-form MHAR), or with "
                    "--control the plain base, with the paper's mid-training recipe. Use torchrun for "
                    "several GPUs (DDP, or --fsdp for FSDP2).")
    add_cpt_arguments(p)
    p.set_defaults(func=cmd_cpt)
    return p


def check_paths(src: str | None, corpus: str | None, out: str | None, resume: bool, overwrite: bool = False) -> None:
    """What `mhar cpt` reads exists: the source model SRC, --corpus and, with --resume, --out
    (`check_run_paths`, which refuses --resume with --overwrite)."""
    from .args import check_run_paths, require_existing

    require_existing("source model", src)
    check_run_paths(corpus, out, resume, overwrite)


def early_check(words: Sequence[str]) -> None:
    """`check_paths` on `mhar cpt`'s words, before its parser is built (its options load torch):
    SRC where it comes first, as in `mhar cpt SRC --out DIR`."""
    from .args import has_switch, leading_words, option_value

    check_paths(next(iter(leading_words(words, 1)), None), option_value(words, "--corpus"),
                option_value(words, "--out"), has_switch(words, "--resume"), has_switch(words, "--overwrite"))


def config_from_args(args: argparse.Namespace):
    """The CPTConfig the parsed `mhar cpt` options describe."""
    from ..cpt.config import CPTConfig
    from .flags import options_from_args

    return options_from_args(CPTConfig, args)


def cmd_cpt(args: argparse.Namespace) -> int:
    """Run one mid-training run; prints the run directory and its losses."""
    check_paths(args.src, args.corpus, args.out, args.resume, args.overwrite)  # (before the imports: torch takes seconds)
    from ..cpt.trainer import cpt
    from .args import command_deadline
    from .train import stopped_early, tail_text

    cfg = config_from_args(args)
    summary = cpt(cfg, deadline=command_deadline(cfg.time_limit))
    if summary.get("finished"):
        ema = summary.get("final_ema_val_loss")
        print(f"{args.out}: {summary['kind']} val loss {summary['initial_val_loss']:.4f} -> "
              f"{summary['final_val_loss']:.4f} ({tail_text(summary)}"
              + (f", EMA {ema:.4f}" if ema is not None else "") + ")")
    else:
        return stopped_early(args.out, summary)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`main(ARGV)` is `mhar cpt ARGV`: one parser, one error handler."""
    from . import main as mhar

    return mhar(["cpt", *(sys.argv[1:] if argv is None else argv)])
