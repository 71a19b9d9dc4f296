"""Table widthcost: the width control. At fixed depth and KV, baseline, single-head and MHAR at
two or more widths d (e.g. presets 100m and 124m): deltas vs baseline per width and the
MHAR - single-head gap."""

from __future__ import annotations

from analysis.runs import select

from .common import cell_mean, groups, pick_lr, shared_seeds
from .registry import Output, Skip, generator
from .tables import Cell, Table

NEEDS = ("baseline, attnres and mhar runs at two widths with the same depth and KV "
         "(mhar sweep --presets 100m 124m --methods baseline attnres mhar, or --hidden-size)")
COLUMNS = ["Width", "Baseline", "Single-head", "MHAR", "MHAR - single"]


@generator("table_width", kind="table", paper_ref="tab:widthcost", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    t = Table("table_width", "Width control: deltas vs baseline at fixed depth and KV", COLUMNS)
    found = {}
    for key, sub in groups(ds, ("corpus", "layers", "kv", "steps")):
        sub = select(sub, lr=pick_lr(sub))
        widths = [d for d in sorted(set(sub["hidden_size"].values.tolist()))
                  if {"baseline", "attnres", "mhar"} <= set(select(sub, hidden_size=d)["method"].values.tolist())]
        if len(widths) < 2:
            continue
        for i, d in enumerate(widths):
            w = select(sub, hidden_size=d)
            H = ctx.mhar_H(select(w, method="mhar")["H"].values.tolist(), key["kv"])
            cells = [dict(method="baseline"), dict(method="attnres"), dict(method="mhar", H=H)]
            seeds = shared_seeds(w, cells)  # the same seeds in all three cells: deltas stay paired
            if seeds and any(set(select(w, **c)["seed"].values.tolist()) - set(seeds) for c in cells):
                t.notes.append(f"d{d}: averaged over the seeds all three cells share ({', '.join(map(str, seeds))}).")
            paired = dict(seed=seeds) if seeds else {}
            base, _ = cell_mean(w, method="baseline", **paired)
            single, _ = cell_mean(w, method="attnres", **paired)
            mhar, _ = cell_mean(w, method="mhar", H=H, **paired)
            presets = "/".join(sorted(set(w["preset"].values.tolist())))
            t.add([Cell(f"d{d} ({presets}), L{key['layers']}, kv{key['kv']}, H{H}", d), Cell.num(base),
                   Cell.num(single, delta=single - base), Cell.num(mhar, delta=mhar - base),
                   Cell.num(mhar - single, "{:+.3f}", bold=True)], rule_before=i == 0 and bool(t.rows))
            found[(key["corpus"], key["layers"], key["kv"], key["steps"], d)] = dict(
                baseline=base, attnres=single, mhar=mhar, H=H)
    if not found:
        raise Skip("no depth/KV setting has baseline, single-head and MHAR runs at two widths", [NEEDS])
    for i, r in enumerate(ctx.paper["width"]["rows"]):
        dl = r["deltas"]  # the paper's printed deltas
        t.add([Cell(f"{r['width']} (paper)", r["hidden_size"]), Cell.num(r["baseline"]),
               Cell.num(r["attnres"], delta=dl["attnres"]), Cell.num(r["mhar"], delta=dl["mhar"]),
               Cell.num(dl["mhar_minus_single"], "{:+.3f}")],
              source="paper", rule_before=i == 0)
    t.notes.append("Paper: " + ctx.paper["width"]["what"] + f" ({ctx.paper['width']['ref']}).")
    return [Output("table_width", ctx.write_table(t), dict(table=t, cells=found))]
