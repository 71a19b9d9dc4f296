"""The paired gain over training: at every evaluation step, the held-out loss of each method minus the
same-seed baseline's (left) and of MHAR minus single-head attention residuals (right), the mean over
seeds with a 95% Student t band (`analysis.stats.curves.study_gain_curves`); the last 11 evaluations,
the tail-mean window every table reads, shaded.

Not a figure of the paper, which gives the end of training only (Table main): it shows whether a gain
read at the end is still moving, and how early readings differ from it."""

from __future__ import annotations

import math

import numpy as np

from analysis.stats.curves import GainCurve, study_gain_curves
from mhar_probe.model.methods import run_label
from mhar_probe.tail import TAIL_K

from .common import groups, scale_label
from .registry import Output, Skip, generator
from .style import FULL, METHOD_ORDER, method_color, new_figure, paper_style

NEEDS = "a method and the baseline (or MHAR and single-head) at the same seed, preset, corpus and steps"
#: the y range is set by the evaluations after this fraction of training (the first steps' gaps are large)
SETTLED = 0.2
ONE_SEED_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1)))  # one-seed arms of one method told apart by their dash


def _order(c: GainCurve) -> tuple:
    return (METHOD_ORDER.index(c.method) if c.method in METHOD_ORDER else 99, c.H or 0)


def _seeds(c: GainCurve) -> str:
    return f"{c.n} seeds" if c.n > 1 else f"seed {c.seeds[0]}: one seed, no band"


def draw(ax, curves: list[GainCurve], reference: str, last: int, mhar_H: int | None) -> list[float]:
    """One panel: each curve's mean (and band where it has two seeds or more) against the step; the
    values after SETTLED x `last` steps (for the y range)."""
    shown, dashes = [], {}
    for c in sorted(curves, key=_order):
        x, mean = np.asarray(c.steps), np.asarray(c.mean)  # [E]
        width = 1.5 if c.method == "mhar" and c.H == mhar_H else 1.0
        label = f"{run_label(c.method, c.H, 'display')} ({_seeds(c)})"
        if c.n > 1:
            style = "-"
        else:
            k = dashes[c.method] = dashes.get(c.method, -1) + 1
            style = ONE_SEED_STYLES[k % len(ONE_SEED_STYLES)]
            width = 0.9
        ax.plot(x, mean, color=method_color(c.method), lw=width, ls=style, label=label)
        if c.n > 1:
            ax.fill_between(x, c.low, c.high, color=method_color(c.method), alpha=0.18, lw=0)
        late = x >= SETTLED * last
        shown += mean[late].tolist() + (np.asarray(c.low)[late].tolist() + np.asarray(c.high)[late].tolist()
                                        if c.n > 1 else [])
    ax.axhline(0.0, color="#555555", lw=0.7, zorder=0)
    ax.set_xlabel("step")
    ax.set_ylabel(f"held-out loss − {run_label(reference, None, 'display').lower()}")
    return shown


@generator("gain_curve", kind="figure", paper_ref="none (Table main gives the end only)", needs=NEEDS)
def make(ctx) -> list[Output]:
    chosen: dict[str, tuple] = {}  # preset -> (rank, key, curves): one figure per preset, its fullest group
    for key, sub in groups(ctx.runs, ("corpus", "preset", "steps", "hidden_size", "layers")):
        curves = study_gain_curves(ctx.records(sub))
        rank = (len(curves), int(key["steps"]))
        if curves and (key["preset"] not in chosen or rank > chosen[key["preset"]][0]):
            chosen[key["preset"]] = (rank, key, curves)
    outputs = []
    for _, key, curves in (chosen[p] for p in sorted(chosen)):
        last = int(key["steps"])
        kv = sorted({c.kv for c in curves if c.reference == "baseline"} or {c.kv for c in curves})[0]
        curves = [c for c in curves if c.kv == kv]
        lrs = sorted({c.lr for c in curves})
        curves = [c for c in curves if c.lr == lrs[0]]  # one rate per figure (the study's shared one first)
        mhar_H = ctx.mhar_H([c.H for c in curves if c.method == "mhar"], kv)
        panels = [(ref, [c for c in curves if c.reference == ref]) for ref in ("baseline", "attnres")]
        panels = [(ref, cs) for ref, cs in panels if cs]
        with paper_style():
            fig, axes = new_figure(FULL, 0.5, ncols=len(panels), squeeze=False)
            shown = []
            for ax, (ref, cs) in zip(axes[0], panels):
                shown += draw(ax, cs, ref, last, mhar_H)
                tail = sorted({c.steps[-TAIL_K] for c in cs if len(c.steps) > TAIL_K and c.steps[-1] == last})
                if tail:
                    ax.axvspan(tail[0], last, color="#9A9A9A", alpha=0.15, lw=0,
                               label=f"tail-mean window (last {TAIL_K} evaluations)")
                ax.set_xlim(0, last)
                ax.set_title(f"against {run_label(ref, None, 'display').lower()}", loc="left", fontsize=7.5)
            finite = [v for v in shown if math.isfinite(v)]
            if finite:
                lo, hi = min(finite + [0.0]), max(finite + [0.0])
                pad = 0.12 * (hi - lo or 1e-3)
                for ax in axes[0]:
                    ax.set_ylim(lo - pad, hi + pad)
            handles = {}  # every panel's entries once, below the panels (inside they cover the curves)
            for ax in axes[0]:
                for h, label in zip(*ax.get_legend_handles_labels()):
                    handles.setdefault(label, h)
            fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=2, fontsize=6,
                       frameon=False)
            scale = scale_label(key["preset"], key["hidden_size"], key["layers"])
            seeds = max(c.n for c in curves)
            fig.suptitle(f"{scale} (KV {kv}), {key['corpus']}, lr {lrs[0]:g}: paired gain over training, "
                         + ("mean over seeds and 95% t band" if seeds > 1 else "one seed, no band"), fontsize=8)
            name = f"gain_curve_{key['preset']}"
            paths = ctx.save_figure(fig, name)
        single = sorted({f"{run_label(c.method, c.H)} - {c.reference} (seed {c.seeds[0]})" for c in curves if c.n == 1})
        notes = [f"y axis set by the evaluations after {SETTLED:.0%} of training; earlier gaps may leave the frame"]
        if single:
            notes.insert(0, "one seed, drawn dashed with no band: " + ", ".join(single))
        outputs.append(Output(name, paths, dict(curves=curves, mhar_H=mhar_H), notes))
    if not outputs:
        raise Skip("no method shares a seed, preset, corpus and steps with the baseline or single-head", [NEEDS])
    return outputs
