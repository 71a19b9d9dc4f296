"""`mhar capture RUN`: stream a run's held-out text through it and write the routing dataset."""

from __future__ import annotations

import argparse
from pathlib import Path

from .capture import capture_routing
from .errors import CaptureError
from .runs import DEFAULT_DATASET, heldout_rows, load_run, row_batches


def add_capture_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    out = Path(args.out) if args.out else Path(args.run) / DEFAULT_DATASET
    if out.exists() and not args.overwrite:  # fail before loading anything
        raise CaptureError(f"{out} already exists; pass --overwrite to replace it")
    model, tokenizer, train_cfg = load_run(args.run, args.device, args.backend)
    seq_len = args.seq_len or train_cfg.get("seq_len") or model.config.max_position_embeddings // 2
    if seq_len > model.config.max_position_embeddings:
        raise CaptureError(f"--seq-len {seq_len} exceeds the model's position limit "
                           f"({model.config.max_position_embeddings})")
    rows = heldout_rows(tokenizer, train_cfg, seq_len, args.split)
    batches, tokens = row_batches(rows, args.tokens, args.batch_size)
    ds = capture_routing(
        model, batches, probes=not args.no_probes, slices=args.slices, draws=args.draws, seed=args.seed,
        per_token=args.per_token, out=out, overwrite=args.overwrite, split=args.split,
        run_path=args.run, progress=not args.no_progress, total=len(batches),
        attrs={"seq_len": int(seq_len), "corpus": str(train_cfg.get("corpus") or "embedded"),
               "train_preset": str(train_cfg.get("preset", ""))})
    print(f"wrote {out}: {ds.attrs['tokens_seen']} tokens, {ds.sizes['site']} sites x "
          f"{ds.sizes['source']} sources x {ds.sizes['head']} heads ({ds.attrs['method']}, "
          f"{ds.attrs['capture_seconds']:.1f} s)")
    ds.close()
    return 0
