"""Routing kernel benchmark: all routing calls of one microbatch, fwd / bwd / fwd+bwd.

One GPU call runs everything: copy bandwidth, the paper's kernel-table shapes for each backend
(eager, compile, triton, and FLA's `fused_attnres` at H=1 when `fla-core` is installed; same
inputs, each checked against eager), the 8B delta per-call shape, and prints a table.
    mhar bench routing --out results.json          (or: python -m mhar_probe.bench.routing)

Timing: CUDA events around the region, warm-up, median of repeats. The byte floor is
4 bytes x d x (B*T) x pairs / copy bandwidth (DESIGN.md section 4); pairs = sum_s N_s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import time

import torch

from mhar_probe.errors import UserError
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
# Earlier states of the triton kernels, timed beside the current one in the same process:
# the whole stack in the promoted dtype (fp32 under autocast), the launch configurations of
# 2026-11-22, or both.
# name: what the variant changes against "triton" (split_row0=True, prev_cfg=False, direct=True,
# split_heads=True, bf16_douts=False, collect=True, fold_qg=True, lazy_rescale=True,
# fwd_pipeline=True). Each variant
# but `prev` and `fwdprev` changes one thing: promoted, prevcfg,
# jitlaunch and padded undo one change for same-run ratios; bf16dout is an opt-in approximation
# (the stored douts the gather reads rounded to bf16), timed to show what that byte cut buys;
# collect is the 4-bytes/pair backward (route_bwd_collect.py), the default since 2026-11-23 (the
# fifth session); stackbwd is the backward before it (each call re-reads its sources), prev the
# state of 2026-11-22; nofold and eagerscale undo one of the forward's two instruction cuts of
# the sixth session of 2026-11-23 (route_fwd.FOLD_QG, LAZY_RESCALE), fwdprev both (and the register
# prefetch below); meta turns on
# the gather's one-reader-ahead loads of its per-reader scalars (route_bwd_collect.META_PREFETCH,
# off by default); onepass and twopass force the gather's loop over readers into one or two passes
# at every shape (route_bwd_collect.TWO_PASS; by default each shape's launch config decides);
# gatherprev runs the gather's launch configs from before the two-pass table entries (its heuristic
# at every shape); enarrow runs pair_e_kernel in the narrow column blocks it had before the wide
# ones (route_bwd_collect.E_WIDE); fwdregs runs the forward's loop with its register prefetch of
# the next two rows instead of Triton's pipeliner (route_fwd.PIPELINE); untyped looks up only the
# launch-config entries that do not name a storage width (launch.DTYPE_CONFIGS off: what every
# shape ran before the ninth session's entries for pure 16-bit chains); anyh runs the gather's
# general path, which reads each reader's head count from the call table, also where every call
# has the same head count (autograd.SAME_H off); s8 runs the gather as the eighth session left it
# (the general path and its launch-config table then); eieee forms pair_e's dot as IEEE fp32 FMAs
# also where the keys are rounded to 16 bits (route_bwd_collect.E_SPLIT_DOT off); copyappend copies
# each appended source into the stack's buffer at once, as before the tenth session, instead of
# the next call's forward kernel storing it (autograd.FWD_APPEND off); appendlast folds that row
# into the softmax last, in the rows' order, instead of right after row 0 (route_fwd.APPEND_ORDER);
# wplain turns the forward's stored logits into weights in a plain loop, not a pipelined one
# (route_fwd.W_STAGES 0); unaligned lets Triton lay out the gather's two column tiles of a head
# like 160 = 128 + 32 on its own, as before the eleventh session, so that each head's sum crosses
# between them through shared memory (route_bwd_collect.ALIGN_TILES off); g10 runs the gather as
# the tenth session left it (its launch-config table then, no loads-first entries, tiles not
# aligned).
VARIANTS = {"triton-promoted": dict(split_row0=False), "triton-prevcfg": dict(prev_cfg=True),
            "triton-jitlaunch": dict(direct=False), "triton-padded": dict(split_heads=False),
            "triton-prev": dict(split_row0=False, prev_cfg=True, direct=False, split_heads=False,
                                collect=False, fold_qg=False, lazy_rescale=False),
            "triton-bf16dout": dict(bf16_douts=True), "triton-collect": dict(collect=True),
            "triton-stackbwd": dict(collect=False), "triton-nofold": dict(fold_qg=False),
            "triton-eagerscale": dict(lazy_rescale=False),
            "triton-fwdprev": dict(fold_qg=False, lazy_rescale=False, fwd_pipeline=False),
            "triton-meta": dict(meta_prefetch=True), "triton-onepass": dict(two_pass=False),
            "triton-twopass": dict(two_pass=True), "triton-gatherprev": dict(gather_prev=True),
            "triton-enarrow": dict(e_wide=False), "triton-fwdregs": dict(fwd_pipeline=False),
            "triton-untyped": dict(dtype_configs=False), "triton-anyh": dict(same_h=False),
            "triton-s8": dict(same_h=False, dtype_configs=False, gather_s8=True),
            "triton-eieee": dict(e_split_dot=False), "triton-copyappend": dict(fwd_append=False),
            "triton-appendlast": dict(append_order="last"), "triton-wplain": dict(w_stages=0),
            "triton-unaligned": dict(align_tiles=False),
            "triton-g10": dict(align_tiles=False, gather_s10=True)}
BACKENDS = ("triton", "compile", "eager", "fla", *VARIANTS)


def _prev_tile_config(d: int, num_heads: int, out_bytes: int = 0) -> tuple[int, int, int, None, int]:
    """route_fwd launch configs as of 2026-11-22 (table and heuristic)."""
    import triton  # here, not at import: `mhar bench` must give its GPU message where Triton is absent

    block_k = triton.next_power_of_2(d // num_heads)
    hit = {(512, 1): (4, 4), (512, 8): (1, 4), (1024, 8): (1, 4), (1280, 8): (2, 4)}.get((d, num_heads))
    if hit:
        return block_k, *hit, None, 0
    width = num_heads * block_k
    block_p = max(1, min(4, 1024 // width))
    return block_k, block_p, 4 if width * block_p <= 2048 else 8, None, 0


def _prev_stack_config(d: int, num_heads: int, max_heads: int) -> tuple[int, int, int, None]:
    """stack_bwd launch configs as of 2026-11-22 (table and heuristic)."""
    import triton

    hit = {(512, 1, 1): (4, 8, 2), (512, 8, 8): (4, 4, 2), (1024, 8, 8): (1, 4, 4),
           (1280, 8, 8): (2, 4, 2)}.get((d, num_heads, max_heads))
    if hit:
        return (*hit, None)
    width = num_heads * triton.next_power_of_2(d // num_heads)
    return (4, 4, 2, None) if width <= 512 else (1, 4, 4, None) if width <= 1024 else (2, 4, 2, None)


_S10_GATHER_CONFIG = {(512, 8, 8): (1, 2, True), (1280, 8, 8): (1, 1, False), (512, 8, 8, 2): (1, 1, True),
                      (1024, 8, 8, 2): (1, 2, True), (512, 1, 1, 2): (1, 1, True)}


def _s10_gather_config(d: int, num_heads: int, max_heads: int, dout_bytes: int = 0) -> tuple:
    """stack_gather_kernel's launch configs as the tenth session (2026-11-24) left them."""
    from mhar_probe.kernels import route_bwd_collect

    hit = _S10_GATHER_CONFIG.get((d, num_heads, max_heads, dout_bytes)) or \
        _S10_GATHER_CONFIG.get((d, num_heads, max_heads))
    return (*hit, None, False) if hit else route_bwd_collect.gather_config_heuristic(d)


