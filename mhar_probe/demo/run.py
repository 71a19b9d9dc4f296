"""A plan's stages, each a call of the library with explicit options; runs are found through the
sweeps' manifests. What each stage prints is also its log in the report.

Stages run in order: sweep, capture, eval (the ones that need the models), then probe, stats,
claims, figures, report (the ones that read only the files those write). `stages` picks some, so
that the GPU ladder trains, captures and evaluates on the device machine, call by call (`grids`
picks the runs of one call), and its report is made on any CPU from the exported files alone.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..errors import UserError
from ..model.methods import run_label
from ..runfiles import RunFiles
from ..tail import TAIL_K
from .plan import DEMO, Plan
from .report import Stage, comparison_table, write_report
from .runs import SweptRun, finished, one, swept_runs, swept_so_far

T = TypeVar("T")
MODEL_STAGES = ("sweep", "capture", "eval")
FILE_STAGES = ("probe", "stats", "claims", "figures", "report")
STAGES = MODEL_STAGES + FILE_STAGES


def _lines(lines: list[str]) -> str:
    """Print `lines` (what the command line prints for the same call) and return them as the log."""
    text = "".join(f"{line}\n" for line in lines)
    print(text, end="")
    return text


def _printed(fn: Callable[[], T]) -> tuple[str, T]:
    """Run `fn` with its stdout collected; echo it (also when `fn` raises) and return it."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            result = fn()
    finally:
        print(buf.getvalue(), end="")
    return buf.getvalue(), result


def check_stages(stages: list[str] | None) -> tuple[str, ...]:
    """The stages to run, in their fixed order (None: all)."""
    if stages is None:
        return STAGES
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise UserError(f"unknown stage {', '.join(unknown)}; stages: {', '.join(STAGES)}")
    return tuple(s for s in STAGES if s in stages)


def _require_runs(plan: Plan, runs: Path, todo: tuple[str, ...]) -> None:
    """Refuse stages that need the sweep's runs when `runs` has no manifest: the model stages always,
    the file stages unless the plan makes its files before any run is in (`Plan.files_before_runs`)."""
    if not (runs / "manifest.json").exists() and (any(s in MODEL_STAGES for s in todo) or not plan.files_before_runs):
        raise UserError(f"{runs} has no manifest.json; run the sweep stage first")


