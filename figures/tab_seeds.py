"""Table seeds: paired per-seed deltas vs baseline (same seed = same data order), mean +- sd,
SE, |mean|/SE and the paired t-test p (analysis.stats.curves.paired_seed_deltas)."""

from __future__ import annotations

from analysis.runs import select
from analysis.stats.curves import paired_seed_deltas
from mhar_probe.model.methods import run_label

from .common import groups, pick_lr, scale_label
from .registry import Output, Skip, generator
from .style import METHOD_ORDER, method_label
from .tables import Cell, Table

NEEDS = "baseline and method runs at two or more seeds with the same preset, LR and steps (mhar sweep --seeds 1 2 3)"
COLUMNS = ["Scale", "Method", "Seeds", "Delta mean +- sd", "SE", "|mean|/SE", "p (paired t)"]


@generator("table_seeds", kind="table", paper_ref="tab:seeds", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    t = Table("table_seeds", "Seed robustness: paired per-seed delta vs baseline (tail-mean val loss)", COLUMNS)
    found = {}
    for key, sub in groups(ds, ("corpus", "preset", "steps", "hidden_size", "layers")):
        sub = select(sub, lr=pick_lr(sub))
        if len(set(select(sub, method="baseline")["seed"].values.tolist())) < 2:
            continue
        # every method (and every MHAR H) paired over two or more seeds
        rows = [r for r in paired_seed_deltas(ctx.records(sub), pair_on=("preset", "kv", "lr", "seed")) if r.n >= 2]
        rows.sort(key=lambda r: (METHOD_ORDER.index(r.method) if r.method in METHOD_ORDER else 99, r.H or 0))
        for i, r in enumerate(rows):
            label = run_label(r.method, r.H, "display")
            t.add([Cell(f"{scale_label(key['preset'], key['hidden_size'], key['layers'])}, {key['corpus']}, lr {r.lr:g}", key["preset"]),
                   Cell(label, r.method), Cell(str(r.n), r.n), Cell(f"{r.mean:+.3f} ± {r.sd:.3f}", r.mean),
                   Cell.num(r.se, "{:.4f}"), Cell.num(r.abs_over_se, "{:.1f}"), Cell.num(r.p_value, "{:.3g}")],
                  rule_before=i == 0 and bool(t.rows))
            found[(key["corpus"], key["preset"], key["steps"], r.method, r.H)] = r
    if not found:
        raise Skip("no preset has a baseline and a method paired over two or more seeds", [NEEDS])
    for i, r in enumerate(ctx.paper["seeds"]["rows"]):
        t.add([Cell(f"{scale_label(r['scale'])} (paper)", r["scale"]), Cell(method_label(r["method"]), r["method"]),
               Cell("3", 3), Cell(f"{r['mean']:+.3f} ± {r['sd']:.3f}", r["mean"]), Cell("-"), Cell("-"), Cell("-")],
              source="paper", rule_before=i == 0)
    t.notes.append("Paper: " + ctx.paper["seeds"]["what"] + f" ({ctx.paper['seeds']['ref']}).")
    return [Output("table_seeds", ctx.write_table(t), dict(table=t, deltas=found))]
