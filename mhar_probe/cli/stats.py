"""`mhar stats mcnemar|ceg|tails`: parse, call the statistic (`analysis.stats.paired_eval`,
`.gain`, `.tails`) and print its lines.

    stats mcnemar DIR_A DIR_B [--task T ...] [--filter F ...] [--metric M] [--out DIR] [--overwrite]
    stats ceg RUNS... [--alpha A ...] [--divide-routing]
    stats tails RUNS... [--k 11]
"""

from __future__ import annotations

import argparse

from analysis.stats.compare import MAX_UNPAIRED

from ..tail import TAIL_K
from .args import require_existing


def add_stats_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `stats` with sub-commands `mcnemar`, `ceg`, `tails` to an argparse subparsers object."""
    stats = subparsers.add_parser("stats", help="statistics on eval outputs and training curves")
    sub = stats.add_subparsers(dest="stats_command", required=True, metavar="STATS_COMMAND")

    p = sub.add_parser("mcnemar", help="paired exact McNemar per task on two lm-eval --log_samples outputs")
    p.add_argument("dir_a", help="harness --output_path of arm A (e.g. the control)")
    p.add_argument("dir_b", help="harness --output_path of arm B (e.g. MHAR)")
    p.add_argument("--task", nargs="+", default=None, help="task names or shell patterns (default: all shared)")
    p.add_argument("--filter", nargs="+", default=None, help="filters (default: every filter of a task)")
    p.add_argument("--metric", default=None, help="per-item 0/1 metric (default: acc_norm for multiple "
                                                   "choice when present, else acc / exact_match / pass@1)")
    p.add_argument("--out", default=None, help="write mcnemar.csv / .json / .tex here")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the bootstrap CI")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--allow-unpaired", action="store_true",
                   help=f"test the items that pair even when more than {MAX_UNPAIRED * 100:.0f}%% of a task's do not")
    p.add_argument("--date-a", default=None, help="harness run date id in DIR_A (default: latest)")
    p.add_argument("--date-b", default=None, help="harness run date id in DIR_B (default: latest)")
    p.set_defaults(func=cmd_mcnemar)

    p = sub.add_parser("ceg", help="power-law fit to baseline curves and compute-equivalent gain")
    p.add_argument("runs", nargs="+", help="run directories (baseline and method runs)")
    p.add_argument("--alpha", type=float, nargs="+", default=[], help="extra exponents for the bracket")
    p.add_argument("--baseline", default="baseline", help="method name of the baseline runs")
    p.add_argument("--k", type=int, default=TAIL_K, help="tail-mean length (default 11)")
    p.add_argument("--min-flops", type=float, default=0.0, help="fit only points above this compute")
    p.add_argument("--divide-routing", action="store_true",
                   help="divide out each method's extra FLOPs per step (from metrics.jsonl)")
    p.add_argument("--json", default=None, help="also write the fit and table as JSON to this file")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_ceg)

    p = sub.add_parser("tails", help="tail-means, paired per-seed deltas and best-vs-best over LR")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--k", type=int, default=TAIL_K, help="tail-mean length (default 11)")
    p.add_argument("--baseline", default="baseline")
    p.add_argument("--level", type=float, default=0.95)
    p.add_argument("--json", default=None, help="also write the tables as JSON to this file")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=cmd_tails)
    return stats


def _print(lines: list[str]) -> int:
    for line in lines:
        print(line)
    return 0


def cmd_mcnemar(args: argparse.Namespace) -> int:
    require_existing("eval output", args.dir_a, args.dir_b)  # (before the imports: torch takes seconds)
    from analysis.stats.paired_eval import mcnemar_eval_dirs

    return _print(mcnemar_eval_dirs(
        args.dir_a, args.dir_b, tasks=args.task, filters=args.filter, metric=args.metric, out=args.out,
        overwrite=args.overwrite, n_boot=args.n_boot, level=args.level, seed=args.seed,
        allow_unpaired=args.allow_unpaired, date_a=args.date_a, date_b=args.date_b).lines())


def cmd_tails(args: argparse.Namespace) -> int:
    require_existing("run", *args.runs)
    from analysis.stats.tails import tails

    return _print(tails(args.runs, k=args.k, baseline=args.baseline, level=args.level, json=args.json,
                        overwrite=args.overwrite).lines())


def cmd_ceg(args: argparse.Namespace) -> int:
    require_existing("run", *args.runs)
    from analysis.stats.gain import compute_equivalent_gain

    return _print(compute_equivalent_gain(args.runs, alpha=args.alpha, baseline=args.baseline, k=args.k,
                                          min_flops=args.min_flops, divide_routing=args.divide_routing,
                                          json=args.json, overwrite=args.overwrite).lines())
