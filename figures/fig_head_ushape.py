"""Head-count U-shape (paper Figure hushape a): tail-mean loss against routing heads H, one
line per KV row, the per-row optimum starred; the paper's 1B KV = 8 row as a faint overlay on
a right-hand axis (absolute losses differ between scales, the shape is what compares)."""

from __future__ import annotations

import numpy as np
import seaborn as sns

from .common import scale_label
from .fig_kv_grid import NEEDS, converged_grids
from .headgrid import row_optima
from .registry import Output, Skip, generator
from .style import COLUMN, PAPER_COLOR, STAR_COLOR, new_figure, paper_style


@generator("head_ushape", kind="figure", paper_ref="fig:hushape(a)", needs=NEEDS)
def make(ctx) -> list[Output]:
    grids = converged_grids(ctx.runs)
    if not grids:
        raise Skip("no preset has MHAR runs at two or more H for one KV with a seed in common", [NEEDS])
    paper = ctx.paper["head_ushape"]
    outputs = []
    for g in grids:
        kvs = [int(k) for k in g.grid["kv"].values]
        colors = sns.color_palette("crest", n_colors=max(2, len(kvs)))
        lines = {}
        with paper_style():
            fig, ax = new_figure(COLUMN, 0.75)
            for color, kv in zip(colors, kvs):
                row = g.grid.sel(kv=kv)
                ok = np.isfinite(row.values)
                if ok.sum() < 2:
                    continue
                hs = row["H"].values[ok].astype(int)
                ax.plot(hs, row.values[ok], marker="o", color=color, label=f"KV = {kv}")
                lines[kv] = (hs.tolist(), row.values[ok].tolist())
            stars = [s for s in row_optima(g.grid) if s[0] in lines]
            for k, (kv, h) in enumerate(stars):
                ax.scatter([h], [float(g.grid.sel(kv=kv, H=h))], marker="*", s=120, color=STAR_COLOR,
                           edgecolors="black", linewidths=0.6, zorder=5,
                           label="lowest loss of its KV row" if k == 0 else None)
            ax.set_xscale("log", base=2)
            allh = sorted({h for hs, _ in lines.values() for h in hs} | {int(k) for k in paper["points"]})
            ax.set_xticks(allh, [str(h) for h in allh])
            ax.minorticks_off()
            ax.set_xlabel("routing heads H")
            ax.set_ylabel("tail-mean val loss")  # the title names the scale
            ax.set_title(f"{g.label}: loss vs routing heads ({g.steps} steps)")
            twin = ax.twinx()
            ph = sorted(int(k) for k in paper["points"])
            twin.plot(ph, [paper["points"][str(h)] for h in ph], ls="--", marker="s", ms=3, color=PAPER_COLOR,
                      alpha=0.7, label=f"paper {scale_label(paper['scale'])}, KV = {paper['kv']} (right axis)")
            twin.tick_params(axis="y", colors=PAPER_COLOR, labelsize=6, length=2, width=0.5)
            twin.set_ylabel(f"paper {scale_label(paper['scale'])} val loss", color=PAPER_COLOR)
            twin.spines["right"].set_visible(True)
            twin.spines["right"].set_color(PAPER_COLOR)
            handles = ax.get_legend_handles_labels()
            thandles = twin.get_legend_handles_labels()
            ax.legend(handles[0] + thandles[0], handles[1] + thandles[1], loc="upper center",
                      bbox_to_anchor=(0.5, -0.22), ncol=2)
            name = f"head_ushape_{g.preset}"
            paths = ctx.save_figure(fig, name)
        outputs.append(Output(name, paths, dict(lines=lines, stars=stars, paper=paper["points"])))
    return outputs
