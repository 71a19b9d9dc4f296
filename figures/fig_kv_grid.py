"""kv x H grid of MHAR (paper Figure hushape b at 1B, Figure kvh100 at 100M): one heatmap per
preset, at that preset's longest budget, with per-KV optimum stars and the H = KV diagonal."""

from __future__ import annotations

from .headgrid import draw_heatmap, head_grids
from .registry import Output, Skip, generator
from .style import COLUMN, new_figure, paper_style

NEEDS = "mhar runs at several H for at least one KV (e.g. mhar sweep --methods mhar --heads 1 2 4 8 --kv-heads 1 2 4)"


def converged_grids(ds):
    """Per preset, the grid at its longest budget (most cells on ties)."""
    best = {}
    for g in head_grids(ds):
        cur = best.get(g.preset)
        if cur is None or (g.steps, g.cells) > (cur.steps, cur.cells):
            best[g.preset] = g
    return [best[p] for p in sorted(best)]


@generator("kv_grid", kind="figure", paper_ref="fig:hushape(b), fig:kvh100", needs=NEEDS)
def make(ctx) -> list[Output]:
    grids = converged_grids(ctx.runs)
    if not grids:
        raise Skip("no preset has MHAR runs at two or more H for one KV with a seed in common", [NEEDS])
    outputs = []
    paper = ctx.paper["kv_grid"]
    for g in grids:
        with paper_style():
            fig, ax = new_figure(COLUMN, 0.8)
            drawn = draw_heatmap(ax, g.grid)
            ax.set_title(f"{g.label}: MHAR, KV x H ({g.steps} steps)")
            if drawn["diagonal"] or drawn["stars"]:
                ax.legend(loc="upper left", bbox_to_anchor=(0, -0.2), ncol=2, handlelength=1.6)
            name = f"kv_grid_{g.preset}"
            paths = ctx.save_figure(fig, name)
        notes = [f"{g.corpus} corpus, lr {g.lr:g}, seeds per cell {int(g.n_seeds.min())}-{int(g.n_seeds.max())}"]
        opt = paper["optimum_H"].get(g.preset)
        if opt:
            notes.append("paper per-KV optimum H: " + ", ".join(f"KV={k}: H={h}" for k, h in opt.items()))
        outputs.append(Output(name, paths, dict(grid=g.grid, **drawn), notes))
    return outputs
