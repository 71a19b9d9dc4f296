"""Table midtrain: per-task accuracy of a control (baseline) and its paired MHAR run (same
preset, corpus, LR, seed, steps) with the exact McNemar test on per-item correctness
(analysis.stats.compare_eval_dirs: discordant counts b, c, p and Holm-adjusted p)."""

from __future__ import annotations

from analysis.runs import select
from mhar_probe.model.methods import ROUTED_METHODS

from .common import scale_label
from .evalfiles import WHERE, find_eval
from .registry import Output, Skip, generator
from .tables import Cell, Table

NEEDS = f"harness output with --log_samples for a baseline run and its paired MHAR/delta run in {WHERE}"
COLUMNS = ["Pair", "Task", "Metric", "n", "Control", "+MHAR", "Delta", "b", "c", "p (McNemar)", "p (Holm)",
           "distinct", "p (distinct)"]


def pairs(ctx):
    """(control run name, MHAR run name, preset, control eval dir, MHAR eval dir) of the runs with
    eval outputs (`find_eval`), paired on everything but the method."""
    ds = ctx.runs
    out = []
    for i in range(ds.sizes["run"]):
        r = ds.isel(run=i)
        if str(r["method"].item()) not in ROUTED_METHODS:
            continue
        routed = find_eval(ctx.evals, str(r["run"].item()), str(r["path"].item()))
        if routed is None:
            continue
        base = select(ds, method="baseline", preset=str(r["preset"].item()), corpus=str(r["corpus"].item()),
                      lr=float(r["lr"].item()), seed=int(r["seed"].item()), steps=int(r["steps"].item()))
        for b, path in zip(base["run"].values.tolist(), base["path"].values.tolist()):
            if (control := find_eval(ctx.evals, b, path)) is not None:
                out.append((b, str(r["run"].item()), str(r["preset"].item()), control, routed))
    return out


@generator("table_midtrain", kind="table", paper_ref="tab:midtrain", needs=NEEDS)
def make(ctx) -> list[Output]:
    from analysis.stats.compare import compare_eval_dirs
    from analysis.stats.errors import StatsError

    found = pairs(ctx)
    if not found:
        raise Skip("no baseline/MHAR pair with harness samples" + ("" if ctx.evals else " (no evals directory)"), [NEEDS])
    t = Table("table_midtrain", "Downstream accuracy, control vs +MHAR, with paired exact McNemar tests", COLUMNS)
    comparisons, unpaired = {}, []
    for base, mhar, preset, base_dir, mhar_dir in found:
        try:
            cmp = compare_eval_dirs(base_dir, mhar_dir, n_boot=1000)
        except StatsError as e:  # e.g. an evaluation without --log_samples: that pair is left out, said why
            unpaired.append(f"{base} vs {mhar} left out: {e}")
            continue
        comparisons[(base, mhar)] = cmp
        for i, row in enumerate(cmp.rows):
            label = f"{scale_label(preset)}: {base} vs {mhar}"
            t.add([Cell(label, f"{base}|{mhar}"), Cell(row.task, row.task),
                   Cell(f"{row.metric} ({row.filter})", row.metric), Cell(str(row.n), row.n),
                   Cell.num(row.acc_a), Cell.num(row.acc_b, bold=row.acc_b > row.acc_a), Cell.num(row.delta, "{:+.3f}"),
                   Cell(str(row.b), row.b), Cell(str(row.c), row.c), Cell.num(row.p_value, "{:.3g}"),
                   Cell.num(row.p_holm, "{:.3g}"),
                   Cell("?" if row.n_distinct is None else str(row.n_distinct), row.n_distinct),
                   Cell.num(row.p_distinct, "{:.3g}")], rule_before=i == 0 and bool(t.rows))
        t.notes += cmp.notes
    if not comparisons:
        raise Skip("no baseline/MHAR pair could be compared: " + "; ".join(unpaired), [NEEDS])
    t.notes += unpaired
    for i, p in enumerate(ctx.paper["midtrain"]["rows"]):
        t.add([Cell("paper 8B (Marin-8B CPT)", "paper"), Cell(p["task"], p["task"]), Cell("accuracy"), Cell("-"),
               Cell.num(p["control"]), Cell.num(p["mhar"]), Cell.num(p["mhar"] - p["control"], "{:+.3f}"),
               Cell(str(p["b"]), p["b"]) if "b" in p else Cell("-"), Cell(str(p["c"]), p["c"]) if "c" in p else Cell("-"),
               Cell.num(p.get("p"), "{:.3g}"), Cell("-"), Cell("-"), Cell("-")], source="paper", rule_before=i == 0)
    t.notes.append("b = control right and MHAR wrong, c = MHAR right and control wrong.")
    t.notes.append("distinct = different questions among the n items; p (distinct) = exact McNemar on one pair "
                   "per distinct question.")
    t.notes.append("Paper: " + ctx.paper["midtrain"]["what"] + f" ({ctx.paper['midtrain']['ref']}).")
    return [Output("table_midtrain", ctx.write_table(t), dict(table=t, comparisons=comparisons))]