def run_demo(out: Path, steps: int | None = None, overwrite: bool = False, plan: Plan = DEMO,
             stages: list[str] | None = None, grids: list[str] | None = None,
             time_limit: float | None = None, deadline: Any = None) -> int:
    """The plan's stages into `out` (finished work is kept unless `overwrite`); writes
    out/report.md when the report stage runs. `grids` restricts sweep, capture and eval to the
    runs of those grids ('widths': the ladder baselines). `time_limit`: seconds from this call
    that the sweep stage may train (one deadline for all its grids, `sweep_stage`); when it
    stops the sweep, the later stages are left for the call that finishes it. `deadline` (a
    `mhar_probe.train.Deadline`, e.g. counted from the start of the process) instead of it."""
    from ..train import Deadline

    # None: each grid trains its own steps (a short learning-rate sweep) or else the plan's
    if steps is not None and steps < 1:
        raise UserError("--steps must be at least 1")
    if time_limit is not None:
        deadline = Deadline.after(time_limit)
    todo = check_stages(stages)
    chosen = plan.grid_names(grids)
    widths = grids is None or "widths" in grids
    runs, ladder = out / "runs", out / "ladder"
    if "sweep" not in todo:  # refused before anything is written
        _require_runs(plan, runs, todo)
    out.mkdir(parents=True, exist_ok=True)
    names = plan.run_names(chosen, steps)
    log: list[Stage] = []
    start = time.perf_counter()

    def header(name: str) -> None:
        k = todo.index(name) + 1
        print(f"\n[{plan.name}] ── stage {k}/{len(todo)}: {name} ── ({_clock(time.perf_counter() - start)} "
              f"elapsed)", flush=True)

    def stage(name: str, fn: Callable[[], str | None]) -> None:
        if name not in todo:
            return
        header(name)
        t0 = time.perf_counter()
        text = fn() or ""
        log.append(Stage(name, time.perf_counter() - t0, text))

    limited: list[str] = []  # the sweep stage stopped at the time limit
    stage("sweep", lambda: sweep_stage(plan, runs, ladder, steps, overwrite, chosen, widths, tag=plan.name,
                                       deadline=deadline, limited=limited))
    if limited:
        print(f"[{plan.name}] the sweep stopped at the time limit in {limited[0]}; the later stages wait "
              f"for the call that finishes it", flush=True)
        return 0
    if not (runs / "manifest.json").exists():
        _require_runs(plan, runs, todo)
        print(f"[{plan.name}] no runs yet ({runs / 'manifest.json'} is not there): every claim waits for its runs",
              flush=True)
    swept = swept_so_far(runs)
    selected = [r for r in finished(swept) if r.name in names]
    routed = [r for r in selected if r.method in plan.routed_methods
              and (plan.capture_all_seeds or r.seed == plan.main_seed)]
    stage("capture", lambda: capture_stage(plan, routed, overwrite))
    stage("eval", lambda: eval_stage(plan, [r for r in selected if is_eval_run(plan, r)], runs / "evals", overwrite))
    probed = [r for r in main_runs(plan, swept) if r.method in plan.routed_methods and r.seed == plan.main_seed
              and RunFiles(r.path).routing_path.exists()]
    stage("probe", lambda: probe_stage(plan, out, probed))
    stage("stats", lambda: stats_stage(plan, out, runs, ladder))
    stage("claims", lambda: claims_stage(plan, out))
    stage("figures", lambda: figures_stage(runs, out / "figures", plan.mhar_heads, second_rate_runs(plan, out))
          if finished(swept) else _lines([f"skipped figures: no finished run in {runs}"]))
    if "report" in todo:
        header("report")  # the last stage: the report counts the stages before it
        report = write_report(out, log, time.perf_counter() - start, plan.title, overwrite=overwrite)
        print(f"\n[{plan.name}] done in {time.perf_counter() - start:.0f} s")
        html_report = report.with_suffix(".html")
        print(f"[{plan.name}] report: {report}" + (f" (and {html_report})" if html_report.exists() else ""))
    return 0


def main_runs(plan: Plan, swept: list[SweptRun]) -> list[SweptRun]:
    """Finished runs of the main comparison (the plan's KV heads; the kv x H grid's others left out)."""
    return [r for r in finished(swept) if plan.main_kv is None or r.kv == plan.main_kv]


def is_compared_arm(plan: Plan, run: SweptRun) -> bool:
    """Whether `run` is one of the arms the McNemar pairs compare, at any seed: its eval methods at the
    main KV, MHAR at the plan's H."""
    return (run.method in plan.eval_methods and (plan.main_kv is None or run.kv == plan.main_kv)
            and (run.method != "mhar" or run.heads == plan.mhar_heads))


def is_compared_run(plan: Plan, run: SweptRun) -> bool:
    """Whether `run` is in the plan's evaluated comparison (McNemar, CEG) at the main seed."""
    return is_compared_arm(plan, run) and run.seed == plan.main_seed


def is_eval_run(plan: Plan, run: SweptRun) -> bool:
    """Whether the eval stage evaluates `run`: every run (`plan.eval_every_run`), or the compared ones."""
    return plan.eval_every_run or is_compared_run(plan, run)


def eval_runs(plan: Plan, swept: list[SweptRun]) -> list[SweptRun]:
    """The runs the plan evaluates, at the main seed (MHAR at the plan's H)."""
    kv = plan.main_kv
    return [one(swept, method=m, seed=plan.main_seed, kv=kv, heads=plan.mhar_heads if m == "mhar" else None)
            for m in plan.eval_methods]


def present_eval_runs(plan: Plan, swept: list[SweptRun]) -> list[SweptRun]:
    """The finished runs of the evaluated comparison (a partial study lacks some)."""
    return [r for r in finished(swept) if is_compared_run(plan, r)]


