"""Routing kernel benchmark: all routing calls of one microbatch, fwd / bwd / fwd+bwd.

One GPU call runs everything: copy bandwidth, the paper's kernel-table shapes for each backend
(eager, compile, triton, and FLA's `fused_attnres` at H=1 when `fla-core` is installed; same
inputs, each checked against eager), the 8B delta per-call shape, and prints a table.
    mhar bench routing --out results.json          (or: python -m mhar_probe.cli bench routing ...)

Timing: CUDA events around the region, warm-up, median of repeats. The byte floor is
4 bytes x d x (B*T) x pairs / copy bandwidth; pairs = sum_s N_s (`kernels.route.floors.four_byte_floor`). The 4 bytes of a pair-element: the
forward reads the source once (2 in bf16), the backward once more, in the gather (2); the
derivation is mhar_probe/kernels/README.md, "Design".
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import time
from typing import Any

import torch

from mhar_probe.errors import UserError
from mhar_probe.kernels.route.bwd_fold import model_layout
from mhar_probe.kernels.route.floors import four_byte_floor
from mhar_probe.model.routing import get_backend

SHAPES = {  # name: (d, L, B, T)
    "100M": (512, 12, 2, 2048),
    "350M": (1024, 24, 1, 1024),
    "1B": (1280, 36, 1, 1024),
    # the training microbatches of the paper's cost table (8x2048, 4x1024, 2x1024)
    "100M-train": (512, 12, 8, 2048),
    "350M-train": (1024, 24, 4, 1024),
    "1B-train": (1280, 36, 2, 1024),
}
GRAPH = False  # --graph: also time CUDA-graph replays of fwd+bwd
DTYPE = torch.bfloat16  # --dtype float32: the promoted stack; mixed: fp32 source 0, bf16 rest
# Triton kernel variants timed beside the default in one process: name -> the KernelConfig
# fields it changes (over the run's base configuration: `--launch-table`). storage-douts (the dout
# policy `routing_douts="storage"`, `mhar train --routing-douts storage`; called bf16dout before
# 2026-11-26) stores the douts the gather reads in the source buffer's dtype (bf16 under
# autocast): an opt-in approximation, timed to show what that byte cut buys. gather: the
# stack's gather backward (every source's gather reads all its readers' douts), the default
# before the fold-block backward; fold4/12/16: the fold-block backward at other block sizes than
# the default 8 (`--backends triton,triton-gather` times the two backwards side by side).
# The variants that lost against today's kernels are gone (mhar_probe/kernels/README.md says
# which commit last had each; issue 55's douts-in-place and weights-logits: 56b6ecf).
VARIANTS: dict[str, dict[str, object]] = {
    "triton-storage-douts": dict(routing_douts="storage"),
    "triton-gather": dict(stack_backward="gather"),
    "triton-fold4": dict(fold_calls=4),
    "triton-fold12": dict(fold_calls=12),
    "triton-fold16": dict(fold_calls=16),
}
#: --check-grads: the most a triton variant's gradients may differ from triton's (max |a - b| / max
#: |b| over every leaf) before the shape is refused untimed; bitwise-equal variants report 0
GRAD_TOL = 1e-5
#: old names of a variant (in saved benchmark files and notes) -> today's
OLD_VARIANTS = {"triton-bf16dout": "triton-storage-douts"}
BACKENDS = ("triton", "compile", "eager", "fla", *VARIANTS)


def variant_backend(name: str, base: Any):
    """Backend `name` ("triton", a triton variant, "compile", "eager"), the triton ones with `base`
    (a KernelConfig) and the variant's changes bound (`get_backend`'s options, not a global)."""
    name = OLD_VARIANTS.get(name, name)
    if not name.startswith("triton"):
        return get_backend(name)
    return get_backend("triton", dataclasses.replace(base, **VARIANTS.get(name, {})))


def cuda_time(fn, warmup: int, repeat: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def graph_ms(fn, repeat: int) -> float:
    """Median ms of replaying a CUDA graph of fn (fwd + bwd): the device's time for the same
    work with the host's launch overhead taken out (this VM's host is slower than the GPU)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    ms = cuda_time(graph.replay, 3, repeat)
    del graph
    torch.cuda.empty_cache()
    return ms


