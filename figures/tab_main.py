"""Table main: tail-mean validation loss of baseline, hyper-connections, single-head and MHAR
(and over-split MHAR) per preset on the main corpus, deltas vs the same-rate baseline, the
best method in bold; the paper's rows beside yours."""

from __future__ import annotations

import numpy as np

from .common import main_corpus, scale_label, values
from .comparison import compare_methods
from .registry import Output, Skip, generator
from .tables import Cell, Table

NEEDS = "a baseline and hyper/attnres/mhar runs of one preset at one LR (e.g. mhar sweep --methods baseline hyper attnres mhar --heads 8 16)"
KEYS = ("baseline", "hyper", "attnres", "mhar", "mhar_over")
COLUMNS = ["Scale", "d/L/KV (H, over-split H)", "Baseline", "Hyper-conn.", "Single-head", "MHAR", "MHAR over-split"]


def method_cells(loss: dict[str, float], keys=KEYS, deltas: dict[str, float] | None = None) -> list[Cell]:
    """Loss cells with deltas vs baseline (or the given `deltas`); the lowest of the row in bold."""
    present = {k: v for k, v in loss.items() if k in keys and v is not None and np.isfinite(v)}
    best = min(present, key=present.get) if present else None
    base = loss.get("baseline")
    cells = []
    for k in keys:
        v = present.get(k)
        delta = None if k == "baseline" or base is None or v is None else v - base
        if deltas is not None and k != "baseline":
            delta = deltas.get(k)
        cells.append(Cell.num(v, delta=delta, bold=(k == best and len(present) > 1)))
    return cells


def paper_row(t: Table, row: dict, keys=KEYS, extra: list[Cell] | None = None) -> None:
    loss = {k: row.get(k) for k in keys}
    arch = row["d_L_kv"] + (f" ({row['mhar_H']}, {row['over_H']})" if "mhar_H" in row else "")
    t.add([Cell(f"{scale_label(row['scale'])} (paper)", row["scale"]), Cell(arch, arch),
           *method_cells(loss, keys, row.get("deltas", {})), *(extra or [])], source="paper")


@generator("table_main", kind="table", paper_ref="tab:main", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    corpus = main_corpus(ds)
    comps = [c for p in values(ds, "preset") if (c := compare_methods(ds, p, corpus, ctx.mhar_heads)) is not None]
    if not comps:
        raise Skip(f"no preset on the {corpus} corpus has a baseline and another method at one LR", [NEEDS])
    t = Table("table_main", f"Validation loss (tail-mean), {corpus} corpus: methods vs baseline", COLUMNS)
    paper = {r["scale"]: r for r in ctx.paper["main"]["rows"]}
    data = {}
    for c in comps:
        arch = f"{c.hidden_size}/{c.layers}/{c.kv} ({c.H_main or '-'}, {c.H_over or '-'})"
        t.add([Cell(scale_label(c.preset), c.preset), Cell(arch, arch), *method_cells(c.loss)], rule_before=bool(t.rows))
        if c.preset in paper:
            paper_row(t, paper.pop(c.preset))
        data[c.preset] = c
        t.notes.append(f"{scale_label(c.preset)}: lr {c.lr:g}, {c.steps} steps, runs per cell "
                       + ", ".join(f"{k} {n}" for k, n in c.n.items()))
        if c.H_main is not None:
            why = ("the H this study evaluates and its claims use (--mhar-heads)" if c.H_main == ctx.mhar_heads
                   else "H = 8 if trained, else H = KV, else the largest H <= 8 (--mhar-heads picks another)")
            t.notes.append(f"{scale_label(c.preset)}: the MHAR column is H = {c.H_main}: {why}.")
    for i, row in enumerate(paper.values()):  # paper scales you did not train, at the end
        paper_row(t, row)
        t.rows[-1].rule_before = i == 0
    t.notes.append("Paper: " + ctx.paper["main"]["what"] + f" ({ctx.paper['main']['ref']}).")
    return [Output("table_main", ctx.write_table(t), dict(table=t, comparisons=data))]