def present_arms(plan: Plan, swept: list[SweptRun]) -> dict[tuple[str, int], SweptRun]:
    """(method, seed) -> the finished run of that arm the McNemar pairs compare (a partial study lacks some)."""
    return {(r.method, r.seed): r for r in finished(swept) if is_compared_arm(plan, r)}


def mcnemar_folder(plan: Plan, a: str, b: str, seed: int) -> str:
    """The folder under stats/ of the McNemar files of pair (a, b) at `seed`: `mcnemar` for the plan's first
    pair, `mcnemar_<a>_<b>` for the others, and `_s<seed>` after either at any seed but the main one."""
    name = "mcnemar" if (a, b) == plan.mcnemar_pairs[0] else f"mcnemar_{a}_{b}"
    return name if seed == plan.main_seed else f"{name}_s{seed}"


def _clock(seconds: float) -> str:
    """12 s, 4 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class SweepProgress:
    """The overall count of a sweep stage across its grids: runs finished of all the runs it
    trains, time so far and an ETA from the mean time of the runs trained in this call
    (runs already finished before the call count as done and cost nothing)."""

    def __init__(self, tag: str, total: int, done_before: int) -> None:
        self.tag, self.total, self.done, self.trained = tag, total, done_before, 0
        self.start = time.perf_counter()

    def grid_done(self, name: str, finished_now: int) -> None:
        self.trained += max(0, finished_now - self.done)
        self.done = finished_now
        spent = time.perf_counter() - self.start
        eta = spent / self.trained * (self.total - self.done) if self.trained else None
        print(f"[{self.tag}] sweep: grid {name} done; {self.done}/{self.total} runs finished, "
              f"{_clock(spent)} in this stage" + (f", about {_clock(eta)} to go" if eta and self.done < self.total
                                                    else ""), flush=True)


def sweep_stage(plan: Plan, runs: Path, ladder: Path, steps: int | None, overwrite: bool, grids: list[str],
                widths: bool, tag: str = "demo", deadline: Any = None, limited: list[str] | None = None) -> str:
    """Train the grids (and the ladder baselines), printing the overall progress after each; the
    comparison table is the stage's log. `deadline` (a `mhar_probe.train.Deadline`) is shared by
    every grid: the run training when it comes stops cleanly with a checkpoint, no later run or
    grid starts, and the stopped grid's name is appended to `limited`."""
    from ..sweep import run_sweep

    jobs = [(name, plan.grid(plan.grids[name], steps), runs) for name in grids]
    for d in plan.ladder_widths if widths else ():
        axes = dict(methods=["baseline"], seeds=[plan.main_seed],
                    **({"kv_heads": [plan.main_kv]} if plan.main_kv else {}))
        jobs.append((f"d{d}", plan.grid(axes, steps, plan.ladder_extra(d)), ladder / f"d{d}"))

    def finished_count() -> int:
        if overwrite:
            return 0
        return sum(len({s.name for s in grid.expand()} & _finished_names(where)) for _, grid, where in jobs)

    progress = SweepProgress(tag, sum(len(grid.expand()) for _, grid, _ in jobs), finished_count())
    for name, grid, where in jobs:
        if run_sweep(grid, where, overwrite=overwrite, deadline=deadline).time_limited:
            print(f"[{tag}] sweep: stopped at the time limit in grid {name}; run the same call again to "
                  f"continue (finished runs are skipped, the interrupted one resumes)", flush=True)
            if limited is not None:
                limited.append(name)
            return f"stopped at the time limit in grid {name}"
        overwrite_done = progress.done + len(grid.expand()) if overwrite else None
        progress.grid_done(name, overwrite_done if overwrite_done is not None else finished_count())
    table = comparison_table([r.path for r in finished(swept_runs(runs))])
    print(table)
    return table


def _finished_names(where: Path) -> set[str]:
    """Names of the finished runs of the sweep folder `where` (none before its first run)."""
    return {r.name for r in finished(swept_so_far(where))}


