"""`make demo`: the whole story on the embedded corpus, on two CPU cores.

Stages (each skips work that is already done, so a second run is quick):
  1. sweep     tiny baseline, hyper, attnres, mhar (H in {2, 4, 8}), mhar_hw; a second seed of
               baseline / attnres / mhar for paired deltas; two narrower baselines (compute ladder)
  2. capture   per-head routing weights of the routed runs on held-out text (xarray, netCDF)
  3. probe     forced-compromise probes: width disagreement vs random-query null, collinearity,
               per-head deviations, head alignment
  4. eval      held-out perplexity and last-word accuracy through the LM Evaluation Harness
  5. stats     McNemar baseline vs MHAR, tail-means and paired seed deltas, CEG fit
  6. figures   every paper figure and table these runs allow
  7. report    one Markdown + HTML page with the tables and figures inline

Every run shares the recipe and, per seed, the data order (paired comparisons).
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import UserError

DEMO_STEPS = 150
RECIPE = dict(lr=2e-3, batch_size=8, eval_every=15, eval_batches=2, checkpoint_every=50,
              corpus_max_bytes=4_000_000)
MAIN_GRID = dict(methods=["baseline", "hyper", "attnres", "mhar"], heads=[2, 4, 8], seeds=[42])
HW_GRID = dict(methods=["mhar_hw"], heads=[None], seeds=[42])  # one full-width query per KV group: H = KV
SEED_GRID = dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[43])
LADDER_WIDTHS = (64, 96)  # narrower baselines: with the d=128 baseline, three compute budgets
EVAL_TASKS = "mhar_heldout_ppl,mhar_lastword,mhar_nextline"
EVAL_LIMIT = 200
CAPTURE_TOKENS = 16384


@dataclass
class Stage:
    name: str
    seconds: float
    log: str


def _grid(axes: dict, steps: int, extra: dict | None = None) -> dict:
    common = {k: v for k, v in RECIPE.items() if k != "lr"}
    common.update(progress=False, **({"extra": extra} if extra else {}))
    return dict(presets=["tiny"], steps=[steps], lrs=[RECIPE["lr"]], common=common, **axes)


def _mhar(args: list[str]) -> str:
    """Run one `mhar` subcommand in this process; returns its stdout (errors stop the demo)."""
    from .cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(args)
    out = buf.getvalue()
    print(out, end="")
    if rc != 0:
        raise UserError(f"demo stage `mhar {' '.join(args[:2])}` failed (exit {rc})")
    return out


def run_demo(out: Path, steps: int | None = None, overwrite: bool = False) -> int:
    from .sweep import run_sweep

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

    stage("sweep", lambda: _sweep(run_sweep, runs, ladder, steps, overwrite))
    routed = sorted(p for p in runs.iterdir() if p.is_dir() and re.search(r"-(attnres|mhar|mhar_hw)-", p.name)
                    and "-s42-" in p.name)
    stage("capture", lambda: _capture(routed, overwrite))
    stage("probe", lambda: _mhar(["probe", *[str(p / "routing.nc") for p in routed],
                                  "--out", str(out / "probes"), "--overwrite"]))
    base_run = _one(runs, "-baseline-", "-s42-")
    mhar_run = _one(runs, "-mhar-h2-", "-s42-")
    stage("eval", lambda: _eval([base_run, mhar_run], runs / "evals", overwrite))
    stage("stats", lambda: _stats(out, runs, ladder, base_run, mhar_run))
    stage("figures", lambda: _mhar(["figures", str(runs), "--out", str(out / "figures"), "--overwrite"]))
    report = write_report(out, stages, time.perf_counter() - start)
    print(f"\n[demo] done in {time.perf_counter() - start:.0f} s")
    print(f"[demo] report: {report}")
    return 0


def _sweep(run_sweep, runs: Path, ladder: Path, steps: int, overwrite: bool) -> str:
    run_sweep(_grid(MAIN_GRID, steps), runs, overwrite=overwrite)
    run_sweep(_grid(HW_GRID, steps), runs, overwrite=overwrite)
    run_sweep(_grid(SEED_GRID, steps), runs, overwrite=overwrite)
    for d in LADDER_WIDTHS:
        extra = dict(hidden_size=d, intermediate_size=3 * d)
        run_sweep(_grid(dict(methods=["baseline"], seeds=[42]), steps, extra), ladder / f"d{d}", overwrite=overwrite)
    table = comparison_table(runs)
    print(table)
    return table


def _one(runs: Path, *parts: str) -> Path:
    hits = [p for p in runs.iterdir() if p.is_dir() and all(x in p.name for x in parts)]
    if len(hits) != 1:
        raise UserError(f"expected one run matching {parts} in {runs}, found {len(hits)}")
    return hits[0]


def _capture(routed: list[Path], overwrite: bool) -> str:
    logs = []
    for run in routed:
        target = run / "routing.nc"
        if target.exists() and not overwrite:
            logs.append(f"{run.name}: routing.nc exists, skipped")
            continue
        logs.append(_mhar(["capture", str(run), "--tokens", str(CAPTURE_TOKENS), "--no-progress",
                           *(["--overwrite"] if overwrite else [])]))
    return "\n".join(logs)


def _eval(run_dirs: list[Path], evals: Path, overwrite: bool) -> str:
    logs = []
    for run in run_dirs:
        target = evals / run.name
        if target.exists() and not overwrite:
            logs.append(f"{run.name}: evaluation exists, skipped")
            continue
        logs.append(_mhar(["eval", str(run), "--tasks", EVAL_TASKS, "--limit", str(EVAL_LIMIT),
                           "--out", str(target), *(["--overwrite"] if overwrite else [])]))
    return "\n".join(logs)


def _stats(out: Path, runs: Path, ladder: Path, base_run: Path, mhar_run: Path) -> str:
    stats = out / "stats"
    stats.mkdir(exist_ok=True)
    evals = runs / "evals"
    logs = [_mhar(["stats", "mcnemar", str(evals / base_run.name), str(evals / mhar_run.name),
                   "--out", str(stats / "mcnemar"), "--overwrite", "--n-boot", "2000"])]
    main_runs = [str(p) for p in sorted(runs.iterdir()) if (p / "summary.json").exists()]
    k = str(min(11, _evaluations(Path(main_runs[0]))))
    logs.append(_mhar(["stats", "tails", *main_runs, "--k", k, "--json", str(stats / "tails.json"),
                       "--overwrite"]))
    ladder_runs = [str(p) for p in sorted(ladder.glob("*/*")) if (p / "summary.json").exists()]
    seed42 = [r for r in main_runs if "-s42-" in r]
    logs.append(_mhar(["stats", "ceg", *ladder_runs, *seed42, "--k", k, "--alpha", "0.089", "0.15",
                       "--json", str(stats / "ceg.json"), "--overwrite"]))
    return "\n".join(logs)


def _evaluations(run: Path) -> int:
    return sum('"val_loss"' in line for line in (run / "metrics.jsonl").read_text().splitlines())


def comparison_table(runs: Path) -> str:
    """Markdown table of every finished run: tail-mean val loss, delta vs its seed's baseline,
    and the drop of the final validation loss below its step-0 value."""
    rows = []
    for p in sorted(runs.iterdir()):
        f = p / "summary.json"
        if f.exists():
            rows.append((p.name, json.loads(f.read_text())))
    base = {s["seed"]: s["tail_mean_val_loss"] for _, s in rows if s["method"] == "baseline"}
    lines = ["| run | H | tail-mean val loss | Δ vs baseline | step-0 val loss | drop |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, s in rows:
        tail = s["tail_mean_val_loss"]
        b = base.get(s["seed"])
        delta = f"{tail - b:+.4f}" if b is not None and s["method"] != "baseline" else "–"
        drop = 1 - s["final_val_loss"] / s["initial_val_loss"]
        heads = s.get("routing_heads")
        lines.append(f"| {name} | {heads if heads is not None else '–'} | {tail:.4f} | {delta} | "
                     f"{s['initial_val_loss']:.4f} | {100 * drop:.0f}% |")
    return "\n".join(lines)


def write_report(out: Path, stages: list[Stage], seconds: float) -> Path:
    """report.md (and report.html) with every stage's output, tables and figures inline."""
    figs = out / "figures"
    md = [f"# mhar-probe demo report", "",
          f"Embedded corpus, `tiny` preset, {len(stages)} stages in {seconds:.0f} s. "
          f"Runs: `{out / 'runs'}`.", ""]
    for st in stages:
        md += [f"## {st.name} ({st.seconds:.0f} s)", ""]
        if st.name == "figures":
            continue
        if st.log.strip():
            md += ["```", st.log.strip(), "```", ""]
    for table in sorted((out / "probes").glob("*.md")):
        md += [f"### probes: {table.stem}", "", table.read_text().strip(), ""]
    for table in sorted(figs.glob("*.md")):
        if table.name == "index.md":
            continue
        md += [f"### {table.stem}", "", table.read_text().strip(), ""]
    for png in sorted(figs.glob("*.png")):
        md += [f"### {png.stem}", "", f"![{png.stem}](figures/{png.name})", ""]
    text = "\n".join(md) + "\n"
    report = out / "report.md"
    report.write_text(text)
    (out / "report.html").write_text(_html(text))
    return report


def _html(markdown: str) -> str:
    """A minimal, dependency-free rendering: headings, images, tables and code as <pre>."""
    body, in_code = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            body.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
        elif in_code or line.startswith("|"):
            body.append(html.escape(line) if in_code else f"<pre class='t'>{html.escape(line)}</pre>")
        elif m := re.match(r"!\[(.*)\]\((.*)\)", line):
            body.append(f"<img alt='{html.escape(m[1])}' src='{html.escape(m[2])}' style='max-width:900px'>")
        elif m := re.match(r"(#+) (.*)", line):
            n = len(m[1])
            body.append(f"<h{n}>{html.escape(m[2])}</h{n}>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    style = "body{font-family:sans-serif;max-width:1000px;margin:auto} pre.t{margin:0}"
    return f"<!doctype html><meta charset='utf-8'><title>mhar-probe demo</title><style>{style}</style>\n" + \
        "\n".join(body) + "\n"
