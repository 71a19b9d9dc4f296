"""The demo's report: the comparison table of the trained runs, and report.md / report.html
with every stage's output, the probe and figure tables and the figures inline."""

from __future__ import annotations

import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..runfiles import RunFiles


@dataclass
class Stage:
    """One stage of the demo: its name, wall time and what it printed."""

    name: str
    seconds: float
    log: str


def step_speed(run: Path) -> tuple[float, float]:
    """(median tokens/s of the training steps, seconds spent in them) from a run's metrics.jsonl."""
    rates, seconds, last = [], 0.0, 0
    for row in RunFiles(run).metrics():
        if "tokens_per_s" in row:
            rates.append(row["tokens_per_s"])
            seconds += (row["tokens"] - last) / row["tokens_per_s"]
            last = row["tokens"]
    rates.sort()
    return (rates[len(rates) // 2] if rates else float("nan")), seconds


#: how `comparison_table` begins (the report shows the sweep stage's copy of it only once, under Runs)
RUNS_TABLE_HEADER = "| run | H |"


def comparison_table(run_dirs: list[Path]) -> str:
    """Markdown table of the given finished runs: tail-mean val loss, delta vs its seed's
    baseline, the drop of the final validation loss below its step-0 value, parameters, tokens
    per parameter, and speed (median tokens/s of the steps, seconds in training steps)."""
    rows = []
    for p in run_dirs:
        files = RunFiles(p)
        if files.summary_path.exists():
            rows.append((p, dict(files.summary())))
    base = {s["seed"]: s["tail_mean_val_loss"] for _, s in rows if s["method"] == "baseline"}
    lines = [RUNS_TABLE_HEADER + " tail-mean val loss | Δ vs baseline | step-0 val loss | drop | parameters | "
             "tokens/param | tokens/s | train s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for path, s in rows:
        tail = s["tail_mean_val_loss"]  # None: a run too short for the tail rule (mhar_probe.tail)
        b = base.get(s["seed"])
        delta = f"{tail - b:+.4f}" if None not in (tail, b) and s["method"] != "baseline" else "–"
        drop = 1 - s["final_val_loss"] / s["initial_val_loss"]
        heads = s.get("routing_heads")
        rate, seconds = step_speed(path)
        tail_text = f"{tail:.4f}" if tail is not None else "– (too short)"
        lines.append(f"| {path.name} | {heads if heads is not None else '–'} | {tail_text} | {delta} | "
                     f"{s['initial_val_loss']:.4f} | {100 * drop:.0f}% | {s['parameters']:,} | "
                     f"{s['tokens'] / s['parameters']:.1f} | {rate:,.0f} | {seconds:.0f} |")
    return "\n".join(lines)


#: the stage order of a study (mhar_probe.demo.run.STAGES), for the report's sections
STAGE_ORDER = ("sweep", "capture", "eval", "probe", "stats", "claims", "figures", "report")
STAGES_FILE = "stages.json"


def record_stages(out: Path, stages: list[Stage], overwrite: bool = False) -> dict[str, dict]:
    """Merge this call's stages into OUT/stages.json and return every stage's record
    {name: {seconds, log}}: what the study cost, stage by stage, over all the calls that made it.

    A stage that ran again keeps the longer of its two times unless `overwrite` (a rerun skips
    finished work, so a shorter time is a rerun's, not the stage's cost); its log is the latest."""
    from .. import atomic

    path = out / STAGES_FILE
    try:
        known = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except json.JSONDecodeError:
        known = {}
    for st in stages:
        old = known.get(st.name, {})
        seconds = st.seconds if overwrite or not old else max(st.seconds, float(old.get("seconds", 0.0)))
        known[st.name] = dict(seconds=seconds, log=st.log if st.log.strip() else old.get("log", ""))
    atomic.write_json(path, known)
    return known


def figure_captions(figs: Path) -> dict[str, str]:
    """A caption per figure file stem: what the figure shows (its generator's description), the
    paper figure it mirrors and the notes `mhar figures` wrote into figures/index.json."""
    index = figs / "index.json"
    if not index.exists():
        return {}
    from figures.registry import load_generators

    registry = load_generators()
    captions = {}
    for name, outputs in json.loads(index.read_text(encoding="utf-8")).get("made", {}).items():
        gen = registry.get(name)
        doc = (sys.modules[gen.make.__module__].__doc__ or "") if gen else ""
        what = " ".join(doc.strip().split("\n\n")[0].split())
        ref = f" Paper: {gen.paper_ref}." if gen else ""
        for o in outputs:
            notes = " ".join(f"{n.rstrip('.')}." for n in o.get("notes", []))
            captions[o["name"]] = " ".join(part for part in (what, ref.strip(), notes) if part)
    return captions


def _claims_table(out: Path) -> list[str]:
    """The claim table (claims.md) under an explanation, without its own heading."""
    claims = out / "claims.md"
    if not claims.exists():
        return ["No claim table yet (the claims stage has not run)."]
    lines = claims.read_text(encoding="utf-8").strip().splitlines()
    if lines and lines[0].lstrip("#").strip().lower() == "claims":
        lines = lines[1:]
    return ["Each claim of the paper these runs can test: the paper's number, ours with its 95% "
            "interval, a verdict and how it was read (claims.md; claims.json has the numbers).", "",
            *[ln for ln in lines]]


def write_report(out: Path, stages: list[Stage], seconds: float, title: str, overwrite: bool = False) -> Path:
    """report.md (and report.html): the runs, then one section per stage in study order (the
    claim table in the claims section, the tables and captioned figures in the figures section).

    The header gives the study's cost from OUT/stages.json (`record_stages`), so a rerun of a few
    stages does not replace it with its own time; this call's time is given beside it."""
    figs = out / "figures"
    known = record_stages(out, stages, overwrite=overwrite)
    total = sum(float(v["seconds"]) for v in known.values())
    this_call = f"this call: {len(stages)} stage{'s' * (len(stages) != 1)} in {seconds:.0f} s"
    md = ["# mhar-probe report", "",
          f"{title}. The study: {len(known)} stage{'s' * (len(known) != 1)} before this report, {total:.0f} s in all ({this_call}; "
          f"each stage's time is in its heading). Runs: `{out / 'runs'}`.", ""]
    from .export import sweep_dirs
    from .runs import finished, swept_runs

    md += ["## Runs", "", "Tail-mean validation loss, size and speed of every finished run (tokens/s: median "
           "over the training steps; train s: time in training steps, evaluations excluded; both are the machine's "
           "as it was then: on a CPU shared with other work they follow that work, not the method).", ""]
    for sweep in sweep_dirs(out):
        md += [f"`{sweep.relative_to(out)}`", "", comparison_table([r.path for r in finished(swept_runs(sweep))]), ""]
    for name in STAGE_ORDER:
        if name not in known and not (name == "claims" and (out / "claims.md").exists()):
            continue
        sec = known.get(name, {}).get("seconds")
        md += [f"## {name}" + (f" ({float(sec):.0f} s)" if sec is not None else ""), ""]
        log = str(known.get(name, {}).get("log", ""))
        if name == "claims":
            md += [*_claims_table(out), ""]
        elif name == "figures":  # (no figure or table: the stage's log says why)
            md += _figures_section(out, figs) or (["```", log.strip(), "```", ""] if log.strip() else [])
        elif name == "sweep" and log.lstrip().startswith(RUNS_TABLE_HEADER):
            md += ["Its runs are in the tables under Runs above.", ""]
        elif name == "probe":
            if log.strip():
                md += ["```", log.strip(), "```", ""]
            for table in sorted((out / "probes").glob("*.md")):
                md += [f"### probes: {table.stem}", "", table.read_text().strip(), ""]
        elif log.strip():
            md += ["```", log.strip(), "```", ""]
    text = "\n".join(md) + "\n"
    report = out / "report.md"
    from .. import atomic

    atomic.write_text(report, text)
    atomic.write_text(out / "report.html", render_html(text))
    return report


def _figures_section(out: Path, figs: Path) -> list[str]:
    """Every table, then every figure with its caption."""
    md: list[str] = []
    for table in sorted(figs.glob("*.md")):
        if table.name == "index.md":
            continue
        md += [f"### {table.stem}", "", table.read_text().strip(), ""]
    captions = figure_captions(figs)
    for png in sorted(figs.glob("*.png")):
        md += [f"### {png.stem}", "", f"![{png.stem}](figures/{png.name})", ""]
        if captions.get(png.stem):
            md += [f"*{captions[png.stem]}*", ""]
    return md


#: the report's page style: readable tables (the comparison and figure tables are wide) and figures
HTML_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 1em;line-height:1.4}"
              "table{border-collapse:collapse;margin:0.5em 0 1em;font-size:0.85em;display:block;overflow-x:auto}"
              "th,td{border:1px solid #ccc;padding:2px 6px}th{background:#f2f2f2}"
              "img{max-width:100%}pre{background:#f6f6f6;padding:0.5em;overflow-x:auto}"
              "code{font-size:0.9em}")


def render_html(markdown: str, title: str = "mhar-probe report") -> str:
    """report.md as an HTML page: CommonMark with pipe tables (markdown-it-py), raw HTML in the
    Markdown escaped, not passed through."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{HTML_STYLE}</style></head>\n<body>\n{body}</body></html>\n")
