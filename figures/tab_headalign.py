"""Table headalign (paper Table headalign): MHAR (arbitrary d/H subspaces) vs MHAR-HW (one
full-width query per KV group) of the same shape and seed, with matched head count: final
validation loss and its delta (hw - mh), plus the routing statistics head-alignment would move
(per-head deviation, slice-KL excess, consensus correlation), from analysis.probes.headalign_table;
the paper's three scales beside yours."""

from __future__ import annotations

from analysis.probes import headalign_table

from .common import scale_label
from .registry import Output, Skip, generator
from .routing import Captured, load_captured, load_paper_routing
from .tables import Cell, Table

NEEDS = ("captured mhar and mhar_hw runs of one shape and seed, mhar H = mhar_hw KV groups "
         "(mhar train --method mhar_hw; mhar capture RUN)")
COLUMNS = ["Scale / runs", "MHAR", "MHAR-HW", "Δ(hw - mh)", "Max dev. MHAR", "Max dev. HW",
           "KL excess MHAR", "KL excess HW", "Consensus r"]
KEYS = ("MHAR val loss", "MHAR-HW val loss", "Delta (hw - mh)", "max |D| MHAR", "max |D| MHAR-HW",
        "slice-KL excess MHAR", "slice-KL excess MHAR-HW", "consensus routing r")


def pairs(runs: list[Captured]) -> list[tuple[Captured, Captured]]:
    """(mhar, mhar_hw) with the same shape and seed, mhar's H equal to the groups G (else to
    mhar_hw's own H)."""
    out = []
    for hw in sorted((c for c in runs if c.method == "mhar_hw"), key=lambda c: (c.shape, c.seed, c.name)):
        same = [c for c in runs if c.method == "mhar" and c.shape == hw.shape and c.seed == hw.seed]
        match = [c for c in same if c.H == hw.G] or [c for c in same if c.H == hw.H]
        if match:
            out.append((min(match, key=lambda c: c.name), hw))
    return out


@generator("table_headalign", kind="table", paper_ref="tab:headalign", needs=NEEDS)
def make(ctx) -> list[Output]:
    runs = [c for c in load_captured(ctx.routing_datasets()) if c.has_probes]
    found = pairs(runs)
    if not found:
        raise Skip("no captured mhar / mhar_hw pair of one shape and seed with matched head count", [NEEDS])
    t = Table("table_headalign", "Head alignment: MHAR vs MHAR-HW (final validation loss, routing statistics)",
              COLUMNS)
    values = {}
    for mh, hw in found:
        row = headalign_table([(mh.ds, hw.ds)]).iloc[0]
        v = {k: float(row[k]) for k in KEYS}
        values[(mh.name, hw.name)] = v
        label = f"{mh.scale}, seed {mh.seed} ({mh.name} / {hw.name})"
        t.add([Cell(label, label), Cell.num(v[KEYS[0]]), Cell.num(v[KEYS[1]]),
               Cell.num(v[KEYS[2]], "{:+.3f}", bold=True), *[Cell.num(v[k]) for k in KEYS[3:]]])
    paper = load_paper_routing()["headalign"]
    for i, p in enumerate(paper["rows"]):
        t.add([Cell(f"{scale_label(p['scale'])} (paper)", p["scale"]), Cell.num(p["mhar"]), Cell.num(p["mhar_hw"]),
               Cell.num(p["delta"], "{:+.3f}", bold=True), *[Cell("-")] * 5], source="paper", rule_before=i == 0)
    t.notes.append("Loss: the last val_loss in each run's metrics.jsonl (final-step eval, like the paper); "
                   "max dev.: max |per-head deviation| at the first ten sites; KL excess: within-head slice-KL minus "
                   "its random-query null; consensus r: correlation of the two runs' head-mean routing.")
    t.notes.append(f"Paper (italic rows, figures/paper_values_routing.json): {paper['what']} ({paper['ref']}).")
    return [Output("table_headalign", ctx.write_table(t), dict(table=t, values=values))]
