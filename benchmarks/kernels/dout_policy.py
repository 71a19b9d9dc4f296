"""The dout dtype policy, judged by training: the same run with the triton backward reading
fp32 upstream gradients ("promoted", the default) and bf16 ones ("storage"), on one GPU.

Both runs train the same model from the same seed on the same batches (bf16 autocast, the
CUDA-graph step), so any difference in their loss curves is the policy's. Printed last: the
largest per-step difference of the training loss, the difference of the final held-out loss
and of its tail-mean, and each run's median tokens/s; the curves go to --out (JSON).

    python benchmarks/kernels/dout_policy.py --preset 100m --steps 300 --out dout_policy.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import torch

from mhar_probe.kernels.config import ROUTING_DOUTS
from mhar_probe.runfiles import RunFiles
from mhar_probe.train import TrainConfig, train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="100m")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--corpus-max-bytes", type=int, default=3_000_000)
    p.add_argument("--commit", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("the dout policy is a property of the triton kernels: run this on a CUDA GPU")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in ROUTING_DOUTS:
            out = Path(tmp) / policy
            summary = train(TrainConfig(
                out=str(out), preset=args.preset, method="mhar", steps=args.steps, lr=args.lr,
                batch_size=args.batch, seq_len=args.seq, eval_every=max(1, args.steps // 20), eval_batches=4,
                checkpoint_every=10 ** 9, corpus_max_bytes=args.corpus_max_bytes, progress=False,
                routing_douts=policy))
            metrics = RunFiles(out).metrics()
            runs[policy] = dict(
                summary=summary, train_loss=[m["loss"] for m in metrics if "loss" in m],
                val=[(m["step"], m["val_loss"]) for m in metrics if "val_loss" in m],
                tokens_per_s=statistics.median(m["tokens_per_s"] for m in metrics if "tokens_per_s" in m))
    a, b = runs["promoted"], runs["storage"]
    diffs = [abs(x - y) for x, y in zip(a["train_loss"], b["train_loss"])]
    result = dict(
        max_train_loss_diff=max(diffs), mean_train_loss_diff=statistics.fmean(diffs),
        final_val_diff=b["summary"]["final_val_loss"] - a["summary"]["final_val_loss"],
        tail_mean_diff=b["summary"]["tail_mean_val_loss"] - a["summary"]["tail_mean_val_loss"],
        loss_drop=a["train_loss"][0] - a["train_loss"][-1],
        tokens_per_s={k: r["tokens_per_s"] for k, r in runs.items()})
    meta = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"), device=torch.cuda.get_device_name(),
                torch=torch.__version__, python=platform.python_version(), commit=args.commit, args=vars(args))
    if args.out:
        Path(args.out).write_text(json.dumps(dict(meta=meta, result=result, runs=runs), indent=1) + "\n")
    print(f"# dout policy, {meta['device']}, {args.preset} B{args.batch} T{args.seq}, {args.steps} steps")
    print(f"training loss fell by {result['loss_drop']:.3f}; |storage - promoted| per step: "
          f"max {result['max_train_loss_diff']:.4f}, mean {result['mean_train_loss_diff']:.4f}")
    print(f"final held-out loss: storage - promoted = {result['final_val_diff']:+.4f}; "
          f"tail-mean {result['tail_mean_diff']:+.4f}")
    print(f"tokens/s: promoted {result['tokens_per_s']['promoted']:,.0f}, storage {result['tokens_per_s']['storage']:,.0f}")


if __name__ == "__main__":
    main()
