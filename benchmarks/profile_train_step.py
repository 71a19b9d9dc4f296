"""Where a training step's time goes: device time per kernel category, against the step's wall time.

For each preset and method: a few warm-up steps, CUDA-event timing of a few more, then one step
under torch.profiler. Kernel device time is grouped into categories (routing kernels, matmuls,
attention, copies/elementwise, optimizer, other); `busy` is their sum and `idle` the wall time
the GPU was not running a kernel, which shows whether the step is host-bound.

    PYTHONPATH=. python benchmarks/profile_train_step.py --presets 100m --methods baseline mhar \\
        --out profile.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timezone

import torch
import torch.nn.functional as F

from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.config import METHODS, PRESETS

PHASES = ("forward+loss", "backward", "optimizer")
MICROBATCH = {"100m": (8, 2048), "350m": (4, 1024), "1b": (2, 1024), "124m": (8, 2048), "tiny": (8, 128)}

CATEGORIES = [  # (category, substrings of the kernel name), first match wins
    ("routing", ("route_fwd", "stack_bwd", "dqdg", "route_bwd", "attnres", "stack_gather", "pair_e")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas", "wgmma", "splitk")),
    ("optimizer", ("multi_tensor", "adam", "foreach", "fused_adam")),
    ("norm/softmax/loss", ("norm", "softmax", "cross_entropy", "nll", "log_softmax", "reduce")),
    ("copy/elementwise", ("copy", "elementwise", "cat", "fill", "index", "embedding", "vectorized")),
]


def category(name: str) -> str:
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def _annotation(evt) -> bool:
    """User annotations (e.g. 'Optimizer.step#AdamW.step') span kernels; they are not kernels."""
    name = getattr(evt, "key", None) or evt.name
    return bool(getattr(evt, "is_user_annotation", False)) or "#" in name


def gpu_gaps(prof, top: int = 10) -> dict:
    """Idle stretches of the GPU inside the profiled step: between consecutive kernels."""
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA and not _annotation(e)), key=lambda k: k[0])
    gaps, end, prev = [], None, None
    for s0, e0, name in ks:
        if end is not None and s0 > end:
            gaps.append(((s0 - end) / 1e3, prev[:50], name[:50]))
        if end is None or e0 > end:
            end, prev = e0, name
    total = sum(g for g, _, _ in gaps)
    span = (ks[-1][1] - ks[0][0]) / 1e3 if ks else 0.0
    return dict(span_ms=span, idle_ms=total, idle_over_50us_ms=sum(g for g, _, _ in gaps if g > 0.05),
                largest=[list(g) for g in sorted(gaps, key=lambda g: -g[0])[:top]])


def check_arguments(args: argparse.Namespace) -> None:
    """One message for what the user can fix, before any model is built: no GPU, an unknown
    preset, method or kernel variant (METHOD/VARIANT)."""
    from mhar_probe.bench.routing import VARIANTS

    if not torch.cuda.is_available():
        raise SystemExit("profile_train_step.py profiles a training step on a CUDA GPU; none is visible here")
    for preset in args.presets:
        if preset not in PRESETS:
            raise SystemExit(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    for name in args.methods:
        method, _, variant = name.partition("/")
        if method not in METHODS:
            raise SystemExit(f"unknown method {method!r} in {name!r}; choose from {', '.join(METHODS)}")
        if variant and f"triton-{variant}" not in VARIANTS:
            raise SystemExit(f"unknown kernel variant {variant!r} in {name!r}; choose from "
                             + ", ".join(v.removeprefix("triton-") for v in VARIANTS))


def profile_one(preset: str, method: str, backend: str, steps: int, bf16_sources: bool) -> dict:
    """METHOD or METHOD/VARIANT (a kernel variant of benchmarks/train_throughput.py, e.g. mhar/stackbwd)."""
    from mhar_probe.bench.routing import kernel_variant

    base_method, _, variant = method.partition("/")
    with kernel_variant(f"triton-{variant}" if variant else "triton"):
        return _profile_one(preset, base_method, backend, steps, bf16_sources) | dict(method=method)


def _profile_one(preset: str, method: str, backend: str, steps: int, bf16_sources: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    B, T = MICROBATCH[preset]
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset(preset, residual_method=method, vocab_size=151936,
                                 routing_backend=backend, max_position_embeddings=max(2 * T, 256))
    dev = torch.device("cuda")
    model = MHARForCausalLM(cfg).to(dev)
    if bf16_sources:  # experiment: the embedding joins the depth history in the autocast dtype
        inner = model.model
        orig = inner._routed

        def routed(emb, *a):
            return orig(emb.to(torch.bfloat16), *a)
        inner._routed = routed
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.randint(0, 151936, (B, T + 1), device=dev)

    def step(marks=None):  # marks: per phase boundary, (host perf_counter, CUDA event)
        def mark():
            if marks is not None:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                marks.append((time.perf_counter(), ev))
        mark()
        with record_function("phase/forward"), torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1], use_cache=False).logits
        with record_function("phase/loss"):
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        mark()
        with record_function("phase/backward"):
            loss.backward()
        mark()
        with record_function("phase/optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        mark()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    host_phase: dict[str, list[float]] = {k: [] for k in PHASES}
    gpu_phase: dict[str, list[float]] = {k: [] for k in PHASES}
    for _ in range(steps):
        marks: list = []
        step(marks)
        torch.cuda.synchronize()
        times.append(marks[0][1].elapsed_time(marks[-1][1]))
        for k, (a, b) in zip(PHASES, zip(marks, marks[1:])):
            host_phase[k].append((b[0] - a[0]) * 1e3)  # host time to queue the phase (no sync inside)
            gpu_phase[k].append(a[1].elapsed_time(b[1]))  # GPU time between the phase's boundaries
    peak = torch.cuda.max_memory_allocated() / 1e9
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        step()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for evt in prof.key_averages():
        t = getattr(evt, "self_device_time_total", 0) or getattr(evt, "self_cuda_time_total", 0)
        if t and evt.device_type == torch.autograd.DeviceType.CUDA and not _annotation(evt):
            kernels[evt.key[:90]] = kernels.get(evt.key[:90], 0.0) + t / 1e3
    cpu_ops: dict[str, float] = {}
    for evt in prof.key_averages():
        if evt.device_type == torch.autograd.DeviceType.CPU and evt.self_cpu_time_total:
            cpu_ops[evt.key[:70]] = evt.self_cpu_time_total / 1e3
    cpu_top = dict(sorted(cpu_ops.items(), key=lambda kv: -kv[1])[:15])
    gaps = gpu_gaps(prof)
    cats: dict[str, float] = {}
    for k, v in kernels.items():
        cats[category(k)] = cats.get(category(k), 0.0) + v
    step_ms = statistics.median(times)
    busy = sum(kernels.values())
    top = dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:25])
    del model, opt
    torch.cuda.empty_cache()
    return dict(preset=preset, method=method, backend=backend, bf16_sources=bf16_sources, B=B, T=T,
                step_ms=step_ms, tokens_per_s=B * T / step_ms * 1e3, peak_gb=peak,
                host_phase_ms={k: statistics.median(v) for k, v in host_phase.items()},
                gpu_phase_ms={k: statistics.median(v) for k, v in gpu_phase.items()},
                busy_ms=busy, categories=dict(sorted(cats.items(), key=lambda kv: -kv[1])),
                top_kernels=top, cpu_self_ms_top=cpu_top, cpu_self_ms_total=sum(cpu_ops.values()),
                gaps=gaps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["100m"])
    ap.add_argument("--methods", nargs="+", default=["baseline", "mhar"],
                    help="methods, or METHOD/VARIANT for a kernel variant (e.g. mhar/stackbwd)")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--bf16-sources", action="store_true", help="also run the routed methods with bf16 sources")
    ap.add_argument("--out", default=None)
    ap.add_argument("--show", type=int, default=8, help="rows of each list to print")
    args = ap.parse_args()
    check_arguments(args)
    import triton

    meta = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    rows = []
    for preset in args.presets:
        for method in args.methods:
            variants = [False] + ([True] if args.bf16_sources and method != "baseline" else [])
            for bf in variants:
                r = profile_one(preset, method, args.backend, args.steps, bf)
                rows.append(r)
                base = next((x for x in rows if x["preset"] == preset and x["method"] == "baseline"), None)
                ratio = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
                print(f"{preset:5s} {method:9s}{' bf16src' if bf else '':8s} step {r['step_ms']:8.2f} ms "
                      f"({ratio:4.2f}x base)  busy {r['busy_ms']:8.2f} ms  peak {r['peak_gb']:6.2f} GB  "
                      + "  ".join(f"{k} {v:.2f}" for k, v in r["categories"].items()), flush=True)
                g = r["gaps"]
                print("      host / GPU ms per phase: " + "  ".join(
                    f"{k} {r['host_phase_ms'][k]:.1f} / {r['gpu_phase_ms'][k]:.1f}" for k in PHASES))
                print(f"      GPU span {g['span_ms']:.2f} ms, idle {g['idle_ms']:.2f} ms "
                      f"({g['idle_over_50us_ms']:.2f} in gaps > 50 us); CPU self total "
                      f"{r['cpu_self_ms_total']:.1f} ms")
                for k, v in list(r["top_kernels"].items())[:args.show]:
                    print(f"      {v:8.3f} ms  {k}")
                for gap, a, b in g["largest"][:args.show]:
                    print(f"      gap {gap:7.3f} ms after {a} before {b}")
                for k, v in list(r["cpu_self_ms_top"].items())[:args.show]:
                    print(f"      cpu {v:7.3f} ms  {k}")
                if args.out:
                    json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
