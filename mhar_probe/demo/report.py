"""The demo's report: the comparison table of the trained runs, and report.md / report.html
with every stage's output, the probe and figure tables and the figures inline."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError


@dataclass
class Stage:
    """One stage of the demo: its name, wall time and what it printed."""

    name: str
    seconds: float
    log: str


def step_speed(run: Path) -> tuple[float, float]:
    """(median tokens/s of the training steps, seconds spent in them) from a run's metrics.jsonl."""
    from ..jsonl import read_jsonl

    rates, seconds, last = [], 0.0, 0
    for _, row in read_jsonl(run / "metrics.jsonl", UserError):
        if "tokens_per_s" in row:
            rates.append(row["tokens_per_s"])
            seconds += (row["tokens"] - last) / row["tokens_per_s"]
            last = row["tokens"]
    rates.sort()
    return (rates[len(rates) // 2] if rates else float("nan")), seconds


def comparison_table(run_dirs: list[Path]) -> str:
    """Markdown table of the given finished runs: tail-mean val loss, delta vs its seed's
    baseline, the drop of the final validation loss below its step-0 value, parameters, tokens
    per parameter, and speed (median tokens/s of the steps, seconds in training steps)."""
    rows = []
    for p in run_dirs:
        f = p / "summary.json"
        if f.exists():
            rows.append((p, json.loads(f.read_text())))
    base = {s["seed"]: s["tail_mean_val_loss"] for _, s in rows if s["method"] == "baseline"}
    lines = ["| run | H | tail-mean val loss | Δ vs baseline | step-0 val loss | drop | parameters | tokens/param "
             "| tokens/s | train s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for path, s in rows:
        tail = s["tail_mean_val_loss"]
        b = base.get(s["seed"])
        delta = f"{tail - b:+.4f}" if b is not None and s["method"] != "baseline" else "–"
        drop = 1 - s["final_val_loss"] / s["initial_val_loss"]
        heads = s.get("routing_heads")
        rate, seconds = step_speed(path)
        lines.append(f"| {path.name} | {heads if heads is not None else '–'} | {tail:.4f} | {delta} | "
                     f"{s['initial_val_loss']:.4f} | {100 * drop:.0f}% | {s['parameters']:,} | "
                     f"{s['tokens'] / s['parameters']:.1f} | {rate:,.0f} | {seconds:.0f} |")
    return "\n".join(lines)


def write_report(out: Path, stages: list[Stage], seconds: float, title: str) -> Path:
    """report.md (and report.html) with the claim table, every stage's output, tables and figures inline."""
    figs = out / "figures"
    md = [f"# mhar-probe report", "",
          f"{title}. {len(stages)} stages in {seconds:.0f} s. Runs: `{out / 'runs'}`.", ""]
    claims = out / "claims.md"
    if claims.exists():
        md += [claims.read_text().strip(), ""]
    from .export import sweep_dirs
    from .runs import finished, swept_runs

    md += ["## Runs", "", "Tail-mean validation loss, size and speed of every finished run (tokens/s: median "
           "over the training steps; train s: time in training steps, evaluations excluded).", ""]
    for sweep in sweep_dirs(out):
        md += [f"`{sweep.relative_to(out)}`", "", comparison_table([r.path for r in finished(swept_runs(sweep))]), ""]
    for st in stages:
        md += [f"## {st.name} ({st.seconds:.0f} s)", ""]
        if st.name in ("figures", "claims"):
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
