"""Training throughput per GPU under DDP: the CUDA-graph step against the eager step, arms interleaved.

Run under torchrun, one process per GPU; every rank trains each arm on its own fixed token batch
(the paper's per-GPU microbatch of the preset), so tokens/s per GPU = B T / step time, and the
global batch grows with the world size (weak scaling, as in data-parallel pre-training). An arm
is a (method, step) pair; all arms are built and warmed up first, then timed round by round
(arm 1, arm 2, ..., arm 1, ...), so a drifting host slows every arm alike.

    torchrun --nproc_per_node 2 benchmarks/multi_gpu/ddp_throughput.py --presets 100m --out ddp2.json
    python benchmarks/multi_gpu/ddp_throughput.py --presets 100m --out ddp1.json   # 1 GPU: no DDP
    python benchmarks/multi_gpu/ddp_throughput.py --table ddp1.json ddp2.json      # scaling table
    torchrun --nproc_per_node 2 benchmarks/multi_gpu/ddp_throughput.py --cpu --presets tiny \\
        --batch 2 --seq 32 --vocab 512 --rounds 2 --out cpu.json                     # CPU, gloo, eager

One process is the single-GPU trainer's step (no DDP wrapper), the reference of the scaling
efficiency: tokens/s per GPU at N GPUs / tokens/s at 1 GPU, per arm.

Measured per arm (rank 0 reports; the step time is the slowest rank's, all-reduced with max):
- step time: host wall time of a whole step (batch copy, replays or launches, the all-reduce,
  the read-back of the loss), median over rounds;
- peak memory per GPU: the arm's resident state (parameters, gradients, optimizer state) plus
  the largest growth of allocated memory while it warmed up (its first forward and backward; the
  graph step re-creates those activations in its pool), on rank 0.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.distributed as dist

from mhar_probe import __version__
from mhar_probe.bench.arms import warm_up_arms
from mhar_probe.provenance import benchmark_record, software
from mhar_probe.compiled import compile_sublayers
from mhar_probe.distributed import init_distributed, shutdown
from mhar_probe.loss import next_token_cross_entropy
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.routing import set_routing_backend
from mhar_probe.parallel import clip_grad_norm, wrap_ddp
from mhar_probe.step import EagerStep, GraphStep

#: the paper's per-GPU microbatches (batch, sequence)
PAPER = {"100m": (8, 2048), "350m": (4, 1024), "1b": (2, 1024)}


class Arm:
    """One (method, step) pair: model, optimizer, DDP wrapper (several processes) and step."""

    def __init__(self, method: str, step: str, preset: str, args: argparse.Namespace, info, pool, stream) -> None:
        torch.manual_seed(0)
        self.method, self.step_kind, self.label = method, step, f"{method}/{step}"
        cuda = info.device.type == "cuda"
        overrides = dict(residual_method=method, vocab_size=args.vocab, max_position_embeddings=max(2 * args.seq, 256))
        if method != "baseline":
            overrides["routing_heads"] = args.heads
        self.config = MHARConfig.from_preset(preset, **overrides)
        backend = "triton" if cuda else "eager"
        self.model = set_routing_backend(MHARForCausalLM(self.config), backend).to(info.device)
        if cuda and args.compile_sublayers:
            compile_sublayers(self.model)
        graphs = step == "graph"
        self.ddp = (wrap_ddp(self.model, info, for_graphs=graphs, stream=stream if graphs else None)
                    if info.world_size > 1 else None)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        forward = self.ddp or self.model
        loss_kernel = "fused" if cuda else "torch"

        def objective(rows):  # [B, T+1] -> (objective, cross-entropy, extras)
            with torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=cuda, cache_enabled=not graphs):
                logits = forward(rows[:, :-1], use_cache=False).logits  # [B, T, V]
            ce = next_token_cross_entropy(logits, rows[:, 1:], loss_kernel)
            return ce, ce, {}

        params = list(self.model.parameters())
        if graphs:
            self.step = GraphStep(objective=objective, params=params, optimizer=self.opt, grad_clip=1.0,
                                  device=info.device, pool=pool, ddp=self.ddp, stream=stream)
        else:
            self.step = EagerStep(objective=objective, params=params, optimizer=self.opt, grad_clip=1.0,
                                  device=info.device, clip=clip_grad_norm)  # (one micro-batch: DDP syncs it)
        self.times: list[float] = []
        self.peak_growth = 0

    def resident_bytes(self) -> int:
        ts = [*self.model.parameters(), *(p.grad for p in self.model.parameters() if p.grad is not None),
              *(t for st in self.opt.state.values() for t in st.values() if isinstance(t, torch.Tensor))]
        return sum(t.numel() * t.element_size() for t in ts if t.device.type == "cuda")


def slowest(seconds: float, info) -> float:
    """The largest of the ranks' values (a step is as slow as its slowest rank)."""
    if info.world_size == 1:
        return seconds
    t = torch.tensor([seconds], dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def bench_preset(preset: str, args: argparse.Namespace, info) -> list[dict]:
    cuda = info.device.type == "cuda"
    B, T = PAPER.get(preset, (args.batch, args.seq))
    B, T = args.batch or B, args.seq or T
    args.seq = T
    g = torch.Generator().manual_seed(1 + info.rank)  # each rank its own batch
    batch = torch.randint(0, args.vocab, (B, T + 1), generator=g)  # [B, T+1] on the host, as in training
    pool = torch.cuda.graph_pool_handle() if cuda else None
    stream = torch.cuda.Stream(info.device) if cuda else None
    steps = [s for s in args.steps if cuda or s == "eager"]
    arms = warm_up_arms((functools.partial(Arm, method, step, preset, args, info, pool, stream)
                         for method in args.methods for step in steps), batch, cuda)
    for r in range(args.warmup + args.rounds):
        for arm in arms:
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            arm.step([batch], lr=1e-4)  # reads the loss back: the step has finished on the device
            dt = slowest(time.perf_counter() - t0, info)
            if r >= args.warmup:
                arm.times.append(dt)
    rows = []
    for arm in arms:
        median = statistics.median(arm.times)
        row = dict(preset=preset, method=arm.method, step=arm.step_kind, arm=arm.label, world_size=info.world_size,
                   ddp=info.world_size > 1, batch_per_gpu=B, seq=T, compile_sublayers=bool(cuda and args.compile_sublayers),
                   routing_heads=arm.config.routing_heads if arm.method != "baseline" else None,
                   params=sum(p.numel() for p in arm.model.parameters()), step_s=arm.times, step_s_median=median,
                   tokens_per_s_per_gpu=B * T / median, tokens_per_s_total=B * T * info.world_size / median)
        if cuda:
            row["peak_memory_gb"] = (arm.resident_bytes() + arm.peak_growth) / 1e9
        rows.append(row)
    del arms
    import gc

    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return rows


def table(paths: list[str]) -> str:
    """A markdown table of the rows in `paths` (JSON files of this script), with scaling
    efficiency against the one-process row of the same preset and arm."""
    rows = [r for p in paths for r in json.loads(Path(p).read_text())["rows"]]
    one = {(r["preset"], r["arm"]): r["tokens_per_s_per_gpu"] for r in rows if r["world_size"] == 1}
    out = ["| preset | arm | GPUs | tokens/s per GPU | tokens/s total | scaling eff. | peak mem/GPU (GB) |",
           "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["preset"], r["arm"], r["world_size"])):
        ref = one.get((r["preset"], r["arm"]))
        eff = f"{r['tokens_per_s_per_gpu'] / ref:.2f}" if ref else "n/a (no 1-GPU row)"
        mem = f"{r['peak_memory_gb']:.1f}" if r.get("peak_memory_gb") is not None else "n/a"
        out.append(f"| {r['preset']} | {r['arm']} | {r['world_size']} | {r['tokens_per_s_per_gpu']:,.0f} | "
                   f"{r['tokens_per_s_total']:,.0f} | {eff} | {mem} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["100m"])
    p.add_argument("--methods", nargs="+", default=["baseline", "mhar"])
    p.add_argument("--steps", nargs="+", default=["graph", "eager"], choices=("graph", "eager"))
    p.add_argument("--heads", type=int, default=8, help="routing heads H of the routed methods")
    p.add_argument("--batch", type=int, default=None, help="per-GPU batch (default: the paper's microbatch)")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--compile-sublayers", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--cpu", action="store_true", help="gloo on the CPU, eager step only (checks the logic)")
    p.add_argument("--out", default=None, help="write the results JSON here (rank 0)")
    p.add_argument("--table", nargs="+", default=None, help="print the scaling table of these JSON files and exit")
    args = p.parse_args()
    if args.table:
        print(table(args.table))
        return
    info = init_distributed("cpu" if args.cpu else "cuda")
    try:
        rows = []
        for preset in args.presets:
            got = bench_preset(preset, args, info)
            rows += got
            if info.is_main:
                for r in got:
                    print(f"{r['preset']:>5} {r['arm']:<16} world {r['world_size']}  "
                          f"{r['tokens_per_s_per_gpu']:>10,.0f} tok/s/GPU  "
                          f"peak {r.get('peak_memory_gb', float('nan')):.1f} GB", flush=True)
        if info.is_main:
            provenance = benchmark_record(info.device)  # the stamp's commit on a device copy, which has no git
            meta = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        commit=(provenance["code"]["commit"] or "")[:7] or None,
                        package_version=__version__, software=software(), world_size=info.world_size,
                        provenance=provenance,
                        device=torch.cuda.get_device_name() if info.device.type == "cuda" else "cpu",
                        argv=sys.argv[1:])
            if args.out:
                Path(args.out).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    finally:
        shutdown(info)


if __name__ == "__main__":
    main()
