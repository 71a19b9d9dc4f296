"""`mhar info [RUN] [--preset P --method M]`: parameters, FLOPs per token and config."""

from __future__ import annotations

import argparse
import json


def add_info_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `info`; handler: cmd_info."""
    p = subparsers.add_parser("info", help="parameters by part, FLOPs per token and config of a run or preset")
    p.add_argument("run", nargs="?", default=None, help="run directory (or use --preset/--method)")
    p.add_argument("--preset", default=None)
    p.add_argument("--method", default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)
    return p


def cmd_info(args: argparse.Namespace) -> int:
    """Print the description as text, or as JSON with --json."""
    from ..info import describe

    print(json.dumps(describe(args.run, preset=args.preset, method=args.method, heads=args.heads), indent=2)
          if args.json else describe(args.run, preset=args.preset, method=args.method, heads=args.heads,
                                     as_text=True))
    return 0
