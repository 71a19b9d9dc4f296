"""Where the host's time goes in the shared-stack routing chain (GPU only).

Prints, for one shape: host milliseconds of the forward and of the backward of all routing
calls of one microbatch (time.perf_counter with no synchronisation: the GPU runs behind, so
this is the host's own time) and the cost of one launch of the forward kernel, each through
Triton's launch path and through the direct launches (alternated over `--rounds` rounds in one
process; the ratio is the median of the per-round ratios), a small torch op and an allocation
for scale, and a cProfile of the chain by own time.

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
    ap.add_argument("--shape", default="100M", choices=list(SHAPES))
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10, help="fwd+bwd iterations per arm and round")
    ap.add_argument("--rounds", type=int, default=6, help="alternations of the two launch paths")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("host_overhead.py times the triton chain's host side on a CUDA GPU; none is visible here")
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
    from mhar_probe.kernels.route import bwd as route_bwd, bwd_collect as route_bwd_collect, fwd as route_fwd
    from mhar_probe.kernels.route.fwd import launch_route_fwd

    launchers = [k for mod in (route_fwd, route_bwd, route_bwd_collect) for k in vars(mod).values()
                 if isinstance(k, launch.Launcher)]

    def set_direct(direct: bool) -> None:  # False: Triton's own launch path every time
        for k in launchers:
            k._direct_ok = direct

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
    # Triton's own launch path against the direct launches (kernels/launch.py), alternated
    # round by round in one process: this VM's host speed drifts within a call (a small torch op
    # moved 1.6x between two calls), so each round measures the two arms seconds apart and the
    # reported ratio is the median over rounds.
    arms = ((False, "jit"), (True, "direct"))
    for direct, _ in arms:  # compile and fill the direct path's cache
        set_direct(direct)
        for _ in range(2):
            fwd()
            bwd()
    samples = {tag: dict(fwd=[], bwd=[], launch=[]) for _, tag in arms}
    ratios = []
    for _ in range(args.rounds):
        per_round = {}
        for direct, tag in arms:
            set_direct(direct)
            for _ in range(args.iters):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fwd()
                t1 = time.perf_counter()
                bwd()
                t2 = time.perf_counter()
                torch.cuda.synchronize()
                samples[tag]["fwd"].append((t1 - t0) * 1e3)
                samples[tag]["bwd"].append((t2 - t1) * 1e3)
            # one launch of the forward kernel at this shape (N = 1)
            samples[tag]["launch"].append(per_launch_us(
                lambda: launch_route_fwd(stack.rows, 1, P, qs[0], gs[0], H, 1e-6, out, W, v0=stack.row0), 200))
            n = args.iters
            per_round[tag] = statistics.median(
                [f + b for f, b in zip(samples[tag]["fwd"][-n:], samples[tag]["bwd"][-n:])])
        ratios.append(per_round["jit"] / per_round["direct"])
    set_direct(True)
    for _, tag in arms:
        res[f"fwd_host_ms_{tag}"] = statistics.median(samples[tag]["fwd"])
        res[f"bwd_host_ms_{tag}"] = statistics.median(samples[tag]["bwd"])
        res[f"us_per_call_{tag}"] = (res[f"fwd_host_ms_{tag}"] + res[f"bwd_host_ms_{tag}"]) / calls * 1e3
        res[f"route_fwd_launch_us_{tag}"] = statistics.median(samples[tag]["launch"])
    res["rounds"] = args.rounds
    res["host_ratio_jit_over_direct_per_round"] = ratios
    res["host_ratio_jit_over_direct_median"] = statistics.median(ratios)

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
    print(f"host time, Triton's path / direct, median over {args.rounds} alternated rounds: "
          f"{res['host_ratio_jit_over_direct_median']:.3f} (per round: "
          f"{', '.join(f'{r:.3f}' for r in res['host_ratio_jit_over_direct_per_round'])})")
    print(f"torch add {res['torch_add_us']:.1f} us; hooks {res['launch_hooks']}")
    if args.out:
        json.dump(res, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
