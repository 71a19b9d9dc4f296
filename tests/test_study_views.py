"""The study notebook's views (figures/study_views.py) draw what they say: each finished run's tail
window is its last 11 evaluations and its bar the tail-mean the trainer recorded; a cut-off run has
none; the depth maps are log2(N w) (0 for a uniform read); the deviation panels' z is the trained
value against the null draws' own mean and sd."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr

from analysis.run import Run
from figures.study_views import (curve_of, deviation_nulls, epoch_boundaries, epoch_jumps, head_depth_maps,
                                 loss_curves)
from mhar_probe.runfiles import RunFiles

STUDY = Path(__file__).resolve().parents[1] / "results" / "study100m"
BASELINE = STUDY / "runs" / "100m-baseline-kv4-lr5e-4-s0-n3815"
MHAR = STUDY / "runs" / "100m-mhar-h8-kv4-lr5e-4-s0-n3815"
RERUN = STUDY / "rerun" / "runs" / "100m-baseline-kv4-lr5e-4-s0-n3815"


def _evals(run_dir: Path) -> list[dict]:
    return [r for r in RunFiles(run_dir).metrics() if "val_loss" in r]


def test_the_tail_window_is_the_last_11_evaluations_and_its_mean_the_recorded_tail_mean():
    evals = _evals(BASELINE)
    c = curve_of(Run.read(BASELINE), "baseline")
    assert c.tail_tokens == (evals[-11]["tokens"], evals[-1]["tokens"])
    summary = json.loads((BASELINE / "summary.json").read_text())
    assert c.tail_mean == pytest.approx(summary["tail_mean_val_loss"], abs=1e-12)  # written by the trainer
    assert list(c.val_loss) == [e["val_loss"] for e in evals]


def test_a_run_cut_off_before_its_last_step_has_no_tail_window():
    c = curve_of(Run.read(RERUN), "rerun")
    assert c.tail_tokens is None and math.isnan(c.tail_mean) and not c.finished
    assert c.tokens[-1] == _evals(RERUN)[-1]["tokens"]


def test_loss_curves_draw_one_bar_per_finished_run_and_the_epoch_starts():
    runs = [(Run.read(BASELINE), ""), (Run.read(MHAR), ""), (Run.read(RERUN), "rerun")]
    fig, curves = loss_curves(runs, "100m")
    zoom = fig.axes[1]
    bars = sorted(float(seg[0][1]) for coll in zoom.collections if hasattr(coll, "get_segments")
                  for seg in coll.get_segments())
    assert bars == pytest.approx(sorted(c.tail_mean for c in curves if c.finished))
    train_tokens = json.loads((BASELINE / "summary.json").read_text())["train_tokens"]
    assert epoch_boundaries([r for r, _ in runs], 250e6) == [k * train_tokens for k in range(1, 6)]
    plt.close(fig)


def test_the_change_across_an_epoch_start_is_the_first_evaluation_after_minus_the_last_before():
    evals = _evals(BASELINE)
    size = json.loads((BASELINE / "summary.json").read_text())["train_tokens"]
    jumps = dict(epoch_jumps(curve_of(Run.read(BASELINE), "baseline"), [5 * size, 300e6]))
    before = max((e for e in evals if e["tokens"] < 5 * size), key=lambda e: e["tokens"])
    after = min((e for e in evals if e["tokens"] >= 5 * size), key=lambda e: e["tokens"])
    assert (before["step"], after["step"]) == (3325, 3350)
    assert jumps == {5 * size: pytest.approx(after["val_loss"] - before["val_loss"])}  # 300M: past the curve


def _routing(weights: np.ndarray, sources: list[int]) -> xr.Dataset:
    S, N, H = weights.shape
    return xr.Dataset({"weight_mean": (("site", "source", "head"), weights),
                       "site_num_sources": ("site", np.array(sources)),
                       "site_label": ("site", [f"s{i}" for i in range(S)]),
                       "source_label": ("source", [f"n{j}" for j in range(N)])})


def test_depth_maps_are_zero_for_a_uniform_read_and_log2_of_n_w_otherwise():
    sources = [1, 2, 3]
    uniform = np.full((3, 3, 2), np.nan)
    for s, n in enumerate(sources):
        uniform[s, :n] = 1.0 / n
    fig, maps = head_depth_maps(_routing(uniform, sources), "uniform")
    plt.close(fig)
    assert np.nanmax(np.abs(maps["mean"])) == 0 and np.nanmax(maps["sd"]) == 0
    assert np.isnan(maps["mean"][0, 1:]).all() and np.isnan(maps["mean"][1, 2])  # unreachable stays unreachable
    skewed = uniform.copy()
    skewed[2, :, 0] = [0.5, 0.25, 0.25]  # head 0 at the 3-source site: 1.5x, 0.75x, 0.75x uniform
    fig, maps = head_depth_maps(_routing(skewed, sources), "skewed")
    plt.close(fig)
    assert maps["per_head"][2, :, 0] == pytest.approx(np.log2([1.5, 0.75, 0.75]))
    assert maps["mean"][2] == pytest.approx(np.log2([(1.5 + 1) / 2, (0.75 + 1) / 2, (0.75 + 1) / 2]))


def test_deviation_panels_read_the_trained_heads_against_their_null_draws():
    from analysis.probes.deviation import per_head_deviation
    from mhar_probe.capture import open_routing_dataset

    stats = per_head_deviation(open_routing_dataset(MHAR / "routing.nc"))
    fig, shown = deviation_nulls(stats, "mhar")
    plt.close(fig)
    for key, null in (("max_abs", "null_max_abs"), ("replication_r", "null_replication_r")):
        draws = stats[null].values
        assert shown[key]["draws"].size == draws.size == 64
        assert shown[key]["z"] == pytest.approx((float(stats[key]) - draws.mean()) / draws.std(ddof=1))
    # the claim table's numbers for this run (claims.md, seed 0): z = -1.96 and -4.10
    assert round(shown["max_abs"]["z"], 2) == -1.96 and round(shown["replication_r"]["z"], 2) == -4.10
