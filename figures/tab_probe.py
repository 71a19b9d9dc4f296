"""Table probe (paper Table probe): the forced-compromise probe of trained single-head routing
queries, one row per captured attnres run: width-disagreement KL (trained, random-query null,
learned excess; contiguous and head-interleaved slices), source collinearity, N sources and the
matched-source-count control; the paper's four scales beside yours. Numbers come from
analysis.probes (probe_table, matched_source_count)."""

from __future__ import annotations

from analysis.probes import probe_table
from analysis.probes.source_count import matched_source_count

from .common import scale_label
from .registry import Output, Skip, generator
from .routing import load_captured, load_paper_routing
from .tables import Cell, Table

NEEDS = "a captured single-head run with probes (mhar train --method attnres; mhar capture RUN)"
COLUMNS = ["Run", "Shape", "S", "KL (trained)", "Null (mean ± sd)", "Learned excess",
           "Excess, interleaved", "Collinearity (mean cos)", "N sources", "Matched-N KL ratio"]
KEYS = {  # column -> probe_table row
    "kl": "Width-disagreement KL (trained)", "null": "random-query null (mean over draws)",
    "null_sd": "random-query null (sd over draws)", "excess": "learned excess (trained - null)",
    "interleaved": "head-interleaved slicing: learned excess", "collinearity": "Source collinearity (mean cos, all N)",
    "sources": "N sources",
}


@generator("table_probe", kind="table", paper_ref="tab:probe", needs=NEEDS)
def make(ctx) -> list[Output]:
    runs = [c for c in load_captured(ctx.routing_datasets()) if c.method == "attnres" and c.has_probes]
    if not runs:
        raise Skip("no captured single-head (attnres) run with probes", [NEEDS])
    runs.sort(key=lambda c: (c.shape, c.seed, c.name))
    matched = matched_source_count([c.ds for c in runs], labels=[c.name for c in runs]) if len(runs) > 1 else None
    t = Table("table_probe", "Forced-compromise probe of single-head routing queries (width-disagreement, nats)",
              COLUMNS)
    values = {}
    for i, c in enumerate(runs):
        col = probe_table([c.ds]).iloc[:, 0]
        v = {k: float(col[row]) for k, row in KEYS.items()}
        v["interleaved_differs"] = bool(col["head-interleaved slicing differs from contiguous"])
        v["matched_ratio"] = float(matched.median_ratio_to_first.values[i]) if matched is not None else float("nan")
        values[c.name] = v
        d, L, G = c.shape
        t.add([Cell(c.name, c.name), Cell(f"d{d}/L{L}/kv{G}", f"d{d}/L{L}/kv{G}"),
               Cell(str(c.ds.attrs.get("slices")), int(c.ds.attrs.get("slices", 0))),
               Cell.num(v["kl"]), Cell(f"{v['null']:.3f} ± {v['null_sd']:.3f}", v["null"]),
               Cell.num(v["excess"], bold=True),
               Cell.num(v["interleaved"]) if v["interleaved_differs"] else Cell("= contiguous", float("nan")),
               Cell.num(v["collinearity"]), Cell(str(int(v["sources"])), int(v["sources"])), Cell.num(v["matched_ratio"], "{:.2f}")])
    paper = load_paper_routing()["probe"]
    for i, p in enumerate(paper["columns"]):
        ratio = Cell("~2 (vs 100M)", paper["matched_source_count_median_ratio"]) if p["scale"] == "1b" else Cell("-")
        t.add([Cell(f"{scale_label(p['scale'])} (paper)", p["scale"]), Cell(p["shape"], p["shape"]),
               Cell(str(paper["slices"]), paper["slices"]), Cell.num(p["kl"]), Cell.num(p["null"]),
               Cell.num(p["excess"], bold=True), Cell("-"), Cell.num(p["collinearity"]),
               Cell(str(p["sources"]), p["sources"]), ratio], source="paper", rule_before=i == 0)
    t.notes.append("Width-disagreement: mean KL(a_s || alpha) over query slices, tokens and sites reading >= 2 "
                   "sources; null: the same for matched-norm random queries; learned excess = trained - null.")
    if not all(v["interleaved_differs"] for v in values.values()):
        t.notes.append("'= contiguous': every routing head of that run is exactly S attention heads wide, so its "
                       "head-interleaved slices are the contiguous ones and the interleaved control measures nothing "
                       "new (capture with another --slices, or a wider model, for a control that differs).")
    if matched is not None:
        t.notes.append(f"Matched-N KL ratio: median over source counts N <= {int(matched.num_sources.max())} "
                       f"of each run's KL / {runs[0].name}'s KL at the same N.")
    t.notes.append("Paper (italic rows, figures/paper_values_routing.json): " + paper["what"] + f" ({paper['ref']}).")
    return [Output("table_probe", ctx.write_table(t), dict(table=t, values=values))]
