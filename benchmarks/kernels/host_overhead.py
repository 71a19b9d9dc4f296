"""Where the host's time goes in the shared-stack routing chain (GPU only).

Prints, for one shape: host milliseconds of the forward and of the backward of all routing
calls of one microbatch (time.perf_counter with no synchronisation: the GPU runs behind, so
this is the host's own time), the cost of one launch of the forward kernel through Triton's
path, a small torch op and an allocation for scale, and a cProfile of the chain by own time.

    python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --out host.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import torch

import mhar_probe.kernels  # noqa: F401  (registers 'triton')
from mhar_probe.bench.routing import SHAPES, chain_fwd, make_inputs
from mhar_probe.model.routing import get_backend


def host_ms(fn, iters: int) -> float:
    """Median host milliseconds of fn() without synchronising inside the timed region."""
    out = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def per_launch_us(fn, iters: int = 2000) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    return dt / iters * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="100M")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    d, L, B, T = SHAPES[args.shape]
    H = args.heads
    xs, qs, gs, douts = make_inputs(d, L, B, T)
    be = get_backend("triton")
    leaves = xs + qs + gs
    state = {}

    def fwd():
        state["outs"] = chain_fwd(be, xs, qs, gs, H)

    def bwd():
        torch.autograd.backward(state.pop("outs"), douts)
        for t in leaves:
            t.grad = None

    for _ in range(3):
        fwd()
        bwd()
    f_ms, b_ms = [], []
    for _ in range(args.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fwd()
        t1 = time.perf_counter()
        bwd()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        f_ms.append((t1 - t0) * 1e3)
        b_ms.append((t2 - t1) * 1e3)
    calls = 2 * L + 1
    res = dict(shape=args.shape, H=H, calls=calls, device=torch.cuda.get_device_name(),
               fwd_host_ms=statistics.median(f_ms), bwd_host_ms=statistics.median(b_ms))

    # one launch of a small torch op and of an allocation, for scale
    x = torch.empty(16, device="cuda")
    res["torch_add_us"] = per_launch_us(lambda: x.add_(1.0))
    res["torch_empty_PxD_us"] = per_launch_us(lambda: torch.empty((B * T, d), device="cuda"))

    # one Triton launch of the forward kernel at this shape (N = 1)
    from mhar_probe.kernels.route_fwd import launch_route_fwd

    stack = be.new_stack(calls)
    with torch.no_grad():
        for s in range(calls):
            stack.append(xs[s])
    P = B * T
    out = torch.empty((P, d), dtype=stack.rows.dtype, device="cuda")
    W = torch.empty((calls, P, H), dtype=torch.float32, device="cuda")
    res["route_fwd_launch_us"] = per_launch_us(
        lambda: launch_route_fwd(stack.rows, 1, P, qs[0], gs[0], H, 1e-6, out, W, v0=stack.row0), 500)

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        fwd()
        bwd()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    res["cprofile_top"] = s.getvalue()
    print(s.getvalue()[-6000:])
    print(json.dumps({k: v for k, v in res.items() if k != "cprofile_top"}))
    print(f"HOST {args.shape} H={H}: fwd {res['fwd_host_ms']:.2f} ms, bwd {res['bwd_host_ms']:.2f} ms "
          f"for {calls} calls = {(res['fwd_host_ms'] + res['bwd_host_ms']) / calls * 1e3:.0f} us/call; "
          f"one route_fwd launch {res['route_fwd_launch_us']:.1f} us; torch add {res['torch_add_us']:.1f} us")
    if args.out:
        json.dump(res, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
