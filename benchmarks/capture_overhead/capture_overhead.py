"""Capture overhead over a plain no-grad forward (issue 4's target: <= 10% with token means).

Same model, same batches, interleaved repeats; reports the median seconds per batch of
  forward   model(ids) under no_grad
  weights   capture_routing(..., probes=False)   token means / halves / squares from hook_weights
  probes    capture_routing(..., probes=True)    + slice-KL (S slices, R matched-norm draws), collinearity
as tokens/s and overhead ratios, and the peak memory of each mode.

    PYTHONPATH=. python benchmarks/capture_overhead/capture_overhead.py --preset tiny --batch 8 --seq 128 \
        --repeats 3 --out benchmarks/capture_overhead/cpu_tiny.json                                  # CPU
    PYTHONPATH=. python benchmarks/capture_overhead/capture_overhead.py --preset 100m --batch 4 --seq 2048 \
        --dtype bfloat16 --backend triton --out benchmarks/capture_overhead/h200_100m_triton.json    # GPU
    python benchmarks/capture_overhead/capture_overhead.py --table FILE...    # results.md's table of the files

Results: benchmarks/capture_overhead/results.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

from mhar_probe.capture import capture_routing
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.routing import choose_backend, set_routing_backend
from mhar_probe.provenance import benchmark_record


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB, process lifetime peak


HEADER = ("| routing backend | forward tokens/s | weights tokens/s | weights overhead | probes tokens/s | "
          "probes overhead | peak MiB: forward / weights / probes |\n|---|---:|---:|---:|---:|---:|---|")


def table_row(doc: dict) -> str:
    """One results file as a row of results.md's tables."""
    tps, over, peak = doc["tokens_per_s"], doc["overhead_vs_forward"], doc["peak_mib"]
    return (f"| {doc['backend']} | {tps['forward']:,.0f} | {tps['weights']:,.0f} | **{over['weights']:+.1%}** | "
            f"{tps['probes']:,.0f} | {over['probes']:+.0%} | "
            + " / ".join(f"{peak[m]:,.0f}" for m in ("forward", "weights", "probes")) + " |")


def print_table(paths: list[str]) -> int:
    """`--table FILE...`: the files as one markdown table (results.md's), or one message and 2."""
    try:
        docs = [json.loads(Path(p).read_text()) for p in paths]
        rows = [table_row(d) for d in docs]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"capture_overhead --table: not a capture_overhead results file ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        return 2
    print("\n".join([HEADER, *rows]))
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--method", default="mhar")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batches", type=int, default=4, help="batches per timed call")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--out", default=None, help="JSON results file")
    ap.add_argument("--commit", default=None,
                    help="the commit measured, for a copied tree with neither a stamp nor git history")
    ap.add_argument("--table", nargs="+", metavar="FILE",
                    help="only print results.md's table of these results files (nothing is measured)")
    args = ap.parse_args()
    if args.table:
        sys.exit(print_table(args.table))

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    backend = choose_backend(device, args.backend)  # triton on CUDA, eager elsewhere, unless given
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset(args.preset, residual_method=args.method)
    model = set_routing_backend(MHARForCausalLM(cfg), backend).to(device=device, dtype=getattr(torch, args.dtype)).eval()
    with torch.no_grad():
        for site in model.sites:
            site.query.normal_(std=0.5)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=g).to(device)
               for _ in range(args.batches)]
    tokens = args.batches * args.batch * args.seq

    def forward() -> None:
        with torch.no_grad():
            for b in batches:
                model(b, use_cache=False)

    modes = {
        "forward": forward,
        "weights": lambda: capture_routing(model, batches, probes=False, progress=False),
        "probes": lambda: capture_routing(model, batches, probes=True, draws=args.draws, progress=False),
    }
    times: dict[str, list[float]] = {k: [] for k in modes}
    peaks: dict[str, float] = {}
    for name, fn in modes.items():  # warm-up (and peak memory of each mode)
        _peak_reset(device)
        fn()
        _sync(device)
        peaks[name] = _peak(device)
    for _ in range(args.repeats):
        for name, fn in modes.items():
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "benchmark": "capture_overhead",
        "provenance": benchmark_record(device, args.commit),  # time, commit, software, card
        "device": torch.cuda.get_device_name() if device.type == "cuda" else f"cpu x{torch.get_num_threads()}",
        "preset": args.preset, "method": args.method, "backend": backend, "dtype": args.dtype,
        "batch": args.batch, "seq": args.seq, "batches_per_call": args.batches, "repeats": args.repeats,
        "draws": args.draws,
        "median_seconds": med,
        "tokens_per_s": {k: tokens / v for k, v in med.items()},
        "overhead_vs_forward": {k: med[k] / med["forward"] - 1 for k in ("weights", "probes")},
        "peak_mib": peaks,
        "peak_note": "CUDA max_memory_allocated per mode" if device.type == "cuda"
                     else "CPU ru_maxrss: process lifetime peak after each mode (monotonic)",
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
