"""Under-trained kv x H grid (paper Figure heads_under): for a preset whose grid was trained at
two or more budgets, the grid at the shortest one, with the most over-subscribed row (smallest
KV, the paper's KV = 1) outlined."""

from __future__ import annotations

from .headgrid import draw_heatmap, head_grids
from .registry import Output, Skip, generator
from .style import COLUMN, new_figure, paper_style

NEEDS = "the same MHAR kv x H grid at two step budgets (e.g. mhar sweep ... --steps 100 400)"


@generator("heads_under", kind="figure", paper_ref="fig:heads_under", needs=NEEDS)
def make(ctx) -> list[Output]:
    by_preset: dict[str, list] = {}
    for g in head_grids(ctx.runs):
        by_preset.setdefault((g.preset, g.corpus), []).append(g)
    outputs = []
    multi = len({c for _, c in by_preset}) > 1
    for (preset, corpus), grids in sorted(by_preset.items()):
        budgets = sorted({g.steps for g in grids})
        if len(budgets) < 2:
            continue
        g = max((x for x in grids if x.steps == budgets[0]), key=lambda x: x.cells)
        outline = int(g.grid["kv"].values.min())
        with paper_style():
            fig, ax = new_figure(COLUMN, 0.8)
            drawn = draw_heatmap(ax, g.grid, outline_kv=outline)
            ax.set_title(f"{g.label} under-trained: {g.steps} of {budgets[-1]} steps")
            ax.legend(loc="upper left", bbox_to_anchor=(0, -0.2), ncol=2, handlelength=1.6)
            name = f"heads_under_{preset}" + (f"_{_slug(corpus)}" if multi else "")
            paths = ctx.save_figure(fig, name)
        row = g.grid.sel(kv=outline)
        drop = float(row.sel(H=row["H"].min()) - row.min())
        p = ctx.paper["heads_under"]
        outputs.append(Output(name, paths, dict(grid=g.grid, budgets=budgets, **drawn),
                              [f"KV={outline} row: drop from H=min to its best {drop:.4f} "
                               f"(paper 100M KV=1: {p['drop_h1_to_h8']}, noise floor ~{p['noise_floor']})"]))
    if not outputs:
        raise Skip("no preset has its kv x H grid at two step budgets", [NEEDS])
    return outputs


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")[:40]
