"""`mhar bench routing ...`: the routing kernel benchmark (GPU); arguments pass through."""

from __future__ import annotations

import argparse


def cmd_bench(args: argparse.Namespace) -> int:
    if args.what == "routing":
        from .routing import main

        main(args.rest)
    return 0


def add_bench_subparser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="GPU benchmarks: `mhar bench routing --help`",
                       description="GPU benchmarks. `routing`: every routing call of one microbatch "
                                   "at the paper's kernel-table shapes, per backend, against the byte floor.")
    p.add_argument("what", choices=["routing"], help="which benchmark")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="its arguments (see `mhar bench routing --help`)")
    p.set_defaults(func=cmd_bench)
