"""`mhar demo [--out DIR]`: the end-to-end demo on the embedded corpus (`make demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_demo_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `demo`; handler: cmd_demo."""
    p = subparsers.add_parser("demo", help="the end-to-end demo on the embedded corpus")
    p.add_argument("--out", default="demo_out")
    p.add_argument("--steps", type=int, default=None, help="training steps per run (default: the demo's)")
    p.add_argument("--overwrite", action="store_true", help="redo finished work")
    p.set_defaults(func=cmd_demo)
    return p


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(Path(args.out), steps=args.steps, overwrite=args.overwrite)