def _s8_gather_config(d: int, num_heads: int, max_heads: int, *_) -> tuple:
    """stack_gather_kernel's launch configs as the eighth session of 2026-11-23 left them."""
    from mhar_probe.kernels import route_bwd_collect

    if (d, num_heads, max_heads) in ((512, 8, 8), (1280, 8, 8)):
        return 1, 2, False, None, True
    return route_bwd_collect.gather_config_heuristic(d)


@contextlib.contextmanager
def kernel_variant(name: str):
    """Give the kernels the stack layout and launch configs of backend `name` (restored after)."""
    from mhar_probe.kernels import autograd as kad, launch, route_bwd_collect, route_fwd

    v = VARIANTS.get(name, {})
    old = (kad.SPLIT_ROW0, route_fwd.tile_config, kad.tile_config, kad.stack_config, kad.gather_config,
           launch.DIRECT,
           route_fwd.SPLIT_HEADS, kad.BF16_DOUTS, kad.COLLECT, route_fwd.FOLD_QG,
           route_fwd.LAZY_RESCALE, route_bwd_collect.META_PREFETCH, route_bwd_collect.TWO_PASS,
           route_bwd_collect.E_WIDE, route_fwd.PIPELINE, launch.DTYPE_CONFIGS, kad.SAME_H,
           route_bwd_collect.E_SPLIT_DOT, kad.FWD_APPEND, route_fwd.APPEND_ORDER, route_fwd.W_STAGES,
           route_bwd_collect.ALIGN_TILES)
    if name in VARIANTS:  # anything else ("triton") runs the current state
        (kad.SPLIT_ROW0, launch.DIRECT, route_fwd.SPLIT_HEADS, kad.BF16_DOUTS, kad.COLLECT,
         route_fwd.FOLD_QG, route_fwd.LAZY_RESCALE, route_bwd_collect.META_PREFETCH,
         route_bwd_collect.TWO_PASS, route_bwd_collect.E_WIDE, route_fwd.PIPELINE, launch.DTYPE_CONFIGS,
         kad.SAME_H, route_bwd_collect.E_SPLIT_DOT, kad.FWD_APPEND, route_fwd.APPEND_ORDER,
         route_fwd.W_STAGES, route_bwd_collect.ALIGN_TILES) = (
            v.get("split_row0", True), v.get("direct", True), v.get("split_heads", True),
            v.get("bf16_douts", False), v.get("collect", True), v.get("fold_qg", True),
            v.get("lazy_rescale", True), v.get("meta_prefetch", False),
            v.get("two_pass", route_bwd_collect.TWO_PASS), v.get("e_wide", True),
            v.get("fwd_pipeline", True), v.get("dtype_configs", True), v.get("same_h", True),
            v.get("e_split_dot", True), v.get("fwd_append", True), v.get("append_order", "first"),
            v.get("w_stages", old[-2]), v.get("align_tiles", old[-1]))
    if v.get("gather_prev"):
        kad.gather_config = lambda d, h, hm, *_: route_bwd_collect.gather_config_heuristic(d)
    if v.get("gather_s8"):
        kad.gather_config = _s8_gather_config
    if v.get("gather_s10"):
        kad.gather_config = _s10_gather_config
    if v.get("prev_cfg"):
        route_fwd.tile_config = kad.tile_config = _prev_tile_config
        kad.stack_config = _prev_stack_config
    try:
        yield
    finally:
        (kad.SPLIT_ROW0, route_fwd.tile_config, kad.tile_config, kad.stack_config, kad.gather_config,
         launch.DIRECT, route_fwd.SPLIT_HEADS, kad.BF16_DOUTS, kad.COLLECT, route_fwd.FOLD_QG,
         route_fwd.LAZY_RESCALE, route_bwd_collect.META_PREFETCH, route_bwd_collect.TWO_PASS,
         route_bwd_collect.E_WIDE, route_fwd.PIPELINE, launch.DTYPE_CONFIGS, kad.SAME_H,
         route_bwd_collect.E_SPLIT_DOT, kad.FWD_APPEND, route_fwd.APPEND_ORDER, route_fwd.W_STAGES,
         route_bwd_collect.ALIGN_TILES) = old


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


