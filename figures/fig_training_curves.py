"""Training curves (paper Figure trainloss): EMA-smoothed training loss of every method in one
paired group (same preset, corpus, LR, seed, budget), with an inset zooming on the tail."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from analysis.runs import select
from mhar_probe.model.methods import run_label

from .common import groups, scale_label
from .registry import Output, Skip, generator
from .style import COLUMN, FULL, METHOD_ORDER, method_color, new_figure, paper_style

NEEDS = "a baseline and an MHAR run with the same preset, corpus, LR, seed and steps"
TAIL_FRACTION = 0.4  # the paper's inset: steps 12K-20K of 20K
MIN_STEPS_FOR_INSET = 20  # a tail zoom of a handful of steps shows nothing


def ema(values: np.ndarray, span: float) -> np.ndarray:
    """Bias-corrected exponential moving average (alpha = 2 / (span + 1)); NaNs are skipped."""
    alpha = 2.0 / (span + 1.0)
    out = np.full_like(values, np.nan, dtype=float)
    avg, weight = 0.0, 0.0
    for i, v in enumerate(values):
        if np.isfinite(v):
            avg = (1 - alpha) * avg + alpha * v
            weight = (1 - alpha) * weight + alpha
        out[i] = avg / weight if weight else np.nan
    return out


@generator("training_curves", kind="figure", paper_ref="fig:trainloss", needs=NEEDS)
def make(ctx) -> list[Output]:
    ds = ctx.runs
    chosen = {}
    for key, sub in groups(ds, ("preset", "corpus", "lr", "seed", "steps", "hidden_size", "layers")):
        methods = set(sub["method"].values.tolist())
        if not {"baseline", "mhar"} <= methods:
            continue
        rank = (len(methods), key["steps"], -abs(np.log(key["lr"] / 5e-4)))
        if key["preset"] not in chosen or rank > chosen[key["preset"]][0]:
            chosen[key["preset"]] = (rank, key, sub)
    if not chosen:
        raise Skip("no baseline/MHAR pair shares preset, corpus, LR, seed and steps", [NEEDS])
    outputs = []
    for preset in sorted(chosen):
        _, key, sub = chosen[preset]
        steps = sub["step"].values
        last = int(key["steps"])
        span = max(5.0, last / 20)
        start = int(last * (1 - TAIL_FRACTION))
        curves = {}
        with paper_style():
            use_inset = last >= MIN_STEPS_FOR_INSET
            # the tail zoom sits in its own panel (the paper draws it as an inset; at small budgets
            # the curves have not flattened and an inset would cover them)
            fig, axes = new_figure(FULL if use_inset else COLUMN, 0.36 if use_inset else 0.72,
                                   ncols=2 if use_inset else 1)
            ax, inset = (axes[0], axes[1]) if use_inset else (axes, None)
            tail_vals = []
            base_kv = int(select(sub, method="baseline")["kv"].values[0])
            mhar_H = ctx.mhar_H(select(sub, method="mhar")["H"].values.tolist(), base_kv)
            for method in [m for m in METHOD_ORDER if m in set(sub["method"].values.tolist())]:
                run = select(sub, method=method)
                # one run per method; among routed H, the lowest tail-mean H would be cherry-picking:
                # MHAR is the H every table and figure uses (ctx.mhar_H: the study's --mhar-heads), then the first
                hs = run["H"].values
                i = int(np.flatnonzero(hs == mhar_H)[0]) if method == "mhar" else 0
                y = run["train_loss"].isel(run=i).values
                ok = np.isfinite(y) & (steps <= last)
                smooth = ema(y[ok], span)
                x = steps[ok]
                label = run_label(method, int(hs[i]), "display")
                ax.plot(x, smooth, color=method_color(method), label=label)
                if inset is not None:
                    inset.plot(x[x >= start], smooth[x >= start], color=method_color(method))
                tail_vals += smooth[x >= start].tolist()
                curves[method] = dict(step=x.tolist(), ema=smooth.tolist(), run=str(run["run"].values[i]))
            if inset is not None:
                lo, hi = min(tail_vals), max(tail_vals)
                pad = 0.08 * (hi - lo or 1e-3)
                inset.set_xlim(start, last)
                inset.set_ylim(lo - pad, hi + pad)
                inset.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
                inset.set_title(f"tail: steps {start}-{last}", fontweight="normal")
                inset.set_xlabel("step")
                inset.set_ylabel("training loss (EMA)")
                ax.indicate_inset_zoom(inset, edgecolor="#888888", alpha=0.6)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("step")
            ax.set_ylabel("training loss (EMA)")
            ax.set_title(f"{scale_label(preset, key['hidden_size'], key['layers'])}, {key['corpus']}, lr {key['lr']:g}, seed {key['seed']}")
            ax.legend(loc="upper right", fontsize=6.5, frameon=False)
            name = f"training_curves_{preset}"
            paths = ctx.save_figure(fig, name)
        outputs.append(Output(name, paths, dict(curves=curves, inset=(start, last) if use_inset else None,
                                                span=span)))
    return outputs
