"""`mhar train --out DIR ...`: train one model from scratch (or --resume it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError
from ..model.config import METHODS, PRESETS
from .args import add_train_arguments, check_corpus, model_overrides


def add_train_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `train`; handler: cmd_train."""
    p = subparsers.add_parser("train", help="train one model from scratch",
                              description="Train one model from scratch into a run directory (--out), or "
                                          "--resume it. Options are grouped; defaults are shown.")
    output = add_train_arguments(p)["output"]
    output.add_argument("--out", required=True, help="run directory")
    output.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    output.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=cmd_train)
    return p


def train_config_from_args(args: argparse.Namespace, out: str):
    """The TrainConfig the parsed `mhar train` options describe."""
    from ..train import TrainConfig

    return TrainConfig(
        out=out, preset=args.preset, method=args.method, heads=args.heads, kv_heads=args.kv_heads,
        steps=args.steps, lr=args.lr, warmup=args.warmup, batch_size=args.batch_size,
        micro_batch=args.micro_batch, seq_len=args.seq_len, eval_every=args.eval_every,
        eval_batches=args.eval_batches, checkpoint_every=args.checkpoint_every, seed=args.seed,
        corpus=args.corpus, corpus_max_bytes=args.corpus_max_bytes or None, tokenizer=args.tokenizer,
        vocab_size=args.vocab_size, routing_backend=args.routing_backend, device=args.device,
        resume=getattr(args, "resume", False), overwrite=getattr(args, "overwrite", False),
        progress=not args.no_progress, extra=model_overrides(args), fsdp=getattr(args, "fsdp", False),
        cuda_graphs=getattr(args, "cuda_graphs", None), loss_kernel=getattr(args, "loss_kernel", None),
        compile_sublayers=getattr(args, "compile_sublayers", None),
        routing_douts=getattr(args, "routing_douts", "promoted"), explicit=getattr(args, "explicit", None))


def cmd_train(args: argparse.Namespace) -> int:
    """Train; prints the run's tail-mean, first and last validation loss."""
    from ..train import train

    if args.method not in METHODS:
        raise UserError(f"unknown method {args.method!r}; choose one of {', '.join(METHODS)}")
    if args.preset not in PRESETS:
        raise UserError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    check_corpus(args.corpus)
    summary = train(train_config_from_args(args, args.out))
    if summary.get("finished"):
        print(f"{args.out}: tail-mean val loss {summary['tail_mean_val_loss']:.4f} "
              f"(step 0: {summary['initial_val_loss']:.4f}, final: {summary['final_val_loss']:.4f})")
    return 0
