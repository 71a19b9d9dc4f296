"""`mhar bench routing ...`: the routing kernel benchmark (GPU). The arguments after `routing`
are parsed here (`routing_parser`) and handed to `mhar_probe.bench.routing.run`."""

from __future__ import annotations

import argparse
from typing import Sequence

from .args import RawDescriptionDefaultsHelpFormatter


def routing_parser() -> argparse.ArgumentParser:
    """The options of `mhar bench routing` (imports the benchmark, hence torch)."""
    from ..bench.routing import SWEEP_KINDS, VARIANTS
    from ..bench.routing import __doc__ as description

    ap = argparse.ArgumentParser(prog="mhar bench routing", description=description,
                                 formatter_class=RawDescriptionDefaultsHelpFormatter)
    ap.add_argument("--out", default="results.json")
    ap.add_argument("--backends", default="triton,compile,eager",
                    help="comma-separated, timed in this order in one process: triton, compile, eager, "
                         "fla, or a triton variant with a KernelConfig field changed, for a same-run "
                         "ratio ("
                         + ", ".join(VARIANTS) + "; see VARIANTS in mhar_probe/bench/routing.py)")
    ap.add_argument("--heads", default="1,8")
    ap.add_argument("--shapes", default="100M,350M,1B")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-delta", action="store_true")
    ap.add_argument("--sweep", default="", help="shapes to sweep launch configs on first, e.g. 100M")
    ap.add_argument("--sweep-only", action="store_true", help="stop after the sweep")
    ap.add_argument("--sweep-kernels", default="fwd,gather",
                    help="which kernels the sweep tunes, in order: " + ", ".join(SWEEP_KINDS) + " (stack: the "
                         "backward of a stack built without the sites' parameters, which the model does not run; "
                         "gather: judged by the gather and fold kernels, as the fold runs under the gather's row "
                         "where the table has no fold row; fold: the fold kernel's own rows, two sources per "
                         "iteration and prefetch 2 among them, judged by the fold kernel alone)")
    ap.add_argument("--launch-table", default=None,
                    help="a launch-table file (what --sweep writes) laid over the built-in table for every "
                         "triton run (KernelConfig.launch_table)")
    ap.add_argument("--graph", action="store_true",
                    help="also time a CUDA-graph replay of each backend's fwd+bwd (no host launch cost)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "mixed"],
                    help="source/dout storage (mixed: bf16 autocast training's layout, an fp32 "
                         "embedding and bf16 sublayer outputs; float32: all fp32)")
    ap.add_argument("--commit", default=None,
                    help="the commit measured, recorded in the JSON (default: git rev-parse of this checkout; "
                         "a copied tree without .git records none)")
    ap.add_argument("--check-grads", action="store_true",
                    help="before timing a shape, check each triton variant's gradients against triton's "
                         "(the first backend): reported bitwise or as a max relative difference, a shape "
                         "beyond 1e-5 refused untimed")
    ap.add_argument("--host-profile", action="store_true",
                    help="cProfile the host side of the triton chain (first shape, first H) and print it")
    return ap


def routing_main(argv: Sequence[str] | None = None) -> None:
    """Parse the benchmark's own arguments and run it (benchmarks/kernels/bench_routing.py)."""
    from ..bench.routing import run

    run(routing_parser().parse_args(None if argv is None else list(argv)))


def cmd_bench(args: argparse.Namespace) -> int:
    if args.what == "routing":
        routing_main(args.rest)
    return 0


def add_bench_subparser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `bench`; handler: cmd_bench."""
    p = sub.add_parser("bench", help="GPU benchmarks: `mhar bench routing --help`",
                       description="GPU benchmarks. `routing`: every routing call of one microbatch "
                                   "at the paper's kernel-table shapes, per backend, against the byte floor.")
    p.add_argument("what", choices=["routing"], help="which benchmark")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="its arguments (see `mhar bench routing --help`)")
    p.set_defaults(func=cmd_bench)
    return p
