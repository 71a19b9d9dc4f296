"""The demo's stages, each a call of the library with explicit options; runs are found
through the sweeps' manifests. What each stage prints is also its log in the report."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Callable, TypeVar

from ..errors import UserError
from ..tail import TAIL_K
from .analysis_steps import (CegOptions, FiguresOptions, McNemarOptions, ProbeOptions, TailsOptions,
                             build_figures, ceg, mcnemar, probe, tails)
from .plan import (CAPTURE_TOKENS, CEG_ALPHAS, DEMO_STEPS, EVAL_LIMIT, EVAL_TASKS, HW_GRID, LADDER_WIDTHS,
                   MAIN_GRID, MAIN_SEED, MCNEMAR_BOOTSTRAP, ROUTED_METHODS, SEED_GRID, grid, ladder_extra)
from .report import Stage, comparison_table, write_report
from .runs import SweptRun, finished, one, swept_runs

T = TypeVar("T")


def _printed(fn: Callable[[], T]) -> tuple[str, T]:
    """Run `fn` with its stdout collected; echo it (also when `fn` raises) and return it."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            result = fn()
    finally:
        print(buf.getvalue(), end="")
    return buf.getvalue(), result


def run_demo(out: Path, steps: int | None = None, overwrite: bool = False) -> int:
    """Every stage into `out` (finished work is kept unless `overwrite`); writes out/report.md."""
    steps = steps or DEMO_STEPS
    if steps < 1:
        raise UserError("--steps must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    runs, ladder = out / "runs", out / "ladder"
    stages: list[Stage] = []
    start = time.perf_counter()

    def stage(name: str, fn: Callable[[], str | None]) -> None:
        print(f"\n[demo] ── {name} ──", flush=True)
        t0 = time.perf_counter()
        log = fn() or ""
        stages.append(Stage(name, time.perf_counter() - t0, log))

    stage("sweep", lambda: sweep_stage(runs, ladder, steps, overwrite))
    swept = swept_runs(runs)
    routed = [r for r in swept if r.method in ROUTED_METHODS and r.seed == MAIN_SEED]
    stage("capture", lambda: capture_stage(routed, overwrite))
    stage("probe", lambda: _printed(lambda: probe(ProbeOptions(
        inputs=[str(r.path / "routing.nc") for r in routed], out=str(out / "probes"), overwrite=True)))[0])
    base_run = one(swept, method="baseline", seed=MAIN_SEED)
    mhar_run = one(swept, method="mhar", heads=2, seed=MAIN_SEED)
    stage("eval", lambda: eval_stage([base_run, mhar_run], runs / "evals", overwrite))
    stage("stats", lambda: stats_stage(out, runs, ladder, base_run, mhar_run))
    stage("figures", lambda: figures_stage(runs, out / "figures"))
    report = write_report(out, stages, time.perf_counter() - start)
    print(f"\n[demo] done in {time.perf_counter() - start:.0f} s")
    print(f"[demo] report: {report}")
    return 0


def sweep_stage(runs: Path, ladder: Path, steps: int, overwrite: bool) -> str:
    """Train the grids (and the ladder baselines); the comparison table is the stage's log."""
    from ..sweep import run_sweep

    for axes in (MAIN_GRID, HW_GRID, SEED_GRID):
        run_sweep(grid(axes, steps), runs, overwrite=overwrite)
    for d in LADDER_WIDTHS:
        run_sweep(grid(dict(methods=["baseline"], seeds=[MAIN_SEED]), steps, ladder_extra(d)), ladder / f"d{d}",
                  overwrite=overwrite)
    table = comparison_table([r.path for r in finished(swept_runs(runs))])
    print(table)
    return table


def capture_stage(routed: list[SweptRun], overwrite: bool) -> str:
    """The routing dataset of every routed run (RUN/routing.nc)."""
    from ..capture import RunCapture, capture_run, capture_summary

    def capture_one(cfg: RunCapture) -> None:
        ds = capture_run(cfg)
        print(capture_summary(ds, cfg.out_path()))
        ds.close()

    logs = []
    for run in routed:
        cfg = RunCapture(run=str(run.path), tokens=CAPTURE_TOKENS, overwrite=overwrite, progress=False)
        if cfg.out_path().exists() and not overwrite:
            logs.append(f"{run.name}: routing.nc exists, skipped")
            continue
        logs.append(_printed(lambda: capture_one(cfg))[0])
    return "\n".join(logs)


def eval_stage(run_list: list[SweptRun], evals: Path, overwrite: bool) -> str:
    """The harness's held-out tasks on each run, into evals/<run name>."""
    from ..evaluate import EvalConfig, run_eval

    def eval_one(cfg: EvalConfig) -> None:
        for line in run_eval(cfg).lines():
            print(line)

    logs = []
    for run in run_list:
        target = evals / run.name
        if target.exists() and not overwrite:
            logs.append(f"{run.name}: evaluation exists, skipped")
            continue
        cfg = EvalConfig(run=str(run.path), tasks=list(EVAL_TASKS), out=str(target), limit=EVAL_LIMIT,
                         overwrite=overwrite)
        logs.append(_printed(lambda: eval_one(cfg))[0])
    return "\n".join(logs)


def stats_stage(out: Path, runs: Path, ladder: Path, base_run: SweptRun, mhar_run: SweptRun) -> str:
    """McNemar baseline vs MHAR, tail-means and seed deltas, and the compute-equivalent gain."""
    stats = out / "stats"
    stats.mkdir(exist_ok=True)
    evals = runs / "evals"
    logs = [_printed(lambda: mcnemar(McNemarOptions(
        dir_a=str(evals / base_run.name), dir_b=str(evals / mhar_run.name), out=str(stats / "mcnemar"),
        overwrite=True, n_boot=MCNEMAR_BOOTSTRAP)))[0]]
    main_runs = finished(swept_runs(runs))
    k = min(TAIL_K, _evaluations(main_runs[0].path))
    logs.append(_printed(lambda: tails(TailsOptions(
        runs=[str(r.path) for r in main_runs], k=k, json=str(stats / "tails.json"), overwrite=True)))[0])
    ladder_runs = sorted((r for d in LADDER_WIDTHS for r in finished(swept_runs(ladder / f"d{d}"))),
                         key=lambda r: str(r.path))
    seed42 = [r for r in main_runs if r.seed == MAIN_SEED]
    logs.append(_printed(lambda: ceg(CegOptions(
        runs=[str(r.path) for r in ladder_runs + seed42], k=k, alpha=list(CEG_ALPHAS),
        json=str(stats / "ceg.json"), overwrite=True)))[0])
    return "\n".join(logs)


def figures_stage(runs: Path, figures: Path) -> str:
    """Every paper figure and table these runs allow."""
    log, status = _printed(lambda: build_figures(FiguresOptions(runs=str(runs), out=str(figures), overwrite=True)))
    if status != 0:
        raise UserError(f"demo stage figures: some generators failed (exit {status}); see FAILED above")
    return log


def _evaluations(run: Path) -> int:
    return sum('"val_loss"' in line for line in (run / "metrics.jsonl").read_text().splitlines())
