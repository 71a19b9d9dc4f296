"""Training throughput: tokens/s, MFU, peak memory and GPU-busy fraction per method, arms interleaved.

Every arm (a method) trains on the same fixed token batch with the step `mhar train` uses
(`mhar_probe.step`: `GraphStep` by default on CUDA, `EagerStep` with --step eager): bf16
autocast, cross-entropy (`mhar_probe.loss`: the fused kernel by default on CUDA, as in training),
global-norm clipping at 1.0, AdamW; each layer's attention and MLP sublayer compiled
(`mhar_probe.compiled`: by default on CUDA, as in training; --no-compile-sublayers; a hyper-connection
model compiles each sublayer with its hyper-connection as one region, or with --hyper-compile
sublayers the sublayers alone, or both as two arms). All arms are built first, then
timed round by round (baseline, mhar, ..., baseline, mhar, ...), so that a drifting host slows
every arm alike; each arm's ratio is the median over rounds of baseline step / arm step.

    python benchmarks/train_throughput/train_throughput.py --presets 100m 350m 1b \\
        --methods baseline attnres mhar --rounds 8 --profile --out results.json   # one GPU
    python benchmarks/train_throughput/train_throughput.py --presets 100m --methods baseline mhar \\
        --routing-backward fold gather --profile   # the stack's two backwards side by side
    python benchmarks/train_throughput/train_throughput.py --presets 100m --batch 32 --seq 2048 \\
        --vocab 8192 --methods baseline hyper --hyper-compile region region-pointwise sublayers --rounds 3
        # hyper-connections compiled as one region per sublayer ("hyper"), the same with the
        # stream mixing lowered to pointwise work ("hyper/region-pointwise"), against the
        # sublayers alone with the wiring eager ("hyper/sublayers", how it ran before)
    python benchmarks/train_throughput/train_throughput.py --presets tiny --batch 8 --seq 128 \\
        --vocab 4096 --step eager --backend eager                                     # CPU

Measured per arm:
- step time: as the trainer steps (`--overlap`, the default; `mhar_probe.step.choose_overlap_steps`),
  OVERLAP_STEPS steps back to back per round, each launched before the previous one is read
  back: the host wall time from the first step's read-back to the last's over the steps between,
  so the host's time between steps (batch copy, learning rate, first launch) hides behind the
  device's work; with `--no-overlap` (how this table was measured before 2026-11-27) one step
  per round, from a synchronised device to its read-back, host gaps included; median over
  rounds; tokens/s = B T / step time. With --overlap each round also times one synchronised
  step (`step_s_synced`), and `overlap_speedup` is the median over rounds of synced / overlapped;
- MFU: training FLOPs per token (`mhar_probe.flops`, LM head included) x tokens/s over the GPU's
  dense bf16 peak (H100 / H200 SXM: 989 TFLOP/s);
- peak memory: the arm's resident state (parameters, gradients, optimizer state) plus the
  largest growth of allocated memory during its first eager forward and backward (the graph
  step's warm-up, whose activations the captured step re-creates in its pool);
- with --profile, one more step under torch.profiler: the union of its kernel intervals (busy
  time) over the median unprofiled step (`busy_fraction_of_step`, the table's "GPU busy"; 1.0:
  the GPU never waits for the host), over the profiled step's own wall (`busy_fraction`, which
  the profiler's start and stop lengthen) and over its kernels' span; kernel time by category
  (routing kernels, matmuls, attention, optimizer, the fused loss, compiled sublayers, ...).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from mhar_probe import __version__
from mhar_probe.bench.arms import warm_up_arms
from mhar_probe.provenance import benchmark_record, git_commit, software
from mhar_probe.compiled import HYPER_COMPILES, choose_compile_sublayers, compile_sublayers
from mhar_probe.flops import flops_per_token
from mhar_probe.kernels import KernelConfig
from mhar_probe.kernels.config import CHOICES, ROUTING_DOUTS, STACK_BACKWARDS
from mhar_probe.kernels.route.fwd import ROW_NORMS_STORED
from mhar_probe.loss import LOSS_KERNELS, choose_loss_kernel, next_token_cross_entropy
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.config import METHODS, PRESETS
from mhar_probe.model.methods import REPLACEMENT_METHODS, routing_heads_of
from mhar_probe.model.routing import set_routing_backend
from mhar_probe.parallel import clip_grad_norm
from mhar_probe.step import EagerStep, GraphStep

#: the paper's per-GPU microbatches (batch, sequence) and its baseline's H100 tokens/s (Table "cost")
PAPER = {"100m": ((8, 2048), 113.9e3), "350m": ((4, 1024), 45.0e3), "1b": ((2, 1024), 19.7e3)}
PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12}
CATEGORIES = [  # (category, substrings of the kernel name), first match wins
    ("routing", ("route_fwd", "stack_bwd", "dqdg", "route_bwd", "attnres", "stack_gather", "stack_fold", "pair_e", "gather")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas", "wgmma", "splitk")),
    ("optimizer", ("multi_tensor", "adam", "foreach", "fused_adam")),
    ("loss (fused)", ("ce_fwd_kernel", "ce_bwd_kernel")),
    ("compiled sublayers", ("triton_poi_", "triton_per_", "triton_red_")),  # inductor's generated kernels
    ("norm/softmax/loss", ("norm", "softmax", "cross_entropy", "nll", "log_softmax", "reduce")),
    ("copy/elementwise", ("copy", "elementwise", "cat", "fill", "index", "embedding", "vectorized")),
]


def category(name: str) -> str:
    low = name.lower()
    return next((cat for cat, keys in CATEGORIES if any(k in low for k in keys)), "other")


class Arm:
    """One method's model, optimizer and step on the benchmark's batch, with the routing kernels'
    configuration `kernels` (current while the arm builds, captures and steps: a source stack
    takes the one current when it is built)."""

    def __init__(self, method: str, preset: str, args: argparse.Namespace, device: torch.device, pool,
                 kernels: KernelConfig | None = None, label: str | None = None,
                 hyper_compile: str = HYPER_COMPILES[0]) -> None:
        torch.manual_seed(0)
        self.method = method
        self.kernels = kernels or KernelConfig()
        self.label = label or method
        self.hyper_compile = hyper_compile if method == "hyper" and args.compile_sublayers else None
        self.config = MHARConfig.from_preset(preset, residual_method=method, vocab_size=args.vocab,
                                             max_position_embeddings=max(2 * args.seq_len, 256))
        self.model = set_routing_backend(MHARForCausalLM(self.config), args.backend, self.kernels).to(device)
        if args.compile_sublayers:
            compile_sublayers(self.model, hyper=hyper_compile)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        cuda = device.type == "cuda"

        def objective(rows):  # [B, T+1] -> (objective, cross-entropy, extras)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda, cache_enabled=False):
                logits = self.model(rows[:, :-1], use_cache=False).logits
            ce = next_token_cross_entropy(logits, rows[:, 1:], args.loss_kernel)
            return ce, ce, {}

        params = list(self.model.parameters())
        if args.step == "graph":
            self.step = GraphStep(objective=objective, params=params, optimizer=self.opt, grad_clip=1.0,
                                  device=device, pool=pool)
        else:
            self.step = EagerStep(objective=objective, params=params, optimizer=self.opt, grad_clip=1.0,
                                  device=device, clip=clip_grad_norm)
        self.times: list[float] = []
        self.synced_times: list[float] = []  # one synchronised step per round (= times without --overlap)
        self.peak_growth = 0

    def resident_bytes(self) -> int:
        ts = [*self.model.parameters(), *(p.grad for p in self.model.parameters() if p.grad is not None),
              *(t for st in self.opt.state.values() for t in st.values() if isinstance(t, torch.Tensor))]
        return sum(t.numel() * t.element_size() for t in ts if t.device.type == "cuda")


#: steps timed back to back per round and arm with --overlap
OVERLAP_STEPS = 4


def timed_step(arm: Arm, batch: torch.Tensor, cuda: bool, overlap: bool) -> float:
    """Seconds per step: one step from a synchronised device to its read-back, or (overlap) the
    mean over OVERLAP_STEPS steps run as the trainer runs them, each launched before the previous
    one is read back, timed from the read-back of a step launched before them (so the first timed
    step is already queued) to the read-back of the last."""
    if cuda:
        torch.cuda.synchronize()
    if not overlap:
        t0 = time.perf_counter()
        arm.step([batch], lr=1e-4)  # reads the loss back: the step has finished on the device
        return time.perf_counter() - t0
    lead = arm.step.launch([batch], lr=1e-4)
    pending = arm.step.launch([batch], lr=1e-4)
    lead.result()
    t0 = time.perf_counter()
    for _ in range(OVERLAP_STEPS - 1):
        following = arm.step.launch([batch], lr=1e-4)
        pending.result()
        pending = following
    pending.result()
    return (time.perf_counter() - t0) / OVERLAP_STEPS


def profile_step(arm: Arm, batch: torch.Tensor, trace: str | None = None) -> dict:
    """One step under torch.profiler: kernel-interval union over wall time, kernel time by category;
    and, without the profiler, the device time between events around the step over its wall time."""
    from torch.profiler import ProfilerActivity, profile

    start, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    arm.step([batch], lr=1e-4)
    end_ev.record()
    end_ev.synchronize()
    event_wall = time.perf_counter() - t0
    device_ms = start.elapsed_time(end_ev)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        arm.step([batch], lr=1e-4)
        wall = time.perf_counter() - t0
    # kernels from the Chrome trace: `prof.events()` drops about half of a graph replay's kernels
    with tempfile.TemporaryDirectory() as tmp:
        path = trace or f"{tmp}/trace.json"
        prof.export_chrome_trace(path)
        events = json.loads(Path(path).read_text())["traceEvents"]
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events  # microseconds
                   if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, end, prev = 0.0, float("-inf"), ""
    cats: dict[str, float] = {}
    gaps: list[tuple[float, str, str]] = []
    for s, e, name in spans:
        busy += max(0.0, e - max(s, end))
        if s > end:
            gaps.append(((s - end) / 1e3, prev[:60], name[:60]))
        if e > end:
            end, prev = e, name
        cats[category(name)] = cats.get(category(name), 0.0) + (e - s) / 1e3
    gaps = sorted(gaps[1:], reverse=True)  # (the first "gap" is before the first kernel)
    idle = [g for g, _, _ in gaps]
    top: dict[str, list[float]] = {}
    for s, e, name in spans:
        top.setdefault(name[:100], []).append((e - s) / 1e3)
    top_kernels = sorted(([sum(v), len(v), k] for k, v in top.items()), reverse=True)[:30]
    first = spans[0][0] if spans else 0.0
    return dict(device_ms_events=device_ms, wall_ms_events=event_wall * 1e3,
                device_fraction_events=device_ms / (event_wall * 1e3), kernel_sum_ms=sum(sum(v) for v in top.values()),
                top_kernels=top_kernels,
                wall_ms=wall * 1e3, busy_ms=busy / 1e3, busy_fraction=busy / 1e3 / (wall * 1e3),
                busy_fraction_of_span=busy / (end - spans[0][0]) if spans else 0.0,
                kernel_span_ms=(end - first) / 1e3 if spans else 0.0, kernels=len(spans),
                gaps=dict(count=len(idle), total_ms=sum(idle), over_10us=sum(g > 0.01 for g in idle),
                          median_us=1e3 * statistics.median(idle) if idle else 0.0, largest=gaps[:8]),
                categories_ms=dict(sorted(cats.items(), key=lambda kv: -kv[1])))


def bench_preset(preset: str, args: argparse.Namespace, device: torch.device) -> list[dict]:
    cuda = device.type == "cuda"
    (B, T), _ = PAPER.get(preset, ((args.batch, args.seq), None))
    B, T = args.batch or B, args.seq or T
    args.seq_len = T
    g = torch.Generator().manual_seed(1)
    batch = torch.randint(0, args.vocab, (B, T + 1), generator=g)  # [B, T+1] on the host, as in training
    pool = torch.cuda.graph_pool_handle() if cuda and args.step == "graph" else None
    # every arm warms up before any captures (see GraphStep.warm_up); its model carries `kernels`
    arms = warm_up_arms((functools.partial(Arm, method, preset, args, device, pool, kernels, label, hyper)
                         for method, kernels, label, hyper in arm_specs(args)), batch, cuda)
    for r in range(args.warmup + args.rounds):
        for arm in arms:
            dt = timed_step(arm, batch, cuda, args.overlap)
            synced = timed_step(arm, batch, cuda, False) if args.overlap else dt  # the same round, one step
            if r >= args.warmup:
                arm.times.append(dt)
                arm.synced_times.append(synced)
    name = torch.cuda.get_device_name() if cuda else ""
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
    base = next((a for a in arms if a.method == "baseline"), None)
    rows = []
    for arm in arms:
        median = statistics.median(arm.times)
        tok_s = B * T / median
        flops = flops_per_token(arm.config, T, count_lm_head=True)["total"]
        row = dict(preset=preset, method=arm.method, arm=arm.label, batch=B, seq=T, step=args.step,
                   overlap=args.overlap, steps_per_round=OVERLAP_STEPS if args.overlap else 1,
                   backend=args.backend, loss_kernel=args.loss_kernel, compile_sublayers=args.compile_sublayers,
                   routing_douts=arm.kernels.routing_douts, routing_backward=arm.kernels.stack_backward,
                   fold_calls=arm.kernels.fold_calls, routing_forward=arm.kernels.forward,
                   routing_stored_norms=ROW_NORMS_STORED,
                   hyper_compile=arm.hyper_compile,
                   routing_heads=routing_heads_of(arm.method, arm.config.to_dict()),
                   params=sum(p.numel() for p in arm.model.parameters()), step_s=arm.times,
                   step_s_median=median, tokens_per_s=tok_s, flops_per_token=flops,
                   step_s_synced=arm.synced_times, step_s_synced_median=statistics.median(arm.synced_times),
                   overlap_speedup=statistics.median(a / b for a, b in zip(arm.synced_times, arm.times)),
                   mfu=flops * tok_s / peak if peak else None)
        if cuda:
            row["peak_memory_gb"] = (arm.resident_bytes() + arm.peak_growth) / 1e9
        if base is not None:
            per_round = sorted(b / t for b, t in zip(base.times, arm.times))
            row["vs_baseline"] = statistics.median(per_round)
            row["vs_baseline_range"] = [per_round[0], per_round[-1]]
            if cuda:
                row["memory_vs_baseline"] = row["peak_memory_gb"] / ((base.resident_bytes() + base.peak_growth) / 1e9)
        if cuda and args.profile:
            trace = args.trace and f"{args.trace}_{preset}_{arm.label.replace('/', '-')}.json"
            row["profile"] = profile_step(arm, batch, trace)
            # the profiled step's kernel time over the unprofiled median step (the profiler's own start
            # and stop lengthen the profiled step's wall by 1-5 ms, outside its kernels)
            row["busy_fraction_of_step"] = row["profile"]["busy_ms"] / (median * 1e3)
        rows.append(row)
    del arms, base, arm
    gc.collect()  # an arm's objective closes over the arm: a cycle that holds its graphs and their pool
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return rows


def parse_variant(spec: str) -> dict[str, str]:
    """--variant "stack_backward=gather,routing_douts=storage" -> {field: value} of KernelConfig's
    fields with choices (mhar_probe.kernels.config.CHOICES); SystemExit with one line on a bad one."""
    fields = {}
    for item in spec.split(","):
        name, eq, value = item.partition("=")
        if not eq or name not in CHOICES or value not in CHOICES[name]:
            raise SystemExit(f"--variant {spec!r}: each item is FIELD=VALUE with FIELD one of "
                             f"{', '.join(CHOICES)} and VALUE one of its choices (got {item!r})")
        fields[name] = value
    return fields


def arm_specs(args: argparse.Namespace) -> list[tuple[str, KernelConfig, str, str]]:
    """(method, kernel configuration, label, hyper compile mode) of every arm: each method once, a
    method that routes over the shared source stack once per --routing-backward (label
    "mhar/gather" for all but the first) and once more per --variant (label "mhar/SPEC", the first
    backward's configuration with the variant's fields), and hyper once per --hyper-compile (label
    "hyper/sublayers" for all but the first), so that one process times them side by side."""
    specs = []
    for method in args.methods:
        routed = method in REPLACEMENT_METHODS
        backwards = args.routing_backward if routed else args.routing_backward[:1]
        hypers = args.hyper_compile if method == "hyper" and args.compile_sublayers else args.hyper_compile[:1]
        for i, backward in enumerate(backwards):
            kernels = KernelConfig(routing_douts=args.routing_douts, stack_backward=backward,
                                   fold_calls=args.fold_calls)
            for j, hyper in enumerate(hypers):
                label = method if i == 0 and j == 0 else f"{method}/{backward if i else hyper}"
                specs.append((method, kernels, label, hyper))
        for spec in args.variant if routed else []:
            kernels = KernelConfig(**{**KernelConfig(routing_douts=args.routing_douts, stack_backward=backwards[0],
                                                     fold_calls=args.fold_calls).as_dict(), **parse_variant(spec)})
            specs.append((method, kernels, f"{method}/{spec}", hypers[0]))
    return specs


def check_arguments(args: argparse.Namespace) -> None:
    """One message (SystemExit) for a bad preset, method or count, before any arm is built."""
    for preset in args.presets:
        if preset not in PRESETS:
            raise SystemExit(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
        if preset not in PAPER and not (args.batch and args.seq):
            raise SystemExit(f"--batch and --seq are needed for {preset!r} (the paper's microbatches cover "
                             f"{', '.join(PAPER)})")
    for method in args.methods:
        if method not in METHODS:
            raise SystemExit(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if len(set(args.methods)) != len(args.methods):
        raise SystemExit(f"each method once, please (got {' '.join(args.methods)})")
    if len(set(args.hyper_compile)) != len(args.hyper_compile):
        raise SystemExit(f"each hyper compile mode once, please (got {' '.join(args.hyper_compile)})")
    if len(set(args.routing_backward)) != len(args.routing_backward):
        raise SystemExit(f"each routing backward once, please (got {' '.join(args.routing_backward)})")
    if args.fold_calls < 1:
        raise SystemExit(f"--fold-calls must be at least 1 (got {args.fold_calls})")
    if len(set(args.variant)) != len(args.variant):
        raise SystemExit(f"each --variant once, please (got {' '.join(args.variant)})")
    for spec in args.variant:
        try:  # KernelConfig's own checks of the combined fields
            KernelConfig(**{**KernelConfig(routing_douts=args.routing_douts).as_dict(), **parse_variant(spec)})
        except ValueError as exc:
            raise SystemExit(f"--variant {spec!r}: {exc}") from None
    if args.rounds < 1 or args.warmup < 0:
        raise SystemExit(f"--rounds must be at least 1 and --warmup at least 0 (got {args.rounds}, {args.warmup})")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["100m", "350m", "1b"])
    p.add_argument("--methods", nargs="+", default=["baseline", "mhar"])
    p.add_argument("--batch", type=int, default=None, help="default: the paper's microbatch of the preset")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--backend", default="triton", choices=("triton", "eager"))
    p.add_argument("--step", default=None, choices=("graph", "eager"), help="default: graph on CUDA, eager on CPU")
    p.add_argument("--loss-kernel", default=None, choices=LOSS_KERNELS, help="default: fused on CUDA, torch on CPU")
    p.add_argument("--compile-sublayers", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile each attention / MLP sublayer (default: on CUDA, as in training)")
    p.add_argument("--routing-douts", choices=ROUTING_DOUTS, default="promoted",
                   help="the triton backward's upstream-gradient dtype (the dout policy, KernelConfig.routing_douts), "
                        "as mhar train's flag")
    p.add_argument("--routing-backward", nargs="+", choices=STACK_BACKWARDS, default=["fold"],
                   help="the shared stack's backward (KernelConfig.stack_backward); several: one arm per "
                        "backward for each routed method, timed side by side (e.g. fold gather)")
    p.add_argument("--hyper-compile", nargs="+", choices=HYPER_COMPILES, default=[HYPER_COMPILES[0]],
                   help="with compiled sublayers, how a hyper-connection model compiles (compile_sublayers' "
                        "hyper=): region (each sublayer with its hyper-connection, as in training), "
                        "region-pointwise (the same, its stream-mixing matmuls lowered to fusible pointwise "
                        "work) or sublayers (attention and MLP alone, the wiring eager, as before); several: "
                        "one hyper arm each, labelled hyper/MODE after the first")
    p.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE[,...]",
                   help="one more arm per routed method with these KernelConfig fields (any field with "
                        "choices, e.g. stack_backward=gather or routing_douts=storage; comma-joined for "
                        "several at once); repeat for more arms")
    p.add_argument("--fold-calls", type=int, default=KernelConfig().fold_calls,
                   help="calls per fold of the fold-block backward (KernelConfig.fold_calls)")
    p.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                   help="time steps back to back, each launched before the previous one is read back, as the "
                        "trainer runs them (default); --no-overlap: one synchronised step per round")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--profile", action="store_true", help="one more step per arm under torch.profiler")
    p.add_argument("--trace", default=None, help="with --profile: write Chrome traces to TRACE_PRESET_METHOD.json")
    p.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse HEAD)")
    p.add_argument("--out", default=None, help="write the results JSON here")
    args = p.parse_args()
    check_arguments(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.step = args.step or ("graph" if device.type == "cuda" else "eager")
    try:
        args.loss_kernel = choose_loss_kernel(args.loss_kernel, device)
        args.compile_sublayers = choose_compile_sublayers(args.compile_sublayers, device)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    rows = [r for preset in args.presets for r in bench_preset(preset, args, device)]
    meta = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name() if device.type == "cuda" else cpu_name(),
                **software(), package=__version__, commit=args.commit or git_commit(),
                provenance=benchmark_record(device, args.commit),
                args={k: v for k, v in vars(args).items() if k != "seq_len"})
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(dict(meta=meta, results=rows), indent=2) + "\n")
    print(f"# {meta['device']}  torch {meta['torch']}  step={args.step}  backend={args.backend}  "
          f"loss={args.loss_kernel}  compiled sublayers={args.compile_sublayers}  "
          f"hyper compile={'/'.join(args.hyper_compile) if args.compile_sublayers else '-'}  {meta['date']}")
    print("| preset | method | B x T | tokens/s | paper baseline | MFU | vs baseline (range) | peak GB (vs base) | "
          "GPU busy of step | synced step / step |")
    print("|---|---|---|---:|---:|---:|---|---|---:|---:|")
    for r in rows:
        paper = PAPER.get(r["preset"], (None, None))[1]
        ratio = f"{r['vs_baseline']:.3f}x ({r['vs_baseline_range'][0]:.3f}-{r['vs_baseline_range'][1]:.3f})" \
            if "vs_baseline" in r else "-"
        mem = f"{r['peak_memory_gb']:.2f} ({r.get('memory_vs_baseline', 1):.3f}x)" if "peak_memory_gb" in r else "-"
        busy = f"{r['busy_fraction_of_step']:.3f}" if "profile" in r else "-"
        mfu = f"{r['mfu']:.3f}" if r["mfu"] else "-"
        vs_paper = f"{r['tokens_per_s'] / paper:.2f}x" if paper else "-"
        print(f"| {r['preset']} | {r['arm']} | {r['batch']}x{r['seq']} | {r['tokens_per_s']:,.0f} | "
              f"{vs_paper} | {mfu} | {ratio} | {mem} | {busy} | {r['overlap_speedup']:.3f} |")


if __name__ == "__main__":
    main()
