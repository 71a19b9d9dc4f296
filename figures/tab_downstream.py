"""Table downstream: zero-shot harness results of your runs (headline metric per task), with the
paper's WikiText-2 / LAMBADA / HellaSwag columns filled where your tasks match them."""

from __future__ import annotations

from .common import scale_label
from .evalfiles import WHERE, find_eval, headline_metrics, missing_note
from .registry import Output, Skip, generator
from .style import method_label
from .tables import Cell, Table

NEEDS = f"lm-eval harness output per run in {WHERE}"
PAPER_TASKS = {"wikitext": "WikiText-2 PPL", "lambada": "LAMBADA", "hellaswag": "HellaSwag"}


def paper_key(task: str) -> str | None:
    return next((k for k in PAPER_TASKS if task.startswith(k)), None)


@generator("table_downstream", kind="table", paper_ref="tab:downstream", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    found, missing = {}, []
    for i in range(ds.sizes["run"]):
        r = ds.isel(run=i)
        d = find_eval(ctx.evals, str(r["run"].item()), str(r["path"].item()))
        if d is not None and (m := headline_metrics(d)):
            found[str(r["run"].item())] = (r, m)
        else:
            missing.append(str(r["run"].item()))
    if not found:
        raise Skip("no run has harness results" + (f" under {ctx.evals} or RUN/eval" if ctx.evals else
                                                   " (no evals directory, no RUN/eval)"), [NEEDS])
    tasks = sorted({t for _, m in found.values() for t in m})
    matched = {paper_key(t): t for t in tasks if paper_key(t)}
    others = [t for t in tasks if t not in matched.values()]
    cols = [f"{PAPER_TASKS[k]} ({matched[k]})" if k in matched else PAPER_TASKS[k] for k in PAPER_TASKS]
    metric_of = {t: next(m[t][0] for _, m in found.values() if t in m) for t in tasks}
    t = Table("table_downstream", "Zero-shot downstream evaluation (headline metric per task)",
              ["Run", "Scale", "Method", *cols, *[f"{x} ({metric_of[x].split(',')[0]})" for x in others]])
    for name, (r, m) in sorted(found.items(), key=lambda kv: (str(kv[1][0]["preset"].item()), kv[0])):
        def cell(task):
            if task is None or task not in m:
                return Cell("-")
            label, v = m[task]
            return Cell.num(v, "{:.1f}" if label.startswith("word_perplexity") else "{:.3f}")
        t.add([Cell(name, name), Cell(scale_label(str(r["preset"].item())), str(r["preset"].item())),
               Cell(method_label(str(r["method"].item())), str(r["method"].item())),
               *[cell(matched.get(k)) for k in PAPER_TASKS], *[cell(x) for x in others]])
    for i, p in enumerate(ctx.paper["downstream"]["rows"]):
        t.add([Cell("paper", "paper"), Cell(scale_label(p["scale"]), p["scale"]), Cell(method_label(p["method"]), p["method"]),
               Cell.num(p["wikitext"], "{:.1f}"), Cell.num(p["lambada"]), Cell.num(p["hellaswag"]),
               *[Cell("-") for _ in others]], source="paper", rule_before=i == 0)
    t.notes.append("Metrics: " + ", ".join(f"{x}: {metric_of[x]}" for x in tasks))
    t.notes.append("Paper: " + ctx.paper["downstream"]["what"] + f" ({ctx.paper['downstream']['ref']}).")
    # the runs left out are said in the index (a study evaluates some runs only, by design), not in the table
    return [Output("table_downstream", ctx.write_table(t), dict(table=t, metrics={k: v[1] for k, v in found.items()}),
                   notes=[missing_note(missing, ctx.evals)] if missing else [])]
