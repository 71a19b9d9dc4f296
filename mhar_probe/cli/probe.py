"""`mhar probe RUN_OR_DATASET...`: the forced-compromise probes as paper-style tables
(`analysis.probes.probe.probe`; what it writes is described there)."""

from __future__ import annotations

import argparse


def add_probe_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `probe`; handler: cmd_probe."""
    p = subparsers.add_parser("probe", help="forced-compromise probes of runs / routing datasets as tables")
    p.add_argument("inputs", nargs="+", metavar="RUN_OR_DATASET", help="run directories or routing .nc files")
    p.add_argument("--out", default="probes", help="output directory (default ./probes)")
    p.add_argument("--slices", type=int, default=None, help="query slices S (default 4; must match given datasets)")
    p.add_argument("--draws", type=int, default=None, help="random-query draws (default 8; must match given datasets)")
    p.add_argument("--tokens", type=int, default=65536, help="tokens to capture for runs without routing.nc")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward when capturing")
    p.add_argument("--first-sites", type=int, default=10, help="sites used for the per-head statistics")
    p.add_argument("--overwrite", action="store_true", help="replace existing tables")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=cmd_probe)
    return p


def cmd_probe(args: argparse.Namespace) -> int:
    from .args import require_existing

    require_existing("run or routing dataset", *args.inputs)  # (before the imports: torch takes seconds)
    from analysis.probes.probe import probe

    tables = probe(args.inputs, args.out, slices=args.slices, draws=args.draws, tokens=args.tokens,
                   batch_size=args.batch_size, first_sites=args.first_sites, overwrite=args.overwrite,
                   progress=not args.no_progress)
    for line in tables.lines():
        print(line)
    return 0
