"""`mhar capture RUN`: stream a run's held-out text through it and write the routing dataset."""

from __future__ import annotations

import argparse

from ..runfiles import ROUTING as DEFAULT_DATASET  # (`capture.runs`' default, without its imports)
from .args import require_existing


def add_capture_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `capture`; handler: cmd_capture."""
    p = subparsers.add_parser("capture", help="capture per-head routing weights of a run into a netCDF dataset")
    p.add_argument("run", help="run directory written by `mhar train`")
    p.add_argument("--out", default=None, help=f"output file (default: RUN/{DEFAULT_DATASET})")
    p.add_argument("--tokens", type=int, default=65536, help="held-out tokens to stream (default 65536)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default: the run's)")
    p.add_argument("--split", default="val", choices=("val", "train"), help="corpus split (default val)")
    p.add_argument("--per-token", action="store_true", help="also stream every token's weights to the file")
    p.add_argument("--no-probes", action="store_true", help="token means only (skip the source-based probe sums)")
    p.add_argument("--slices", type=int, default=4, help="query slices S for width-disagreement")
    p.add_argument("--draws", type=int, default=8, help="matched-norm random-query draws")
    p.add_argument("--seed", type=int, default=0, help="seed of the random-query draws")
    p.add_argument("--backend", default=None,
                   help="routing backend: eager, compile, triton (default: triton on CUDA, eager on CPU)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_capture)
    return p


def cmd_capture(args: argparse.Namespace) -> int:
    """Capture; prints what was written."""
    require_existing("run directory", args.run)  # (before the imports: torch takes seconds)
    from ..capture.of_run import RunCapture, capture_run, capture_summary

    cfg = RunCapture(run=args.run, out=args.out, tokens=args.tokens, batch_size=args.batch_size,
                     seq_len=args.seq_len, split=args.split, per_token=args.per_token, probes=not args.no_probes,
                     slices=args.slices, draws=args.draws, seed=args.seed, backend=args.backend,
                     device=args.device, overwrite=args.overwrite, progress=not args.no_progress)
    ds = capture_run(cfg)
    print(capture_summary(ds, cfg.out_path()))
    ds.close()
    return 0