def kernel_ms(fn) -> dict[str, float]:
    """Device time per kernel name (torch.profiler), one run after warm-up: where time goes."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for evt in prof.key_averages():
        t = getattr(evt, "self_device_time_total", 0) or getattr(evt, "self_cuda_time_total", 0)
        if t:
            out[evt.key[:60]] = out.get(evt.key[:60], 0.0) + t / 1e3
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:8])


def copy_bandwidth() -> float:
    """GB/s of a large device-to-device copy (bytes read + bytes written)."""
    x = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = cuda_time(lambda: y.copy_(x), 5, 20)
    return 2 * x.numel() * 2 / ms / 1e6


def make_inputs(d, L, B, T, seed=0):
    """Sources, queries, norm weights, douts. `mixed` is bf16 autocast's layout: an fp32
    embedding, bf16 sublayer outputs, fp32 routed outputs (so fp32 douts)."""
    S = 2 * L + 1
    g = torch.Generator(device="cuda").manual_seed(seed)
    src_dtype = torch.bfloat16 if DTYPE == "mixed" else DTYPE
    xs = [torch.randn(B, T, d, device="cuda", generator=g).to(torch.float32 if i == 0 and DTYPE == "mixed"
                                                              else src_dtype).requires_grad_()
          for i in range(S)]
    qs = [(torch.randn(d, device="cuda", generator=g) * 0.1).bfloat16().requires_grad_() for _ in range(S)]
    gs = [(1 + 0.1 * torch.randn(d, device="cuda", generator=g)).bfloat16().requires_grad_() for _ in range(S)]
    douts = [torch.randn(B, T, d, device="cuda", generator=g).to(torch.float32 if DTYPE == "mixed" else DTYPE)
             for _ in range(S)]
    return xs, qs, gs, douts


class _FLAStack:
    """FLA's `fused_attnres` (H = 1 only) behind the stack interface: a list of sources, one
    fused call per site over the prefix (FLA's own pointer-table design; weights not returned)."""

    def __init__(self, capacity: int, params=None) -> None:
        self.sources: list[torch.Tensor] = []

    def append(self, x: torch.Tensor) -> None:
        self.sources.append(x)

    def route(self, q, g, H, eps, n):
        from fla.ops.attnres import fused_attnres

        assert H == 1, "FLA's fused_attnres is single-head"
        return fused_attnres(q, self.sources[:n], g, rms_eps=eps), None


def fla_backend():
    from types import SimpleNamespace

    import fla.ops.attnres  # noqa: F401  (fails here if the wheel is not installed)
    return SimpleNamespace(name="fla", new_stack=_FLAStack)


def chain_fwd(backend, xs, qs, gs, H, params: bool = True):
    """The model's order: append source s, route over [0, s+1); 2L+1 calls and sources. The
    stack is built with the sites' parameters, as the model builds it (params=False: without,
    which runs triton's stack_bwd kernels instead of the 4-bytes/pair backward)."""
    stack = backend.new_stack(len(xs), params=list(zip(qs, gs))) if params else backend.new_stack(len(xs))
    outs = []
    for s in range(len(xs)):
        stack.append(xs[s])
        outs.append(stack.route(qs[s], gs[s], H, 1e-6, s + 1)[0])
    return outs


def leaf_grads(backend, xs, qs, gs, H, douts) -> tuple[torch.Tensor, ...]:
    """Every leaf's gradient (sources, queries, norm weights) of one fwd+bwd through `backend`."""
    outs = chain_fwd(backend, xs, qs, gs, H)
    return torch.autograd.grad(outs, xs + qs + gs, douts)


def grad_difference(got, want) -> tuple[bool, float]:
    """(bitwise equal, max over leaves of max |got - want| / max |want|)."""
    same = all(torch.equal(a, b) for a, b in zip(got, want))
    rel = max(((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()
              for a, b in zip(got, want))
    return same, rel


def bench_shape(name, d, L, B, T, H, backends, bw, repeat, kernels, profile=True, check_grads=False):
    """Time `backends` at one shape. check_grads: before timing, each triton variant's gradients
    against the first backend's (`triton`), refused untimed beyond GRAD_TOL."""
    xs, qs, gs, douts = make_inputs(d, L, B, T)
    ref_grads = None
    S = 2 * L + 1
    pairs = S * (S + 1) // 2
    P = B * T
    floor_bytes = four_byte_floor(model_layout(S), d, P)
    rows = []
    with torch.no_grad():  # correctness of every backend's last (widest) output against eager's
        ref = chain_fwd(get_backend("eager"), xs, qs, gs, H)[-1].float()
    for bname in backends:
        if bname == "fla" and H != 1:
            continue
        try:
            be = fla_backend() if bname == "fla" else variant_backend(bname, kernels)
        except ImportError as exc:
            print(f"{name:5s} H={H:<2d} {bname:8s} skipped: {exc}", flush=True)
            continue
        leaves = xs + qs + gs
        grad_check = {}
        if check_grads and bname.startswith("triton"):
            grads = leaf_grads(be, xs, qs, gs, H, douts)
            if ref_grads is None:
                ref_grads = grads
            else:
                same, rel = grad_difference(grads, ref_grads)
                grad_check = dict(grads_bitwise_vs_triton=same, grads_rel_vs_triton=rel)
                print(f"{name:5s} H={H:<2d} {bname:8s} gradients vs triton: "
                      f"{'bitwise equal' if same else f'max rel {rel:.1e}'}", flush=True)
                if rel > GRAD_TOL:
                    raise UserError(f"{name} H={H}: {bname}'s gradients differ from triton's by {rel:.1e} "
                                    f"(> {GRAD_TOL:.0e}); not timed")
            del grads

        def fwd():
            return chain_fwd(be, xs, qs, gs, H)

        def fwdbwd():
            outs = fwd()
            torch.autograd.backward(outs, douts)
            for t in leaves:
                t.grad = None

        try:
            t0 = time.time()
            fwdbwd()  # compile / autotune outside the timings
            torch.cuda.synchronize()
            first = time.time() - t0
            rep = repeat if bname.startswith("triton") else max(3, repeat // 3)
            ms_f = cuda_time(fwd, 2, rep)
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            ms_fb = cuda_time(fwdbwd, 2, rep)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        except torch.OutOfMemoryError:
            rows.append(dict(shape=name, H=H, backend=bname, oom=True))
            torch.cuda.empty_cache()
            continue
        with torch.no_grad():
            last = fwd()[-1].float()
        prof = kernel_ms(fwdbwd) if bname.startswith("triton") and profile else {}
        graph = None
        if GRAPH:
            try:
                graph = graph_ms(fwdbwd, rep)
            except Exception as exc:  # noqa: BLE001 - recorded, the wall-clock row stands
                print(f"{name:5s} H={H:<2d} {bname:8s} graph capture failed: "
                      f"{type(exc).__name__}: {str(exc)[:200]}", flush=True)
                torch.cuda.empty_cache()
        floor_ms = floor_bytes / (bw * 1e6)
        err = ((last - ref).abs().max() / ref.abs().max()).item()
        rows.append(dict(kernels_ms=prof, kernels_total_ms=sum(prof.values()), shape=name, d=d, L=L, B=B, T=T, H=H,
                         backend=bname, kernel_config=be.options.as_dict() if bname.startswith("triton") else None,
                         pairs=pairs,
                         fwd_ms=ms_f, bwd_ms=ms_fb - ms_f, fwdbwd_ms=ms_fb, peak_extra_gib=peak,
                         floor_ms=floor_ms, floor_fraction=floor_ms / ms_fb,
                         effective_gbps=floor_bytes / ms_fb / 1e6, first_call_s=first,
                         last_out_rel_err_vs_eager=err, graph_fwdbwd_ms=graph,
                         graph_floor_fraction=floor_ms / graph if graph else None, **grad_check))
        print(f"{name:5s} H={H:<2d} {bname:8s} fwd {ms_f:8.3f}  bwd {ms_fb - ms_f:8.3f}  "
              f"fwd+bwd {ms_fb:8.3f} ms  floor {floor_ms:6.3f} ms ({floor_ms / ms_fb:5.1%})  "
              f"peak +{peak:5.2f} GiB  err {err:.1e}" + (f"  GPU-busy {sum(prof.values()):6.3f} ms" if prof else "")
              + (f"  graph {graph:7.3f} ms ({floor_ms / graph:5.1%})" if graph else ""),
              flush=True)
    return rows


def bench_delta(backends, bw, repeat, kernels, d=4096, H=8, N=9, B=2, T=4096, L=32):
    """8B delta form: one self-contained call (null + block deltas, partial, gate) fwd+bwd."""
    g = torch.Generator(device="cuda").manual_seed(1)
    src = torch.randn(N, B, T, d, device="cuda", generator=g).bfloat16().requires_grad_()
    q = (0.1 * torch.randn(d, device="cuda", generator=g)).bfloat16().requires_grad_()
    w = torch.ones(d, device="cuda").bfloat16().requires_grad_()
    part = torch.randn(B, T, d, device="cuda", generator=g).bfloat16().requires_grad_()
    gate = torch.tensor(0.1, device="cuda").requires_grad_()
    dout = torch.randn(B, T, d, device="cuda", generator=g).bfloat16()
    rows = []
    for bname in backends:
        if bname == "fla":  # FLA has no delta form (partial stream + gate)
            continue
        be = variant_backend(bname, kernels)

        def fb():
            out, _ = be.route(src, q, w, H, 1e-6, partial=part, gate=gate)
            torch.autograd.backward(out, dout)

        try:
            fb()
            ms = cuda_time(fb, 2, repeat)
        except torch.OutOfMemoryError:
            rows.append(dict(shape="8B-delta", backend=bname, oom=True))
            continue
        per_mb = ms * (2 * L + 1)
        rows.append(dict(shape="8B-delta", d=d, H=H, N=N, B=B, T=T, backend=bname,
                         call_fwdbwd_ms=ms, microbatch_ms=per_mb))
        print(f"8B-delta H=8 {bname:8s} one call fwd+bwd {ms:8.3f} ms; x{2 * L + 1} calls = "
              f"{per_mb:8.1f} ms/microbatch", flush=True)
    return rows


# Launch configurations the sweep tries, rows of the launch-table format (launch_tables.py):
# fwd (block_p, num_warps, maxnreg, stages), stack (block_p, num_warps, programs per SM, maxnreg),
# gather (block_p, num_warps, dout prefetch, maxnreg, loads first), pair_e (readers per program,
# positions per dot step, warps); maxnreg 0: no cap. One or two warps per program keep the
# per-row reductions inside a warp (no block barrier per source row); maxnreg trades registers
# for resident warps (at 1B every cap tried spilled and lost by 1.2-12x, so one cap per kernel
# stays in the lists, the mildest).
SWEEP_FWD = [(1, 1, 0, 3), (2, 1, 0, 3), (1, 2, 0, 3), (1, 1, 0, 4), (1, 2, 0, 4), (1, 1, 0, 5), (2, 2, 0, 3),
             (1, 4, 0, 3), (1, 2, 96, 3)]
SWEEP_STACK = [(1, 1, 16, 0), (1, 1, 8, 0), (2, 1, 16, 0), (1, 2, 8, 0), (2, 2, 8, 0), (1, 4, 4, 0), (2, 4, 2, 0),
               (4, 4, 2, 0), (1, 2, 6, 168)]
SWEEP_GATHER = [(1, 1, 1, 0, 0), (1, 1, 0, 0, 0), (1, 2, 1, 0, 0), (1, 2, 0, 0, 0), (1, 4, 1, 0, 0), (1, 4, 0, 0, 0),
                (1, 8, 1, 0, 0), (2, 4, 1, 0, 0), (2, 8, 1, 0, 0), (1, 1, 0, 0, 1), (1, 1, 1, 0, 1), (1, 2, 0, 0, 1),
                (1, 2, 1, 0, 1), (1, 1, 0, 168, 1)]
SWEEP_PAIR_E = [(16, 16, 4, 1), (16, 32, 4, 1), (16, 64, 4, 1), (32, 16, 4, 1), (32, 32, 4, 1), (32, 64, 8, 1),
                (64, 16, 4, 1), (64, 32, 8, 1), (16, 16, 8, 1), (32, 16, 8, 1),
                (16, 16, 4, 2), (16, 16, 8, 2), (32, 16, 4, 2), (16, 32, 4, 2)]
# fold (block_p, num_warps, prefetch 0-2, maxnreg, loads_first, sources 1-2): the fold kernel's own
# rows, every variant at one and two warps, two sources per iteration and prefetch 1 first (what
# won at 1B on an H200: benchmarks/kernels/results.md, "H200 fold sweep")
SWEEP_FOLD = [(1, w, pre, 0, lf, src) for w in (1, 2) for src in (2, 1) for pre in (1, 2, 0) for lf in (1, 0)]
SWEEP_KINDS = ("fwd", "stack", "gather", "fold", "pair_e")
SWEEP_LISTS = {"fwd": SWEEP_FWD, "stack": SWEEP_STACK, "gather": SWEEP_GATHER, "fold": SWEEP_FOLD,
               "pair_e": SWEEP_PAIR_E}
# kernel names a sweep judges by: the gather rows also launch the fold-block backward's folds
# (where the table has no fold row); the fold rows are judged by the fold kernel alone
SWEEP_PREFIX = {"fwd": "route_fwd", "stack": "stack_bwd", "gather": ("stack_gather", "stack_fold"),
                "fold": "stack_fold", "pair_e": "pair_e"}


def sweep_key(kind: str, d: int, H: int, width: int) -> tuple[int, ...]:
    """The launch-table key a sweep's row for `kind` is stored under at (d, H, storage width in
    bytes per output / stored dout element): what the kernels' lookups (launch_tables.py) ask."""
    return {"fwd": (d, H, width), "stack": (d, H, H), "gather": (d, H, H, width), "fold": (d, H, H, width),
            "pair_e": (d, H)}[kind]


def sweep_candidates(kind: str, given: str | None = None) -> list[tuple[int, ...]]:
    """The configs to sweep for `kind`: `given` (a JSON list of rows, e.g. from MHAR_SWEEP_<KIND>
    in benchmarks/kernels/device_run.sh, for a short device call) or the default list."""
    if not given:
        return list(SWEEP_LISTS[kind])
    from mhar_probe.kernels.launch_tables import VALUE_COLUMNS

    rows = [tuple(int(x) for x in row) for row in json.loads(given)]
    bad = [r for r in rows if len(r) != len(VALUE_COLUMNS[kind])]
    if bad:
        raise UserError(f"sweep configs for {kind}: {bad} are not rows of "
                        f"({', '.join(VALUE_COLUMNS[kind])})")
    return rows


def sweep(bw: float, repeat: int, shapes: list[str], heads: list[int], out_path: str,
          kernels: tuple[str, ...] = ("fwd", "stack")) -> list[dict]:
    """Launch-configuration sweep of the triton kernels per shape/H, judged by device time
    (torch.profiler kernel sums: wall time here is dominated by host noise). Writes the chosen
    rows as a launch-table file (launch_tables.py's format) for KernelConfig(launch_table=...),
    after every shape (a cut-short sweep keeps what it found). The stack kind times the chain
    built without the sites' parameters (the only one that runs the stack_bwd kernels)."""
    import tempfile

    from mhar_probe.kernels import KernelConfig
    from mhar_probe.kernels.launch_tables import LaunchTables

    lists = {k: sweep_candidates(k, os.environ.get(f"MHAR_SWEEP_{k.upper()}")) for k in kernels}
    chosen = LaunchTables()
    trials = tempfile.mkdtemp(prefix="mhar_sweep_")
    rows = []
    for name in shapes:
        d, L, B, T = SHAPES[name]
        xs, qs, gs, douts = make_inputs(d, L, B, T)
        for H in heads:
            # the forward's and the gather's rows name the storage width they were swept at
            # (bytes per output / stored dout element: 2 in a 16-bit chain, 4 under autocast)
            eb = 2 if DTYPE in (torch.bfloat16, torch.float16) else 4
            keys = {kind: sweep_key(kind, d, H, eb) for kind in kernels}
            for kind in kernels:

                def fb(be, params=kind != "stack"):
                    outs = chain_fwd(be, xs, qs, gs, H, params=params)
                    torch.autograd.backward(outs, douts)
                    for t in xs + qs + gs:
                        t.grad = None

                for i, cfg in enumerate(lists[kind]):
                    trial = LaunchTables(**{**chosen.__dict__, kind: {**getattr(chosen, kind), keys[kind]: cfg}})
                    path = os.path.join(trials, f"{name}_h{H}_{kind}_{i}.json")
                    trial.dump(path)
                    be = get_backend("triton", KernelConfig(launch_table=path))
                    fb(be)  # compiles
                    ms = sum(v for k, v in kernel_ms(lambda: fb(be)).items() if k.startswith(SWEEP_PREFIX[kind]))
                    rows.append(dict(sweep=kind, shape=name, H=H, cfg=cfg, gpu_ms=ms))
                mine = [r for r in rows if r["sweep"] == kind and r["shape"] == name and r["H"] == H]
                best = min(mine, key=lambda r: r["gpu_ms"])["cfg"]
                getattr(chosen, kind)[keys[kind]] = tuple(best)
                print(f"SWEEP {name} H={H} {kind}: " + " ".join(f"{r['cfg']}:{r['gpu_ms']:.3f}" for r in mine)
                      + f" -> {best}", flush=True)
            chosen.dump(out_path)
    return rows


def host_profile(name: str, H: int, base: Any, iters: int = 20) -> None:
    """Where the host's time goes in the triton chain (Python functions by own time)."""
    import cProfile
    import pstats

    d, L, B, T = SHAPES[name]
    xs, qs, gs, douts = make_inputs(d, L, B, T)
    be = get_backend("triton", base)

    def fb():
        outs = chain_fwd(be, xs, qs, gs, H)
        torch.autograd.backward(outs, douts)
        for t in xs + qs + gs:
            t.grad = None

    for _ in range(3):
        fb()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(iters):
        fb()
    prof.disable()
    torch.cuda.synchronize()
    host = (time.perf_counter() - t0) / iters * 1e3
    print(f"HOST {name} H={H}: {host:.2f} ms per fwd+bwd under cProfile ({2 * L + 1} calls)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)


def check_arguments(args: argparse.Namespace) -> None:
    """One clear message for input the user can fix (the CLI turns it into exit status 2)."""
    unknown = [b for b in args.backends.split(",") if OLD_VARIANTS.get(b, b) not in BACKENDS]
    if unknown:
        raise UserError(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    bad = [s for s in args.shapes.split(",") + [x for x in args.sweep.split(",") if x] if s not in SHAPES]
    if bad:
        raise UserError(f"unknown shape(s) {', '.join(bad)}; choose from {', '.join(SHAPES)}")
    if args.check_grads and not args.backends.startswith("triton,"):
        raise UserError("--check-grads compares each triton variant's gradients with triton's: "
                        "--backends must start with triton,")
    odd = [k for k in args.sweep_kernels.split(",") if k not in SWEEP_KINDS]
    if odd:
        raise UserError(f"unknown sweep kernel(s) {', '.join(odd)}; choose from {', '.join(SWEEP_KINDS)}")
    if not torch.cuda.is_available():
        raise UserError("the routing benchmark times the kernels on a CUDA GPU; none is visible here")


def run(args: argparse.Namespace) -> None:
    """Run the benchmark with parsed options (`mhar bench routing`: mhar_probe.cli.bench parses them)."""
    check_arguments(args)
    from mhar_probe.provenance import benchmark_record, git_commit, software
    from mhar_probe.kernels import KernelConfig, kernel_settings
    from mhar_probe.model.routing import register_triton_backend

    register_triton_backend()
    base = KernelConfig(launch_table=args.launch_table or None)  # every triton backend's, variants on top

    global DTYPE, GRAPH
    GRAPH = args.graph
    DTYPE = "mixed" if args.dtype == "mixed" else getattr(torch, args.dtype)
    torch._dynamo.config.cache_size_limit = 64
    backends = args.backends.split(",")
    bw = copy_bandwidth()
    meta = dict(device=torch.cuda.get_device_name(), date=datetime.date.today().isoformat(),
                commit=args.commit or git_commit(), **software(), copy_gbps=bw, dtype=args.dtype,
                provenance=benchmark_record("cuda", args.commit),
                kernels=kernel_settings(base))
    print(json.dumps(meta), flush=True)
    rows = []
    if args.host_profile:
        host_profile(args.shapes.split(",")[0], int(args.heads.split(",")[0]), base)
    if args.sweep:
        rows += sweep(bw, args.repeat, args.sweep.split(","), list(map(int, args.heads.split(","))),
                      args.out.replace(".json", "_tuned.json"), tuple(args.sweep_kernels.split(",")))
        if args.sweep_only:
            json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
            return
    for name in args.shapes.split(","):
        for H in map(int, args.heads.split(",")):
            rows += bench_shape(name, *SHAPES[name], H, backends, bw, args.repeat, base,
                                check_grads=args.check_grads)
            json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
    if not args.no_delta:
        rows += bench_delta(backends, bw, max(5, args.repeat // 2), base)
    json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
    print("\nshape  H  backend        fwd+bwd ms  vs triton  floor frac | graph ms  vs triton  floor frac"
          " | GPU-busy ms  vs triton")
    tri = {(r["shape"], r.get("H")): r for r in rows if r["backend"] == "triton" and "fwdbwd_ms" in r}
    nan = float("nan")
    for r in rows:
        if "fwdbwd_ms" not in r or "sweep" in r:
            continue
        t = tri.get((r["shape"], r["H"])) or {}
        g, tg = r.get("graph_fwdbwd_ms") or nan, t.get("graph_fwdbwd_ms") or nan
        print(f"{r['shape']:5s} {r['H']:2d} {r['backend']:15s} {r['fwdbwd_ms']:9.3f} "
              f"{r['fwdbwd_ms'] / t.get('fwdbwd_ms', nan):9.2f}x {r['floor_fraction']:9.1%} | "
              f"{g:8.3f} {g / tg:9.2f}x {r['floor_ms'] / g:9.1%} | "
              f"{r.get('kernels_total_ms') or nan:11.3f} "
              f"{(r.get('kernels_total_ms') or nan) / (t.get('kernels_total_ms') or nan):9.2f}x")

