"""`mhar demo [--out DIR]`: the end-to-end demo on the embedded corpus (`make demo`), or another
plan (`--plan ladder`: the GPU ladder), whole or stage by stage."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_demo_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `demo`; handler: cmd_demo."""
    from ..demo.plan import PLANS
    from ..demo.run import STAGES

    p = subparsers.add_parser("demo", help="the end-to-end demo on the embedded corpus (or another plan)")
    p.add_argument("--out", default="demo_out",
                   help="study folder: runs/ (one folder per run, with the sweep's manifest.json and evals/), "
                        "ladder/, probes/, stats/, figures/, report.md (and report.html)")
    p.add_argument("--plan", default="demo", choices=sorted(PLANS),
                   help="demo: tiny runs on the embedded corpus (CPU); ladder: the GPU ladder (results/ladder)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps per run (default: the plan's, 150 for the demo)")
    p.add_argument("--stages", nargs="+", default=None, metavar="STAGE",
                   help=f"run only these stages (of: {' '.join(STAGES)}); the later ones read only files")
    p.add_argument("--grids", nargs="+", default=None, metavar="GRID",
                   help="train, capture and evaluate only these grids of the plan ('widths': its narrower baselines)")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="afterwards copy what the report stages need, without weights, into DIR (manifests merged)")
    p.add_argument("--overwrite", action="store_true", help="redo finished work")
    p.set_defaults(func=cmd_demo)
    return p


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo
    from ..demo.export import export_study
    from ..demo.plan import PLANS

    if args.export:  # a folder that cannot be made is refused before hours of training, not after
        try:
            Path(args.export).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from ..errors import UserError

            raise UserError(f"--export {args.export}: cannot create it ({exc.strerror})") from None
    status = run_demo(Path(args.out), steps=args.steps, overwrite=args.overwrite, plan=PLANS[args.plan],
                      stages=args.stages, grids=args.grids)
    if args.export:
        files = export_study(Path(args.out), Path(args.export))
        print(f"exported {len(files)} files to {args.export}")
    return status