def chain_fwd(backend, xs, qs, gs, H):
    """The model's order: append source s, route over [0, s+1); 2L+1 calls and sources."""
    stack = backend.new_stack(len(xs), params=list(zip(qs, gs)))
    outs = []
    for s in range(len(xs)):
        stack.append(xs[s])
        outs.append(stack.route(qs[s], gs[s], H, 1e-6, s + 1)[0])
    return outs


def bench_shape(name, d, L, B, T, H, backends, bw, repeat, profile=True):
    xs, qs, gs, douts = make_inputs(d, L, B, T)
    S = 2 * L + 1
    pairs = S * (S + 1) // 2
    P = B * T
    floor_bytes = 4 * d * P * pairs
    rows = []
    with torch.no_grad():  # correctness of every backend's last (widest) output against eager's
        ref = chain_fwd(get_backend("eager"), xs, qs, gs, H)[-1].float()
    for bname in backends:
        if bname == "fla" and H != 1:
            continue
        try:
            be = fla_backend() if bname == "fla" else get_backend(bname.split("-")[0])
        except ImportError as exc:
            print(f"{name:5s} H={H:<2d} {bname:8s} skipped: {exc}", flush=True)
            continue
        leaves = xs + qs + gs

        def fwd():
            return chain_fwd(be, xs, qs, gs, H)

        def fwdbwd():
            outs = fwd()
            torch.autograd.backward(outs, douts)
            for t in leaves:
                t.grad = None

        with kernel_variant(bname):
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
        rows.append(dict(kernels_ms=prof, kernels_total_ms=sum(prof.values()),shape=name, d=d, L=L, B=B, T=T, H=H, backend=bname, pairs=pairs,
                         fwd_ms=ms_f, bwd_ms=ms_fb - ms_f, fwdbwd_ms=ms_fb, peak_extra_gib=peak,
                         floor_ms=floor_ms, floor_fraction=floor_ms / ms_fb,
                         effective_gbps=floor_bytes / ms_fb / 1e6, first_call_s=first,
                         last_out_rel_err_vs_eager=err, graph_fwdbwd_ms=graph,
                         graph_floor_fraction=floor_ms / graph if graph else None))
        print(f"{name:5s} H={H:<2d} {bname:8s} fwd {ms_f:8.3f}  bwd {ms_fb - ms_f:8.3f}  "
              f"fwd+bwd {ms_fb:8.3f} ms  floor {floor_ms:6.3f} ms ({floor_ms / ms_fb:5.1%})  "
              f"peak +{peak:5.2f} GiB  err {err:.1e}" + (f"  GPU-busy {sum(prof.values()):6.3f} ms" if prof else "")
              + (f"  graph {graph:7.3f} ms ({floor_ms / graph:5.1%})" if graph else ""),
              flush=True)
    return rows


