"""`mhar info [RUN] [--preset P --method M]`: parameters, FLOPs per token and config."""

from __future__ import annotations

import argparse
import json


def add_info_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `info`; handler: cmd_info."""
    p = subparsers.add_parser("info", help="parameters by part, FLOPs per token and config of a run or preset")
    p.add_argument("run", nargs="?", default=None, help="run directory (or use --preset/--method)")
    p.add_argument("--preset", default=None, help="a preset instead of a run: tiny, 100m, 124m, 350m, 1b")
    p.add_argument("--method", default=None, help="the preset's residual method (default: mhar)")
    p.add_argument("--heads", type=int, default=None, help="routing heads H (default: the preset's, as train)")
    p.add_argument("--vocab-size", type=int, default=None,
                   help="vocabulary to count a preset with (default: the paper's 151,936 at 100m-1b, "
                        "4,096 at tiny)")
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    p.set_defaults(func=cmd_info)
    return p


def cmd_info(args: argparse.Namespace) -> int:
    """Print the description as text, or as JSON with --json."""
    from .args import require_existing

    require_existing("run directory", args.run)  # (before the imports: torch takes seconds)
    from ..info import describe

    options = dict(preset=args.preset, method=args.method, heads=args.heads, vocab_size=args.vocab_size)
    print(json.dumps(describe(args.run, **options), indent=2) if args.json
          else describe(args.run, **options, as_text=True))
    return 0