def capture_stage(plan: Plan, routed: list[SweptRun], overwrite: bool) -> str:
    """The routing dataset of every routed run (RUN/routing.nc)."""
    from ..capture import RunCapture, capture_run, capture_summary

    def capture_one(cfg: RunCapture) -> None:
        ds = capture_run(cfg)
        print(capture_summary(ds, cfg.out_path()))
        ds.close()

    logs = []
    for run in routed:
        cfg = RunCapture(run=str(run.path), tokens=plan.capture_tokens, overwrite=overwrite, progress=False,
                         draws=plan.capture_draws(run.method, run.heads, run.seed))
        if cfg.out_path().exists() and not overwrite:
            logs.append(f"{run.name}: routing.nc exists, skipped")
            continue
        logs.append(_printed(lambda: capture_one(cfg))[0])
    return "\n".join(logs)


def eval_stage(plan: Plan, run_list: list[SweptRun], evals: Path, overwrite: bool) -> str:
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
        cfg = EvalConfig(run=str(run.path), tasks=list(plan.eval_tasks), out=str(target), limit=plan.eval_limit,
                         batch_size=plan.eval_batch_size, overwrite=overwrite)
        logs.append(_printed(lambda: eval_one(cfg))[0])
    return "\n".join(logs)


def probe_stage(plan: Plan, out: Path, probed: list[SweptRun]) -> str:
    """The forced-compromise probe tables of the captured routed runs at the main seed; on a partial
    study with none captured yet, a one-line note instead (the probe tables need one dataset)."""
    if not probed:
        line = (f"skipped probe tables: no captured routed run ({', '.join(plan.routed_methods)}) "
                f"at seed {plan.main_seed}")
        print(line)
        return line
    from analysis.probes.probe import probe

    return _lines(probe([RunFiles(r.path).routing_path for r in probed], out / "probes", overwrite=True).lines())