def bench_delta(backends, bw, repeat, d=4096, H=8, N=9, B=2, T=4096, L=32):
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
        be = get_backend(bname.split("-")[0])

        def fb():
            out, _ = be.route(src, q, w, H, 1e-6, partial=part, gate=gate)
            torch.autograd.backward(out, dout)

        try:
            with kernel_variant(bname):
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


# Launch configurations the sweep tries: (BLOCK_P, num_warps[, maxnreg]) for the forward and
# (BLOCK_P, num_warps, programs per SM[, maxnreg]) for the stack backward. One or two warps per
# program keep the per-row reductions inside a warp (no block barrier per source row); maxnreg
# trades registers for resident warps (Nsight Compute at the 100M training shape: the stack
# kernel takes 218 registers, so 8 one-warp programs fit on an SM, not the 16 the grid assumes).
# At 1B every cap tried spilled and lost by 1.2-12x (h100_2026-11-23c/sweep_1b_train_regcap.log),
# so one cap per kernel stays in the lists, the mildest.
SWEEP_FWD = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4), (1, 2, 96)]
SWEEP_STACK = [(1, 1, 16), (1, 1, 8), (2, 1, 16), (1, 2, 8), (2, 2, 8), (1, 4, 4), (2, 4, 2), (4, 4, 2),
               (1, 2, 6, 168)]
# The 4-bytes/pair backward's gather (BLOCK_P, num_warps, dout prefetch[, maxnreg]); swept with
# MHAR_STACK_COLLECT's path on. Warps per position from 1 (d/32 registers per row tile per thread:
# 250-255 registers at d >= 1024, compiled offline) to 8.
# A fifth entry True runs the loop over readers in two passes (route_bwd_collect.TWO_PASS), which
# keeps fewer rows live, so that the register caps (fourth entry; 0: none) spill little: offline,
# Triton 3.6, 1B one warp 255 registers + 16 B of spills in one pass, 231 in two, and at a cap of
# 168 128 B of spills with loops barely longer (432 -> 460 instructions; one pass: 734 -> 888). On
# an H100 the caps still lost (results_h100.md, section 000000). A sixth entry True loads each
# reader's q*g tiles with its dout (route_bwd_collect LOADS_FIRST), before the dl store.
SWEEP_GATHER = [(1, 1, True), (1, 1, False), (1, 2, True), (1, 4, True), (1, 8, True), (1, 2, False), (1, 4, False),
                (2, 4, True), (2, 8, True), (4, 8, True), (4, 16, True),  # >1 position: q*g rows reused
                (1, 1, False, 0, True), (1, 1, False, 168, True), (1, 1, True, 168, True),
                (1, 1, False, 128, True), (1, 2, False, 0, True), (1, 4, False, 0, True),
                (1, 1, False, 0, False, True), (1, 1, True, 0, False, True), (1, 2, False, 0, False, True),
                (1, 2, True, 0, False, True)]
