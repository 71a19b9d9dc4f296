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

    from mhar_probe.kernels import launch
    from mhar_probe.kernels.route_fwd import launch_route_fwd

    calls = 2 * L + 1
    res = dict(shape=args.shape, H=H, calls=calls, device=torch.cuda.get_device_name(),
               launch_hooks=[repr(h) for h in launch._hooks()])
    stack = be.new_stack(calls)
    with torch.no_grad():
        for s in range(calls):
            stack.append(xs[s])
    P = B * T
    out = torch.empty((P, d), dtype=stack.rows.dtype, device="cuda")
    W = torch.empty((calls, P, H), dtype=torch.float32, device="cuda")
    # Triton's own launch path, then the direct launches (kernels/launch.py), in one process
    for direct, tag in ((False, "jit"), (True, "direct")):
        launch.DIRECT = direct
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
        res[f"fwd_host_ms_{tag}"] = statistics.median(f_ms)
        res[f"bwd_host_ms_{tag}"] = statistics.median(b_ms)
        res[f"us_per_call_{tag}"] = (res[f"fwd_host_ms_{tag}"] + res[f"bwd_host_ms_{tag}"]) / calls * 1e3
        # one launch of the forward kernel at this shape (N = 1)
        res[f"route_fwd_launch_us_{tag}"] = per_launch_us(
            lambda: launch_route_fwd(stack.rows, 1, P, qs[0], gs[0], H, 1e-6, out, W, v0=stack.row0), 500)

    # one launch of a small torch op and of an allocation, for scale
    x = torch.empty(16, device="cuda")
    res["torch_add_us"] = per_launch_us(lambda: x.add_(1.0))
    res["torch_empty_PxD_us"] = per_launch_us(lambda: torch.empty((B * T, d), device="cuda"))

    prof = cProfile.Profile()  # with the direct launches
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
    for tag in ("jit", "direct"):
        print(f"HOST {args.shape} H={H} {tag:>6}: fwd {res[f'fwd_host_ms_{tag}']:.2f} ms, bwd "
              f"{res[f'bwd_host_ms_{tag}']:.2f} ms for {calls} calls = {res[f'us_per_call_{tag}']:.0f} us/call; "
              f"one route_fwd launch {res[f'route_fwd_launch_us_{tag}']:.1f} us")
    print(f"torch add {res['torch_add_us']:.1f} us; hooks {res['launch_hooks']}")
    if args.out:
        json.dump(res, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
