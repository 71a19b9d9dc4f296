"""`mhar stats ...`: argparse sub-commands for the statistics (each handler returns an exit code).

    stats mcnemar DIR_A DIR_B [--task T ...] [--filter F ...] [--metric M] [--out DIR] [--overwrite]
    stats ceg RUNS... [--alpha A ...] [--divide-routing]
    stats tails RUNS... [--k 11]

The main CLI calls `add_stats_subparser(subparsers)` and turns `StatsError` into one line on
stderr and exit status 2; `main()` here does the same for `python -m analysis.stats.cli`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mhar_probe.model.methods import run_label

from ..run import run_paths
from .output import write_text_new
from .ceg import ceg_table, final_points, fit_power_law, lower_envelope
from .compare import MAX_UNPAIRED, compare_eval_dirs
from .curves import TAIL_K, best_vs_best, load_run, paired_seed_deltas
from .errors import StatsError
from .report import format_table, write_outputs


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


# ----------------------------------------------------------------------------- handlers
def cmd_mcnemar(args: argparse.Namespace) -> int:
    if args.n_boot < 1:
        raise StatsError(f"--n-boot must be positive, got {args.n_boot}")
    if args.out:  # fail before the (slow) work if outputs exist
        from .output import check_writable
        out = Path(args.out)
        check_writable([out / f"mcnemar.{s}" for s in ("csv", "json", "tex")], overwrite=args.overwrite)
    cmp = compare_eval_dirs(args.dir_a, args.dir_b, tasks=args.task, filters=args.filter, metric=args.metric,
                            n_boot=args.n_boot, level=args.level, seed=args.seed,
                            date_a=args.date_a, date_b=args.date_b,
                            max_unpaired=1.0 if args.allow_unpaired else MAX_UNPAIRED)
    print(format_table(cmp))
    if args.out:
        for p in write_outputs(cmp, args.out, overwrite=args.overwrite):
            print(f"wrote {p}")
    return 0


def _load_runs(paths: Sequence[str], k: int) -> list[dict[str, Any]]:
    """The runs among `paths` (`analysis.run.run_paths`: what is not a run is skipped with a note)."""
    return [load_run(p, k) for p in run_paths(paths, error=StatsError)]


def _fmt(x: Any, spec: str = ".4f") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else format(x, spec)
    return str(x)


def _print_table(head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def _write_json(path: str | None, doc: dict[str, Any], overwrite: bool) -> None:
    if path:
        write_text_new(path, json.dumps(doc, indent=2, default=_json_default) + "\n", overwrite=overwrite)
        print(f"wrote {path}")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(type(o).__name__)


def cmd_tails(args: argparse.Namespace) -> int:
    runs = _load_runs(args.runs, args.k)
    print(f"tail-mean of the last {args.k} evaluations")
    _print_table(["run", "preset", "method", "H", "kv", "lr", "seed", "evals", "tail-mean"],
                 [[r["path"], _fmt(r["preset"]), r["method"], _fmt(r["H"]), _fmt(r["kv"]), _fmt(r["lr"], "g"),
                   _fmt(r["seed"]), str(len(r["curve"])), _fmt(r["tail_mean"])] for r in runs])
    doc: dict[str, Any] = {"k": args.k, "runs": [{k: v for k, v in r.items() if k != "curve"} for r in runs]}
    if any(r["method"] == args.baseline for r in runs) and any(r["method"] != args.baseline for r in runs):
        rows = paired_seed_deltas(runs, baseline=args.baseline, level=args.level)
        print(f"\npaired per-seed deltas vs {args.baseline} (method - baseline; t-interval {args.level:.0%})")
        _print_table(["preset", "method", "H", "kv", "lr", "n", "mean", "sd", "SE", "CI", "|d|/SE", "p", "unpaired"],
                     [[_fmt(r.preset), r.method, _fmt(r.H), _fmt(r.kv), _fmt(r.lr, "g"), str(r.n), _fmt(r.mean, "+.4f"),
                       _fmt(r.sd), _fmt(r.se), f"[{_fmt(r.ci_low, '+.4f')}, {_fmt(r.ci_high, '+.4f')}]",
                       _fmt(r.abs_over_se, ".1f"), _fmt(r.p_value, ".3g"), ",".join(map(str, r.unpaired_seeds)) or "-"]
                      for r in rows])
        doc["seed_deltas"] = [r.as_dict() for r in rows]
    if len({r["lr"] for r in runs}) > 1:
        rows_lr = best_vs_best(runs, baseline=args.baseline)
        print("\nbest-vs-best learning rate (delta vs the best baseline of the preset)")
        _print_table(["preset", "method", "H", "kv", "best lr", "tail-mean", "delta", "by lr"],
                     [[_fmt(r.preset), r.method, _fmt(r.H), _fmt(r.kv), _fmt(r.best_lr, "g"), _fmt(r.tail_mean),
                       _fmt(r.delta, "+.4f"), " ".join(f"{k}:{v:.4f}" for k, v in r.by_lr.items())] for r in rows_lr])
        doc["best_vs_best"] = [r.as_dict() for r in rows_lr]
    _write_json(args.json, doc, args.overwrite)
    return 0


def cmd_ceg(args: argparse.Namespace) -> int:
    runs = _load_runs(args.runs, args.k)
    base = [r for r in runs if r["method"] == args.baseline]
    others = [r for r in runs if r["method"] != args.baseline]
    if not base:
        raise StatsError(f"no baseline runs (method {args.baseline!r}) among the given runs")
    if not others:
        raise StatsError("no method runs besides the baseline; pass method run directories too")
    curves = []
    for r in base:
        pts = [p for p in r["curve"] if p.get("flops")]
        if len(pts) < 2:
            raise StatsError(f"{r['path']}: fewer than two evaluations with positive 'flops' in metrics.jsonl")
        curves.append(([p["flops"] for p in pts], [p["val_loss"] for p in pts]))
    fits = {"envelope": fit_power_law(*lower_envelope(curves, min_flops=args.min_flops))}
    notes = []
    fc, fl = final_points(curves)
    if np.unique(fc).size >= 2:
        fits["final"] = fit_power_law(fc, fl)
    else:
        notes.append("final-points fit skipped: needs baseline runs at two or more compute budgets")
    print("power-law fits L = A C^-alpha (least squares in log-log space)")
    _print_table(["fit", "alpha", "A", "R^2 (log)", "points", "C range"],
                 [[k, f"{f.alpha:.4f}", f"{f.A:.4g}", _fmt(f.r2), str(f.n), f"{f.c_min:.3g}..{f.c_max:.3g}"]
                  for k, f in fits.items()])
    alphas = {k: f.alpha for k, f in fits.items() if f.alpha > 0}
    for k, f in fits.items():
        if f.alpha <= 0:
            notes.append(f"{k} fit has alpha={f.alpha:.4f} <= 0 (loss not falling with compute); not used")
    for a in args.alpha:
        if a <= 0:
            raise StatsError(f"--alpha must be positive, got {a}")
        alphas[f"alpha={a:g}"] = a
    if not alphas:
        raise StatsError("no usable exponent: the fits gave alpha <= 0 and no --alpha was given")
    # per preset: mean tail-mean of the baseline and of every method configuration
    by_preset: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in base:
        by_preset[r["scale"]].append(r)
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in others:
        groups[(r["scale"], r["method"], r["H"], r["kv"], r["lr"])].append(r)
    entries = []
    for (preset, method, H, kv, lr), rs in groups.items():
        if preset not in by_preset:
            notes.append(f"{method} at preset {preset}: no baseline run at that preset; skipped")
            continue
        bs = by_preset[preset]
        frac = _extra_flops(rs, bs)
        label = run_label(method, H) + (f" lr={lr:g}" if isinstance(lr, float) else "")
        entries.append(dict(scale=str(preset), method=label, L_base=float(np.mean([b["tail_mean"] for b in bs])),
                            L_method=float(np.mean([r["tail_mean"] for r in rs])), routing_fraction=frac))
    rows = ceg_table(entries, alphas, divide_routing=args.divide_routing)
    print(f"\ncompute-equivalent gain (L_base / L_method)^(1/alpha)"
          + (" / (1 + extra FLOP fraction)" if args.divide_routing else ""))
    _print_table(["scale", "method", "L_base", "L_method", "extra FLOPs"] + [f"CEG {k}" for k in alphas] + ["bracket"],
                 [[r.scale, r.method, f"{r.L_base:.4f}", f"{r.L_method:.4f}",
                   f"{100 * e['routing_fraction']:.2f}%"] + [f"{r.ceg[k]:.3f}x" for k in alphas]
                  + [f"{r.low:.2f}-{r.high:.2f}x"] for r, e in zip(rows, entries)])
    for n in notes:
        print(f"note: {n}")
    _write_json(args.json, {"fits": {k: f.as_dict() for k, f in fits.items()}, "alphas": alphas,
                            "rows": [r.as_dict() for r in rows], "notes": notes}, args.overwrite)
    return 0


def _extra_flops(method_runs: list[dict[str, Any]], base_runs: list[dict[str, Any]]) -> float:
    """Extra FLOPs per step of the method: cumulative FLOPs at the same last step, ratio - 1."""
    ratios = []
    for r in method_runs:
        last = {p["step"]: p.get("flops") for p in r["curve"]}
        for b in base_runs:
            common = [p for p in b["curve"] if p["step"] in last and p.get("flops") and last[p["step"]]]
            if common:
                p = common[-1]
                ratios.append(last[p["step"]] / p["flops"] - 1.0)
    return float(np.mean(ratios)) if ratios else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m analysis.stats.cli stats ...`)."""
    parser = argparse.ArgumentParser(prog="mhar")
    add_stats_subparser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except StatsError as exc:
        print(f"mhar stats {args.stats_command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
