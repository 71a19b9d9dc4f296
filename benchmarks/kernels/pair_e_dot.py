"""pair_e's dot over the bf16 buffer, split TF32 (r_j in dl) against IEEE fp32, in one process.

Autocast's layout (fp32 source 0, bf16 buffer, fp32 outputs and douts; H = 8) at the training
microbatches: every routing call of one microbatch, forward + backward, built as the model
builds its stack, under each pair_e plan in turn:

  split  the default (`bwd_collect.pair_e_plan`: R_IN_DL over the buffer)
  ieee   the same plan with SPLIT_DOT and R_IN_DL off (the dot before 2026-11-27)

Per shape and plan: pair_e_kernel's device ms (torch.profiler, median of 5 profiled runs), the
routing's whole fwd + bwd in a CUDA graph (median ms), and the query / key-norm gradients'
max |split - ieee| / max |ieee| (the benchmark's queries and norm weights are bf16, so this is about
one bf16 ulp where a rounding flips; `tests/gpu` compares the fp32 gradients) and whether the source
gradients are bitwise equal (pair_e does not touch them). The plans alternate run by run so drift hits both.

    PYTHONPATH=. python benchmarks/kernels/pair_e_dot.py --out pair_e_dot.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import mhar_probe.bench.routing as bench
import mhar_probe.kernels.route.autograd as kad
from mhar_probe.provenance import benchmark_record, git_commit, software
from mhar_probe.model.routing import get_backend

PLAN = kad.pair_e_plan


def ieee_plan(*args, **kwargs):
    block_c, consts, warps = PLAN(*args, **kwargs)
    return block_c, {**consts, "SPLIT_DOT": False, "R_IN_DL": False}, warps


PLANS = {"split": PLAN, "ieee": ieee_plan}


def run_shape(name: str, heads: int, repeat: int) -> dict:
    d, L, B, T = bench.SHAPES[name]
    xs, qs, gs, douts = bench.make_inputs(d, L, B, T)
    leaves = xs + qs + gs
    backend = get_backend("triton")

    def fwdbwd():
        outs = bench.chain_fwd(backend, xs, qs, gs, heads)
        torch.autograd.backward(outs, douts)

    def grads() -> list[torch.Tensor]:
        for t in leaves:
            t.grad = None
        fwdbwd()
        out = [t.grad.clone() for t in leaves]
        for t in leaves:
            t.grad = None
        return out

    row: dict = dict(shape=name, H=heads, d=d, L=L, B=B, T=T)
    got = {}
    for plan in PLANS:
        kad.pair_e_plan = PLANS[plan]
        got[plan] = grads()
    nsrc = len(xs)
    row["sources_bitwise"] = all(torch.equal(a, b) for a, b in zip(got["split"][:nsrc], got["ieee"][:nsrc]))
    # max |split - ieee| / max |ieee| per tensor (call 0 reads one source: its dq, dg are exactly 0)
    row["max_rel_dq_dg"] = max(((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()
                               for a, b in zip(got["split"][nsrc:], got["ieee"][nsrc:]))
    times: dict[str, list[float]] = {p: [] for p in PLANS}
    graphs: dict[str, list[float]] = {p: [] for p in PLANS}

    def step():
        fwdbwd()
        for t in leaves:
            t.grad = None

    for _ in range(repeat):
        for plan in PLANS:
            kad.pair_e_plan = PLANS[plan]
            times[plan].append(bench.kernel_ms(step).get("pair_e_kernel", float("nan")))
    for _ in range(2):
        for plan in PLANS:
            kad.pair_e_plan = PLANS[plan]
            graphs[plan].append(bench.graph_ms(step, repeat))
    for plan in PLANS:
        row[f"pair_e_ms_{plan}"] = statistics.median(times[plan])
        row[f"graph_ms_{plan}"] = statistics.median(graphs[plan])
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="100M-train,350M-train,1B-train")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="pair_e_dot.json")
    ap.add_argument("--commit", default=None, help="the commit measured (default: git's, where there is a .git)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("pair_e_dot.py times CUDA kernels: no GPU here")
    bench.DTYPE = "mixed"
    meta = dict(device=torch.cuda.get_device_name(), commit=args.commit or git_commit(), **software(),
                provenance=benchmark_record("cuda", args.commit))
    rows = []
    for name in args.shapes.split(","):
        try:
            rows.append(run_shape(name, args.heads, args.repeat))  # swaps kad.pair_e_plan
        finally:
            kad.pair_e_plan = PLAN
        json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
        r = rows[-1]
        print(f"{name:11s} pair_e split {r['pair_e_ms_split']:6.3f} ieee {r['pair_e_ms_ieee']:6.3f} ms "
              f"({r['pair_e_ms_split'] / r['pair_e_ms_ieee']:.2f}x)  graph split {r['graph_ms_split']:7.3f} "
              f"ieee {r['graph_ms_ieee']:7.3f} ms  dq/dg rel {r['max_rel_dq_dg']:.1e}  "
              f"sources bitwise {r['sources_bitwise']}", flush=True)


if __name__ == "__main__":
    main()
