"""`mhar cpt SRC --out DIR`: mid-train a converted model (or, with --control, the plain base).

Wired into `mhar` by `add_cpt_subparser(subparsers)`; the handler is `cmd_cpt(args)` (user
errors are raised as `UserError` and printed by `mhar` on one line, exit status 2). Also
run under torchrun as `torchrun --nproc_per_node 8 -m mhar_probe.cli cpt SRC --out DIR --fsdp`, the one
entry point (`main` below is `mhar cpt` for Python callers: the same parser, errors and exit codes).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..loss import LOSS_KERNELS
from ..model.routing import ROUTING_BACKENDS


def add_cpt_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="converted model directory (`mhar convert`), or with --control "
                                              "a plain Llama/Qwen3 directory or a converted one (its base)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--control", action="store_true",
                   help="train the plain base model: the schedule-matched control (same seed, data, schedule)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=4e-4, help="peak learning rate (default 4e-4)")
    p.add_argument("--min-lr", type=float, default=None, help="floor of the decay (default lr/100)")
    p.add_argument("--warmup", type=int, default=None, help="linear re-warm-up steps from 0 (default 5%% of steps)")
    p.add_argument("--decay", default="linear", choices=("linear", "cosine"), help="decay shape after warm-up")
    p.add_argument("--batch-size", type=int, default=16, help="global batch in sequences")
    p.add_argument("--micro-batch", type=int, default=None, help="per-process micro-batch (accumulates)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length (default min(1024, model limit))")
    p.add_argument("--corpus", default=None, help="text/jsonl/parquet file or directory, or 'installed' (the text of every installed package; default: embedded, the standard library)")
    p.add_argument("--corpus-max-bytes", type=int, default=4_000_000, help="cap on the corpus size (0: no cap)")
    p.add_argument("--seed", type=int, default=42, help="fixes the data order (pair a run with its control)")
    p.add_argument("--ema", type=float, default=0.999, help="weight EMA beta (0: off)")
    p.add_argument("--z-loss", type=float, default=1e-4, help="coefficient of mean(logsumexp(logits)^2)")
    p.add_argument("--weight-decay", type=float, default=0.05,
                   help="AdamW decay of matrices (not embeddings, norms, biases or routing parameters)")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing per decoder layer")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 full sharding under torchrun (default: DDP)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay each training step from CUDA graphs (default: on for one CUDA process; "
                        "--no-cuda-graphs steps eagerly)")
    p.add_argument("--loss-kernel", choices=LOSS_KERNELS, default=None,
                   help="the training cross-entropy: 'fused' (Triton; default on CUDA) or 'torch' (fp32 softmax)")
    p.add_argument("--routing-backend", default=None, choices=ROUTING_BACKENDS,
                   help="delta routing backend (default: triton on CUDA, eager on CPU)")
    p.add_argument("--device", default=None)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--no-progress", action="store_true")


def add_cpt_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `cpt` subcommand; its handler is `args.func` (= `cmd_cpt`)."""
    p = subparsers.add_parser(
        "cpt", help="mid-train a converted model (or its plain-base control)",
        description="Continue training a model converted by `mhar convert` (delta-form MHAR), or with "
                    "--control the plain base, with the paper's mid-training recipe. Use torchrun for "
                    "several GPUs (DDP, or --fsdp for FSDP2).")
    add_cpt_arguments(p)
    p.set_defaults(func=cmd_cpt)
    return p


def config_from_args(args: argparse.Namespace):
    from ..cpt.config import CPTConfig

    return CPTConfig(
        src=args.src, out=args.out, control=args.control, steps=args.steps, lr=args.lr, min_lr=args.min_lr,
        warmup=args.warmup, decay=args.decay, batch_size=args.batch_size, micro_batch=args.micro_batch,
        seq_len=args.seq_len, corpus=args.corpus, corpus_max_bytes=args.corpus_max_bytes or None,
        seed=args.seed, ema=args.ema, z_loss=args.z_loss, weight_decay=args.weight_decay,
        grad_clip=args.grad_clip, eval_every=args.eval_every, eval_batches=args.eval_batches,
        checkpoint_every=args.checkpoint_every, checkpointing=args.checkpointing, fsdp=args.fsdp, cuda_graphs=args.cuda_graphs,
        loss_kernel=args.loss_kernel,
        routing_backend=args.routing_backend, device=args.device, resume=args.resume,
        overwrite=args.overwrite, progress=not args.no_progress, explicit=getattr(args, "explicit", None))


def cmd_cpt(args: argparse.Namespace) -> int:
    """Run one mid-training run; prints the run directory and its losses."""
    from ..cpt.trainer import cpt
    from .args import check_corpus

    check_corpus(args.corpus)
    summary = cpt(config_from_args(args))
    if summary.get("finished"):
        ema = summary.get("final_ema_val_loss")
        print(f"{args.out}: {summary['kind']} val loss {summary['initial_val_loss']:.4f} -> "
              f"{summary['final_val_loss']:.4f} (tail-mean {summary['tail_mean_val_loss']:.4f}"
              + (f", EMA {ema:.4f}" if ema is not None else "") + ")")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`main(ARGV)` is `mhar cpt ARGV`: one parser, one error handler."""
    from . import main as mhar

    return mhar(["cpt", *(sys.argv[1:] if argv is None else argv)])
