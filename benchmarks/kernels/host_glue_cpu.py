"""Host time of the shared-stack glue alone, on the CPU: every kernel launch is a no-op.

The GPU machine's host pays for autograd, allocations, Python glue and Triton launches per
routing call (`host_overhead.py`, GPU only). This script takes the launches out and runs the
same chain (the model's order: append source s, route over [0, s+1)) on CPU tensors, so the
glue's own cost can be measured and cut without a GPU. The numbers are this CPU's, not the
GPU host's: compare variants within one run.

    TRITON_INTERPRET=1 python benchmarks/kernels/host_glue_cpu.py --layers 12 --iters 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TRITON_INTERPRET", "1")  # the triton backend accepts CPU tensors only so

import torch  # noqa: E402

from mhar_probe.kernels import launch  # noqa: E402
from mhar_probe.kernels.autograd import TritonSourceStack  # noqa: E402


def chain(xs, qs, gs, H):
    stack = TritonSourceStack(len(xs))
    outs = []
    for s in range(len(xs)):
        stack.append(xs[s])
        outs.append(stack.route(qs[s], gs[s], H, 1e-6, s + 1)[0])
    return outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    launch.Launcher.__call__ = lambda self, grid, a, consts, num_warps, maxnreg=None: None  # no kernels
    torch.manual_seed(0)
    S, d = 2 * args.layers + 1, args.d
    xs = [torch.randn(1, 4, d, requires_grad=True) for _ in range(S)]
    qs = [torch.randn(d, requires_grad=True) for _ in range(S)]
    gs = [torch.ones(d, requires_grad=True) for _ in range(S)]
    douts = [torch.randn(1, 4, d) for _ in range(S)]
    f_us, b_us = [], []
    for i in range(args.iters + 3):
        t0 = time.perf_counter()
        outs = chain(xs, qs, gs, args.heads)
        t1 = time.perf_counter()
        torch.autograd.backward(outs, douts)
        t2 = time.perf_counter()
        for t in xs + qs + gs:
            t.grad = None
        if i >= 3:
            f_us.append((t1 - t0) / S * 1e6)
            b_us.append((t2 - t1) / S * 1e6)
    f, b = statistics.median(f_us), statistics.median(b_us)
    print(f"glue per routing call ({S} calls, no kernels): fwd {f:.0f} us, bwd {b:.0f} us, total {f + b:.0f} us "
          f"(median of {args.iters}); fastest: fwd {min(f_us):.0f} us, bwd {min(b_us):.0f} us")


if __name__ == "__main__":
    main()
