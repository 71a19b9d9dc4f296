"""Table lrsweep: best-vs-best learning rate. Each method (MHAR at its chosen H) at its own best
LR (seed-averaged tail-mean), every LR tried listed, delta vs the best baseline of the same
preset (analysis.stats.curves.best_vs_best). A method trained at one rate only is left out, with
a note: it has no best of its own to compare."""

from __future__ import annotations

from analysis.runs import h_coord, select
from analysis.stats.curves import best_vs_best
from mhar_probe.model.methods import run_label

from .common import groups, scale_label, shared_seeds
from .registry import Output, Skip, generator
from .style import METHOD_ORDER, method_label
from .tables import Cell, Table

NAME = "table_lr_sweep"
NEEDS = "baseline and method runs at two or more learning rates (mhar sweep --lrs 1e-4 5e-4 1e-3 ...)"
COLUMNS = ["Scale", "Method", "Tail-mean by LR", "Best LR", "Tail-mean at best", "Delta vs best baseline"]


def _paired_lr_cells(sub):
    """Each (method, H) keeps the seeds all its LR cells share (when they share any), so its best
    LR is chosen on paired seeds; returns the selection and what was left out."""
    keep, dropped = [], []
    for m, h in sorted(set(zip(sub["method"].values.tolist(), sub["H"].values.tolist()))):
        cell = select(sub, method=m, H=h)
        lrs = sorted(set(cell["lr"].values.tolist()))
        seeds = shared_seeds(cell, [dict(lr=lr) for lr in lrs])
        extra = sorted(set(cell["seed"].values.tolist()) - set(seeds)) if seeds else []
        if extra:
            dropped.append(f"{run_label(m, h)} seed{'s' if len(extra) > 1 else ''} "
                           f"{', '.join(map(str, extra))}")
        keep += [n for n, s in zip(cell["run"].values.tolist(), cell["seed"].values.tolist())
                 if not seeds or s in seeds]
    return sub.sel(run=keep), dropped


def _paired_delta(sub, row, base_row) -> float:
    """tail-mean(method at its best LR) - tail-mean(baseline at its best LR), both averaged over
    the seeds the two cells share (all of each cell's seeds when they share none)."""
    a = dict(method=row.method, H=h_coord(row.H), lr=float(row.best_lr))
    b = dict(method=base_row.method, H=h_coord(base_row.H), lr=float(base_row.best_lr))
    seeds = shared_seeds(sub, [a, b])
    paired = dict(seed=seeds) if seeds else {}
    return float(select(sub, **a, **paired)["tail_mean"].mean() - select(sub, **b, **paired)["tail_mean"].mean())


@generator(NAME, kind="table", paper_ref="tab:lrsweep", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    t = Table("table_lr_sweep", "Best-vs-best learning rate: each method at its own best LR", COLUMNS)
    found = {}
    for key, sub in groups(ds, ("corpus", "preset", "steps", "hidden_size", "layers")):
        if len(set(sub["lr"].values.tolist())) < 2 or "baseline" not in set(sub["method"].values.tolist()):
            continue
        base_kv = int(select(sub, method="baseline")["kv"].values[0])
        sub = select(sub, kv=base_kv)
        H = ctx.mhar_H(select(sub, method="mhar")["H"].values.tolist(), base_kv)
        sub, dropped = _paired_lr_cells(sub)
        if dropped:
            t.notes.append(f"{scale_label(key['preset'], key['hidden_size'], key['layers'])}, {key['corpus']}: each method's learning rates "
                           f"compared on the seeds all its LR cells share (left out: {'; '.join(dropped)}).")
        rows = [r for r in best_vs_best(ctx.records(sub)) if r.method != "mhar" or r.H == H]
        # a method tried at one rate has no best of its own: its row would read as best-vs-best
        one_rate = [r for r in rows if r.method != "baseline" and len(r.by_lr) < 2]
        if one_rate:
            rows = [r for r in rows if r.method == "baseline" or len(r.by_lr) > 1]
            t.notes.append(f"{scale_label(key['preset'], key['hidden_size'], key['layers'])}, {key['corpus']}: left out, "
                           "trained at one learning rate only: " + "; ".join(
                               f"{run_label(r.method, r.H)} (lr {float(next(iter(r.by_lr))):g})" for r in one_rate) + ".")
        base_row = min((r for r in rows if r.method == "baseline"), key=lambda r: r.tail_mean)
        for r in rows:  # delta over the seeds the method's and the baseline's best cells share
            r.delta = _paired_delta(sub, r, base_row)
        rows.sort(key=lambda r: METHOD_ORDER.index(r.method) if r.method in METHOD_ORDER else 99)
        first = True
        for r in rows:
            tried = ", ".join(f"{float(lr):g}: {v:.3f}" for lr, v in sorted(r.by_lr.items(), key=lambda kv: float(kv[0])))
            label = run_label(r.method, r.H, "display")
            t.add([Cell(f"{scale_label(key['preset'], key['hidden_size'], key['layers'])}, {key['corpus']}, {key['steps']} steps", key["preset"]),
                   Cell(label, r.method), Cell(tried, tried), Cell(f"{float(r.best_lr):g}", float(r.best_lr)),
                   Cell.num(r.tail_mean, bold=r.tail_mean == min(x.tail_mean for x in rows)),
                   Cell.num(None if r.method == "baseline" else r.delta, "{:+.3f}")], rule_before=first and bool(t.rows))
            first = False
            found[(key["corpus"], key["preset"], key["steps"], r.method)] = r
    if not found:
        raise Skip("no preset has baseline runs at two or more learning rates", [NEEDS])
    for i, r in enumerate(ctx.paper["lr_sweep"]["rows"]):
        t.add([Cell(f"{scale_label(r['scale'])} (paper)", r["scale"]), Cell(method_label(r["method"]), r["method"]),
               Cell("-"), Cell(f"{r['best_lr']:g}", r["best_lr"]), Cell.num(r["tail_mean"]),
               Cell.num(r.get("delta"), "{:+.3f}")], source="paper", rule_before=i == 0)
    t.notes.append("Paper: " + ctx.paper["lr_sweep"]["what"] + f" ({ctx.paper['lr_sweep']['ref']}).")
    return [Output("table_lr_sweep", ctx.write_table(t), dict(table=t, best=found))]