SWEEP_KINDS = ("fwd", "stack", "gather", "pair_e")
# pair_e_kernel: (readers per program, positions per dot step, warps); wider reader blocks read
# each source row fewer times
SWEEP_PAIR_E = [(16, 16, 4), (16, 32, 4), (16, 64, 4), (32, 16, 4), (32, 32, 4), (32, 64, 8), (64, 16, 4),
                (64, 32, 8), (16, 16, 8), (32, 16, 8)]
# MHAR_SWEEP_FWD, MHAR_SWEEP_STACK, MHAR_SWEEP_GATHER, MHAR_SWEEP_PAIR_E (JSON lists of configs)
# replace a kind's list for one run (a short device call that sweeps a few candidates).
SWEEP_FWD, SWEEP_STACK, SWEEP_GATHER, SWEEP_PAIR_E = (
    [tuple(c) for c in json.loads(os.environ[f"MHAR_SWEEP_{kind.upper()}"])]
    if os.environ.get(f"MHAR_SWEEP_{kind.upper()}") else default
    for kind, default in (("fwd", SWEEP_FWD), ("stack", SWEEP_STACK), ("gather", SWEEP_GATHER),
                          ("pair_e", SWEEP_PAIR_E)))


def sweep(bw: float, repeat: int, shapes: list[str], heads: list[int], out_path: str,
          kernels: tuple[str, ...] = ("fwd", "stack")) -> list[dict]:
    """Launch-configuration sweep of the triton kernels per shape/H, judged by device time
    (torch.profiler kernel sums: wall time here is dominated by host noise). Writes the chosen
    configs as JSON for MHAR_KERNEL_CONFIG (read at import by route_fwd / route_bwd)."""
    from mhar_probe.kernels import route_bwd, route_bwd_collect, route_fwd

    plans = [(k, cfgs, prefix) for k, cfgs, prefix in (("fwd", SWEEP_FWD, "route_fwd"),
                                                      ("stack", SWEEP_STACK, "stack_bwd"),
                                                      ("gather", SWEEP_GATHER, "stack_gather"),
                                                      ("pair_e", SWEEP_PAIR_E, "pair_e")) if k in kernels]
    rows = []
    for name in shapes:
        d, L, B, T = SHAPES[name]
        xs, qs, gs, douts = make_inputs(d, L, B, T)
        for H in heads:
            be = get_backend("triton")

            def fb():
                outs = chain_fwd(be, xs, qs, gs, H)
                torch.autograd.backward(outs, douts)
                for t in xs + qs + gs:
                    t.grad = None

            # the forward's and the gather's entries name the storage width they were swept at
            # (bytes per output / stored dout element: 2 in a 16-bit chain, 4 under autocast)
            eb = 2 if DTYPE in (torch.bfloat16, torch.float16) else 4
            tables = {"fwd": (route_fwd.FWD_CONFIG, (d, H, eb)), "stack": (route_bwd.STACK_CONFIG, (d, H, H)),
                      "gather": (route_bwd_collect.GATHER_CONFIG, (d, H, H, eb)),
                      "pair_e": (route_bwd_collect.PAIR_E_CONFIG, (d, H))}
            for kind, cfgs, prefix in plans:
                table, key = tables[kind]
                for cfg in cfgs:
                    table[key] = cfg
                    with kernel_variant("triton-collect" if kind in ("gather", "pair_e") else "triton"):
                        fb()  # compiles
                        ms = sum(v for k, v in kernel_ms(fb).items() if k.startswith(prefix))
                    rows.append(dict(sweep=kind, shape=name, H=H, cfg=cfg, gpu_ms=ms))
                mine = [r for r in rows if r["sweep"] == kind and r["shape"] == name and r["H"] == H]
                table[key] = min(mine, key=lambda r: r["gpu_ms"])["cfg"]
                print(f"SWEEP {name} H={H} {kind}: " + " ".join(f"{r['cfg']}:{r['gpu_ms']:.3f}" for r in mine)
                      + f" -> {table[key]}", flush=True)
            fwd_t, gather_t = route_fwd.FWD_CONFIG, route_bwd_collect.GATHER_CONFIG
            json.dump(dict(fwd=[[*k, *c] for k, c in fwd_t.items() if len(k) == 2],
                           fwd_by_dtype=[[*k, *c] for k, c in fwd_t.items() if len(k) == 3],
                           stack=[[d_, h_, hm, *c] for (d_, h_, hm), c in route_bwd.STACK_CONFIG.items()],
                           gather=[[*k, *c] for k, c in gather_t.items() if len(k) == 3],
                           gather_by_dtype=[[*k, *c] for k, c in gather_t.items() if len(k) == 4],
                           pair_e=[[d_, hm, *c] for (d_, hm), c in route_bwd_collect.PAIR_E_CONFIG.items()]),
                      open(out_path, "w"))  # after every shape: a cut-short sweep keeps what it found
    return rows


