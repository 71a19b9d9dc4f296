"""Training throughput (tokens/s) and peak memory per method, one process, one run.

Every method trains on the same random token batch with the same optimizer step (AdamW,
clipping), so the ratios printed at the end are measured in the same run. On CUDA the step
runs under bf16 autocast and times come from CUDA events (median over timed steps after
warm-up); on CPU from perf_counter.

    python benchmarks/train_throughput.py --preset tiny --batch 8 --seq 128          # CPU
    python benchmarks/train_throughput.py --preset 100m --batch 8 --seq 2048 \\
        --vocab 151936 --methods baseline mhar --backend eager                        # paper's microbatch

With --interleave every method's model and optimizer are built first and the timed steps go round
by round (baseline, mhar, ..., baseline, mhar, ...): a host whose speed drifts during the process
then slows every arm alike (measured on the GPU machine: the same optimizer code's host time grew
22 -> 28 -> 32 ms over three methods run one after another). Each arm's ratio is the median over
rounds of baseline step / arm step within the round. A `METHOD/VARIANT` arm shares METHOD's model
and optimizer (the kernels differ, the function does not). Peak memory there is the arm's resident
state (parameters and optimizer state) plus the peak growth during its own steps.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from mhar_probe import __version__
from mhar_probe.bench.routing import VARIANTS as ROUTING_VARIANTS
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.config import METHODS, PRESETS

PAPER_BASELINE_100M_TOK_S = 113.9e3  # H100, Table "cost" (absolute baseline median)


# "METHOD/VARIANT" runs METHOD with another state of the triton kernels, for ratios measured in
# the same process: VARIANT is a name of mhar_probe.bench.routing.VARIANTS without its "triton-"
# (e.g. stackbwd = the backward before the 4-bytes/pair one, prev = the kernels of 2026-11-22,
# bf16dout = the opt-in bf16 douts; that table says what each changes).
VARIANTS = ("", *(name.removeprefix("triton-") for name in ROUTING_VARIANTS))


def split_arm(name: str, backend: str) -> tuple[str, str]:
    """"METHOD[/VARIANT]" -> (method, variant), refusing unknown variants and variants off triton."""
    method, _, variant = name.partition("/")
    if variant not in VARIANTS:
        raise SystemExit(f"unknown kernel variant {variant!r} in {name!r}; choose from "
                         f"{', '.join(v for v in VARIANTS if v)}")
    if variant and backend != "triton":
        raise SystemExit(f"{name!r}: kernel variants need --backend triton (got {backend})")
    return method, variant


def check_names(args: argparse.Namespace) -> None:
    """Refuse an unknown preset, method or kernel variant before any arm is built or timed."""
    if args.preset not in PRESETS:
        raise SystemExit(f"unknown preset {args.preset!r}; choose from {', '.join(PRESETS)}")
    for name in args.methods:
        method, _ = split_arm(name, args.backend)
        if method not in METHODS:
            raise SystemExit(f"unknown method {method!r} in {name!r}; choose from {', '.join(METHODS)}")


def build(method: str, args: argparse.Namespace, device: torch.device):
    """(model, AdamW) of one method, seeded alike for every method."""
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset(args.preset, residual_method=method, vocab_size=args.vocab,
                                 routing_backend=args.backend, max_position_embeddings=max(2 * args.seq, 256))
    model = MHARForCausalLM(cfg).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)


def batch_tokens(args: argparse.Namespace, device: torch.device) -> torch.Tensor:  # [B, T + 1]
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(device)


def train_step(model, opt, tokens: torch.Tensor) -> None:
    """One optimizer step on `tokens`: bf16 autocast on CUDA, cross-entropy, clipping, AdamW."""
    cuda = tokens.device.type == "cuda"
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=cuda):
        logits = model(tokens[:, :-1], use_cache=False).logits
    loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def bench_method(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    from mhar_probe.bench.routing import kernel_variant

    method, variant = split_arm(name, args.backend)
    if variant:
        with kernel_variant(f"triton-{variant}"):
            result = _bench_method(method, args, device)
    else:
        result = _bench_method(method, args, device)
    result["method"] = name
    return result


def _bench_method(method: str, args: argparse.Namespace, device: torch.device) -> dict:
    model, opt = build(method, args, device)
    tokens = batch_tokens(args, device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def step() -> None:
        train_step(model, opt, tokens)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    peak = (torch.cuda.max_memory_allocated() if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    result = dict(method=method, params=sum(p.numel() for p in model.parameters()),
                  step_s_median=median, tokens_per_s=args.batch * args.seq / median,
                  peak_memory_gb=peak / 1e9, peak_memory_kind="cuda_max_allocated" if cuda else "process_max_rss")
    del model, opt
    return result


def interleaved(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Every arm's step, round by round (see the module docstring); one row per arm."""
    from mhar_probe.bench.routing import kernel_variant

    arms = list(dict.fromkeys(args.methods))  # in order, once each
    variants = {name: split_arm(name, args.backend) for name in arms}  # refused before anything is built
    cuda = device.type == "cuda"
    tokens = batch_tokens(args, device)
    built: dict[str, tuple] = {}
    for method, _ in variants.values():
        if method not in built:
            built[method] = build(method, args, device)

    def resident(model, opt) -> int:
        ts = list(model.parameters()) + [t for st in opt.state.values() for t in st.values()
                                         if isinstance(t, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in ts if t.device.type == "cuda")

    times: dict[str, list[float]] = {a: [] for a in arms}
    growth = {a: 0 for a in arms}
    for r in range(args.warmup + args.steps):
        for name in arms:
            method, variant = variants[name]
            model, opt = built[method]
            with kernel_variant(f"triton-{variant}" if variant else "triton"):
                if cuda:
                    torch.cuda.synchronize()
                    before = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    train_step(model, opt, tokens)
                    end.record()
                    torch.cuda.synchronize()
                    dt = start.elapsed_time(end) / 1e3
                    if r >= args.warmup:  # warm-up steps also create the optimizer state
                        growth[name] = max(growth[name], torch.cuda.max_memory_allocated() - before)
                else:
                    t0 = time.perf_counter()
                    train_step(model, opt, tokens)
                    dt = time.perf_counter() - t0
            if r >= args.warmup:
                times[name].append(dt)
    rows = []
    base = times.get("baseline")
    for name in arms:
        model, opt = built[variants[name][0]]
        median = statistics.median(times[name])
        row = dict(method=name, params=sum(p.numel() for p in model.parameters()), step_s_median=median,
                   tokens_per_s=args.batch * args.seq / median, step_s=times[name])
        if cuda:
            row.update(peak_memory_gb=(resident(model, opt) + growth[name]) / 1e9,
                       peak_memory_kind="resident + step growth (interleaved)")
        else:
            row.update(peak_memory_gb=None, peak_memory_kind="not measured (interleaved, CPU)")
        if base:
            per_round = sorted(b / t for b, t in zip(base, times[name]))
            q = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else per_round * 3
            row.update(vs_baseline_round_median=statistics.median(per_round),
                       vs_baseline_round_iqr=[q[0], q[2]])
        rows.append(row)
    return rows


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--methods", nargs="+", default=["baseline", "hyper", "attnres", "mhar", "mhar_hw", "delta"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--backend", default="eager")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="write the results JSON here")
    p.add_argument("--interleave", action="store_true",
                   help="build every arm first and time their steps round by round (drifting hosts)")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit(f"--steps must be at least 1 and --warmup at least 0 (got {args.steps}, {args.warmup})")
    check_names(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = interleaved(args, device) if args.interleave else [bench_method(m, args, device) for m in args.methods]
    base = next((r["tokens_per_s"] for r in rows if r["method"] == "baseline"), None)
    meta = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name() if device.type == "cuda" else cpu_name(),
                cpu_threads=torch.get_num_threads(), torch=torch.__version__, python=platform.python_version(),
                package=__version__, args=vars(args))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(dict(meta=meta, results=rows), indent=2) + "\n")
    print(f"# {meta['device']}  torch {meta['torch']}  {args.preset} B{args.batch} T{args.seq} "
          f"V{args.vocab} backend={args.backend}  {meta['date']}")
    print("| method | params | tokens/s | vs baseline | peak mem (GB) |")
    print("|---|---:|---:|---:|---:|")
    for i, r in enumerate(rows):  # pairwise: against the latest baseline run before this row
        near = next((b["tokens_per_s"] for b in rows[i::-1] if b["method"] == "baseline"), base)
        ratio = f"{r['tokens_per_s'] / near:.2f}x" if near else "-"
        if "vs_baseline_round_median" in r:  # interleaved: the median of per-round ratios, IQR
            lo, hi = r["vs_baseline_round_iqr"]
            ratio = f"{r['vs_baseline_round_median']:.2f}x ({lo:.2f}-{hi:.2f})"
        peak = "-" if r["peak_memory_gb"] is None else f"{r['peak_memory_gb']:.2f}"
        print(f"| {r['method']} | {r['params']:,} | {r['tokens_per_s']:,.0f} | {ratio} | {peak} |")
    if device.type == "cuda" and args.preset == "100m" and base:
        print(f"paper baseline at 100M on an H100: {PAPER_BASELINE_100M_TOK_S:,.0f} tokens/s; "
              f"ours {base:,.0f} ({base / PAPER_BASELINE_100M_TOK_S:.2f}x)")


if __name__ == "__main__":
    main()
