"""Host time of the shared-stack glue alone, on the CPU, with every kernel launch stubbed out.

The routing chain of one microbatch (2L+1 calls, the model's order) runs its Python/autograd
glue on tiny CPU tensors while `Launcher.__call__` does nothing, so what is timed is the host
work per routing call that a GPU step also pays (argument packing, allocations, autograd
nodes), minus the launches themselves (count them: `launches` in the output). The current
backward of a stack built without the sites' parameters ("current": the stack_bwd kernels) and
the 4-bytes/pair backward of one built with them ("collect", the model's) alternate round by round; each
figure is the median over rounds. No GPU needed:

    python benchmarks/kernels/host_glue_cpu.py --layers 12 24 36 --out host_glue_cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU tensors pass the device check

import torch  # noqa: E402

from mhar_probe.kernels import TritonSourceStack, launch  # noqa: E402


def chain(L: int, d: int, H: int, P: int, qs, gs, collect: bool = True
          ) -> tuple[TritonSourceStack, list[torch.Tensor]]:
    S = 2 * L + 1
    stack = TritonSourceStack(S, params=list(zip(qs, gs)) if collect else None)
    x = torch.zeros(1, P, d, requires_grad=True)
    outs = []
    for s in range(S):
        stack.append(x if s == 0 else outs[-1] * 1.0)  # a sublayer stand-in: one autograd op
        outs.append(stack.route(qs[s], gs[s], H, 1e-6, s + 1)[0])
    return stack, outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[12, 24, 36])
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--positions", type=int, default=8)
    ap.add_argument("--rounds", "--iters", type=int, default=15, help="timed rounds per arm")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    launches = [0]

    def stub(self, *a, **k):  # no kernel runs: outputs stay as allocated
        launches[0] += 1

    launch.Launcher.__call__ = stub
    torch.set_num_threads(1)
    rows = []
    for L in args.layers:
        S = 2 * L + 1
        qs = [torch.zeros(args.d, requires_grad=True) for _ in range(S)]
        gs = [torch.ones(args.d, requires_grad=True) for _ in range(S)]
        times: dict[str, dict[str, list[float]]] = {"current": {"fwd": [], "bwd": []},
                                                      "collect": {"fwd": [], "bwd": []}}
        counts = {}
        for r in range(args.rounds + 2):  # two warm-up rounds
            for arm in ("current", "collect"):
                launches[0] = 0
                t0 = time.perf_counter()
                _, outs = chain(L, args.d, args.heads, args.positions, qs, gs, collect=arm == "collect")
                t1 = time.perf_counter()
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
                t2 = time.perf_counter()
                counts[arm] = launches[0]
                if r >= 2:
                    times[arm]["fwd"].append((t1 - t0) * 1e3)
                    times[arm]["bwd"].append((t2 - t1) * 1e3)
        row = dict(layers=L, calls=S, d=args.d, H=args.heads)
        for arm, t in times.items():
            fwd, bwd = statistics.median(t["fwd"]), statistics.median(t["bwd"])
            row[arm] = dict(fwd_ms=round(fwd, 3), bwd_ms=round(bwd, 3), us_per_call=round(
                (fwd + bwd) / S * 1e3, 1), launches=counts[arm])
        row["bwd_ratio_current_over_collect"] = round(row["current"]["bwd_ms"] / row["collect"]["bwd_ms"], 3)
        rows.append(row)
        print(f"L={L:3d} calls={S:3d} | current fwd {row['current']['fwd_ms']:7.2f} ms bwd "
              f"{row['current']['bwd_ms']:7.2f} ms ({row['current']['launches']} launches) | collect fwd "
              f"{row['collect']['fwd_ms']:7.2f} ms bwd {row['collect']['bwd_ms']:7.2f} ms "
              f"({row['collect']['launches']} launches) | bwd ratio {row['bwd_ratio_current_over_collect']}")
    meta = dict(date=datetime.date.today().isoformat(), cpu=platform.processor() or platform.machine(),
                python=platform.python_version(), torch=torch.__version__, rows=rows)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