def stats_stage(plan: Plan, out: Path, runs: Path, ladder: Path) -> str:
    """McNemar of each pair the plan names at every seed it tests them at (`Plan.mcnemar_seeds`; each seed's
    files in `mcnemar_folder`, the seeds together in stats/mcnemar_seeds.json and .md, pending seeds named),
    tail-means and seed deltas, the paired gain over training (stats/gain_curves.json and .md) and the
    compute-equivalent gain.
    On a partial study an analysis whose runs (or their evaluations) are missing is skipped with a
    one-line note, and a file an earlier call wrote for it is removed, so no stale table survives."""
    from analysis.run import Run
    from analysis.stats.gain import compute_equivalent_gain
    from analysis.stats.gain_curves import gain_curves
    from analysis.stats.mcnemar_seeds import PairSeeds, SeedTable, write_seeds
    from analysis.stats.paired_eval import mcnemar_eval_dirs
    from analysis.stats.tails import tails

    stats = out / "stats"
    stats.mkdir(exist_ok=True)
    evals = runs / "evals"
    swept = swept_so_far(runs)
    arms = present_arms(plan, swept)
    logs = []

    def skip(what: str, why: str, *stale: Path) -> None:
        for path in stale:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        line = f"skipped {what}: {why}"
        print(line)
        logs.append(line)

    def arm(m: str) -> str:
        return run_label(m, plan.mhar_heads if m == "mhar" else None)

    pairs = []
    for a, b in plan.mcnemar_pairs:
        pair = PairSeeds(a, b, arm(a), arm(b), plan.mcnemar_seeds(a, b))
        for seed in pair.seeds:
            folder = mcnemar_folder(plan, a, b, seed)
            lacking = [m for m in (a, b) if (m, seed) not in arms or not (evals / arms[m, seed].name).is_dir()]
            if lacking:
                pair.unevaluated[seed] = [f"{arm(m)} seed {seed}" for m in lacking if (m, seed) in arms]
                pair.pending[seed] = "no evaluation of " + ", ".join(
                    f"{arm(m)} seed {seed} ({'not evaluated' if (m, seed) in arms else 'run not finished'})"
                    for m in lacking)
                skip(f"McNemar {a} vs {b}", pair.pending[seed], stats / folder)
                continue
            result = mcnemar_eval_dirs(evals / arms[a, seed].name, evals / arms[b, seed].name, out=stats / folder,
                                       overwrite=True, n_boot=plan.mcnemar_bootstrap)
            logs.append(_lines(result.lines()))
            pair.tables.append(SeedTable(seed, folder, result.comparison))
        pairs.append(pair)
    logs.append(_lines([f"wrote {p}" for p in write_seeds(pairs, stats / "mcnemar_seeds.json",
                                                          stats / "mcnemar_seeds.md")]))
    k = TAIL_K  # (a plan's runs have it: `Plan` refuses a tail window outside the last quarter)
    compared = main_runs(plan, swept)
    short = [r for r in compared if Run.read(r.path).tail(k).mean is None]  # (a CPU check's few steps)
    if short:
        line = (f"left out of the tail-means, gain over training and CEG: {', '.join(r.name for r in short)} "
                f"(fewer than {k} evaluations after step 0: no tail-mean)")
        print(line)
        logs.append(line)
        compared = [r for r in compared if r not in short]
    if not compared:
        skip("tail-means, gain over training and CEG", "no finished run with a tail-mean", stats / "tails.json",
             stats / "gain_curves.json", stats / "gain_curves.md", stats / "ceg.json")
        return "\n".join(logs)
    logs.append(_lines(tails([r.path for r in compared], k=k, json=stats / "tails.json", overwrite=True).lines()))
    logs.append(_lines(gain_curves([r.path for r in compared], k=k, json=stats / "gain_curves.json",
                                   md=stats / "gain_curves.md", overwrite=True).lines()))
    ladder_runs = sorted((r for d in plan.ladder_widths for r in finished(swept_runs(ladder / f"d{d}"))),
                         key=lambda r: str(r.path))
    at_main_seed = [r for r in compared if r.seed == plan.main_seed]
    pool = ladder_runs + at_main_seed
    lacking = [m for m, hit in (("baseline", any(r.method == "baseline" for r in pool)),
                                ("another method", any(r.method != "baseline" for r in pool))) if not hit]
    if lacking:
        skip("compute-equivalent gain", f"no finished {' or '.join(lacking)} at seed {plan.main_seed}",
             stats / "ceg.json")
        return "\n".join(logs)
    logs.append(_lines(compute_equivalent_gain([r.path for r in ladder_runs + at_main_seed], k=k,
                                               alpha=plan.ceg_alphas, json=stats / "ceg.json", overwrite=True).lines()))
    return "\n".join(logs)


def claims_stage(plan: Plan, out: Path) -> str:
    """The claim table (claims.md): each paper claim these runs can test, our number, a verdict."""
    from .claims import write_claims

    text = write_claims(plan, out)
    print(text)
    return text


def second_rate_runs(plan: Plan, out: Path) -> Path | None:
    """The folder of the plan's runs at its second learning rate (`Plan.second_rate`), once it exists."""
    if plan.second_rate is None:
        return None
    folder = out / plan.second_rate[0] / "runs"
    return folder if folder.is_dir() else None


def figures_stage(runs: Path, figures: Path, mhar_heads: int | None = None, second_runs: Path | None = None) -> str:
    """Every paper figure and table these runs allow (benchmark tables only from the study's own
    RUNS/benchmarks, so the report does not depend on the folder it is made from), MHAR at the
    H the plan evaluates, so the tables and the claims compare the same runs. `second_runs`: the
    runs at a second learning rate, read by table_lr_sweep alone (beside `runs`); every other
    table and figure reads `runs` only, one rate."""
    from figures.build import build
    from figures.tab_lr_sweep import NAME as LR_SWEEP

    report = build(runs, figures, overwrite=True, benchmarks=[runs / "benchmarks"], mhar_heads=mhar_heads,
                   more_runs={LR_SWEEP: [second_runs]} if second_runs is not None else None)
    log = _lines(report.lines())
    if report.failed:
        raise UserError(f"stage figures: some generators failed ({', '.join(report.failed)}); see FAILED above")
    if not report.made:
        raise UserError(f"nothing could be made from {runs}; see the skip reasons above")
    return log
