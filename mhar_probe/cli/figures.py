"""`mhar figures RUNS_DIR --out DIR`: every paper figure and table your runs make possible
(`figures.build.build`); `--list` names the generators and what each needs."""

from __future__ import annotations

import argparse

from ..errors import UserError


def add_figures_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `figures` on the `mhar` sub-command parser; handler: cmd_figures."""
    p = subparsers.add_parser("figures", help="regenerate the paper's figures and tables from your runs")
    p.add_argument("runs", metavar="RUNS_DIR", help="directory holding training runs (e.g. a sweep)")
    p.add_argument("--out", required=True, help="output directory (PNG+PDF figures, MD/TeX/CSV tables)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME", help="only these generators (see --list)")
    p.add_argument("--benchmarks", nargs="+", default=None, metavar="DIR",
                   help="directories with benchmark JSON for table_cost / table_kernel_speed, e.g. the "
                        "repository's benchmarks/ (default: RUNS_DIR/benchmarks if it exists; never the "
                        "working directory)")
    p.add_argument("--mhar-heads", type=int, default=None, metavar="H",
                   help="the MHAR head count the comparison tables use (default: 8 if trained, else H = KV, "
                        "else the largest H <= 8); the demo passes the H it evaluates")
    p.add_argument("--evals", default=None, metavar="DIR",
                   help="LM-eval harness outputs, one sub-directory per run name (default: RUNS_DIR/evals); "
                        "a run without one there is read from RUN/eval (what `mhar eval RUN` writes), else "
                        "left out with a note")
    p.add_argument("--overwrite", action="store_true", help="replace figures already in --out")
    p.add_argument("--list", action="store_true", help="list the generators and what each needs, then exit")
    p.set_defaults(func=cmd_figures)
    return p


def cmd_figures(args: argparse.Namespace) -> int:
    """Build; exit 1 when a generator failed, a user error when nothing could be made."""
    from figures.build import build
    from figures.registry import generator_lines

    if args.list:
        for line in generator_lines():
            print(line)
        return 0
    report = build(args.runs, args.out, only=args.only, overwrite=args.overwrite, benchmarks=args.benchmarks,
                   evals=args.evals, mhar_heads=args.mhar_heads)
    for line in report.lines():
        print(line)
    if not report.made and not report.failed:
        raise UserError(f"nothing could be made from {args.runs}; see the skip reasons above")
    return 1 if report.failed else 0