def host_profile(name: str, H: int, iters: int = 20) -> None:
    """Where the host's time goes in the triton chain (Python functions by own time)."""
    import cProfile
    import pstats

    d, L, B, T = SHAPES[name]
    xs, qs, gs, douts = make_inputs(d, L, B, T)
    be = get_backend("triton")

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
    unknown = [b for b in args.backends.split(",") if b not in BACKENDS]
    if unknown:
        raise UserError(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    bad = [s for s in args.shapes.split(",") + [x for x in args.sweep.split(",") if x] if s not in SHAPES]
    if bad:
        raise UserError(f"unknown shape(s) {', '.join(bad)}; choose from {', '.join(SHAPES)}")
    odd = [k for k in args.sweep_kernels.split(",") if k not in SWEEP_KINDS]
    if odd:
        raise UserError(f"unknown sweep kernel(s) {', '.join(odd)}; choose from {', '.join(SWEEP_KINDS)}")
    if not torch.cuda.is_available():
        raise UserError("the routing benchmark times the kernels on a CUDA GPU; none is visible here")


def run(args: argparse.Namespace) -> None:
    """Run the benchmark with parsed options (`mhar bench routing`: mhar_probe.cli.bench parses them)."""
    check_arguments(args)
    import triton

    import mhar_probe.kernels  # noqa: F401  (registers 'triton')

    global DTYPE, GRAPH
    GRAPH = args.graph
    DTYPE = "mixed" if args.dtype == "mixed" else getattr(torch, args.dtype)
    torch._dynamo.config.cache_size_limit = 64
    backends = args.backends.split(",")
    bw = copy_bandwidth()
    meta = dict(device=torch.cuda.get_device_name(), date=datetime.date.today().isoformat(),
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                copy_gbps=bw, dtype=args.dtype)
    print(json.dumps(meta), flush=True)
    rows = []
    if args.host_profile:
        host_profile(args.shapes.split(",")[0], int(args.heads.split(",")[0]))
    if args.sweep:
        rows += sweep(bw, args.repeat, args.sweep.split(","), list(map(int, args.heads.split(","))),
                      args.out.replace(".json", "_tuned.json"), tuple(args.sweep_kernels.split(",")))
        if args.sweep_only:
            json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
            return
    for name in args.shapes.split(","):
        for H in map(int, args.heads.split(",")):
            rows += bench_shape(name, *SHAPES[name], H, backends, bw, args.repeat)
            json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
    if not args.no_delta:
        rows += bench_delta(backends, bw, max(5, args.repeat // 2))
    json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
    print("\nshape  H  backend        fwd+bwd ms  vs triton  floor frac | graph ms  vs triton  floor frac")
    tri = {(r["shape"], r.get("H")): r for r in rows if r["backend"] == "triton" and "fwdbwd_ms" in r}
    nan = float("nan")
    for r in rows:
        if "fwdbwd_ms" not in r or "sweep" in r:
            continue
        t = tri.get((r["shape"], r["H"])) or {}
        g, tg = r.get("graph_fwdbwd_ms") or nan, t.get("graph_fwdbwd_ms") or nan
        print(f"{r['shape']:5s} {r['H']:2d} {r['backend']:15s} {r['fwdbwd_ms']:9.3f} "
              f"{r['fwdbwd_ms'] / t.get('fwdbwd_ms', nan):9.2f}x {r['floor_fraction']:9.1%} | "
              f"{g:8.3f} {g / tg:9.2f}x {r['floor_ms'] / g:9.1%}")


if __name__ == "__main__":  # the same messages and exit codes as `mhar bench routing`
    import sys

    from mhar_probe.cli import main as cli_main

    sys.exit(cli_main(["bench", "routing", *sys.argv[1:]]))
