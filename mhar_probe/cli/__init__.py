"""`mhar`: the command line, the top floor of the house. One module per subcommand
(`train`, `info`, `demo`, `sweep`, `capture`, `probe`, `eval`, `stats`, `figures`, `convert`,
`cpt`, `bench`, `corpus`), shared argument helpers in `args`, and the one error handler in `errors`
(user errors become one line on stderr and exit status 2). Nothing below imports this package."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from .args import OneLineParser, given_options
from .errors import run_command

Registrar = Callable[[argparse._SubParsersAction], object]


def _registrars() -> list[Registrar]:
    """Every subcommand, in the order `mhar --help` lists them."""
    from . import (bench, capture, convert, corpus, cpt, demo, evaluate, figures, info, probe, stats, sweep,
                   train)

    return [train.add_train_subparser, info.add_info_subparser, demo.add_demo_subparser,
            sweep.add_sweep_subparser, capture.add_capture_subparser, probe.add_probe_subparser,
            evaluate.add_eval_subparser, stats.add_stats_subparser, figures.add_figures_subparser,
            convert.add_convert_subparser, cpt.add_cpt_subparser, bench.add_bench_subparser,
            corpus.add_corpus_subparser]


def build_parser() -> argparse.ArgumentParser:
    """The `mhar` parser with every subcommand; each sets `func`, its handler."""
    parser = OneLineParser(
        prog="mhar", description="Train, capture, probe and compare Multi-Head Attention Residuals models.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a refused input")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`mhar ARGV`: parse, run the subcommand, return its exit status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command in ("train", "cpt"):  # --resume checks only what the user set against the saved run
        sub = parser._subparsers._group_actions[0].choices[args.command]  # type: ignore[union-attr]
        args.explicit = given_options(sub, argv[argv.index(args.command) + 1:])
    return run_command(args.command, args.func, args, debug=args.debug)


__all__ = ["build_parser", "main"]
