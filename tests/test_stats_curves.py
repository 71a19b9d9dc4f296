"""Tail-means, paired seed deltas and best-vs-best LR against scipy."""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis.stats.curves import best_vs_best, eval_curve, load_run, paired_seed_deltas, read_metrics, t_interval
from analysis.stats.errors import StatsError


def test_t_interval_matches_scipy():
    x = [-0.043, -0.046, -0.040, -0.051]
    mean, sd, se, lo, hi = t_interval(x, 0.95)
    ref = sps.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=sps.sem(x))
    assert (lo, hi) == pytest.approx(ref)
    assert sd == pytest.approx(np.std(x, ddof=1)) and se == pytest.approx(sps.sem(x))


def _runs(rng):
    runs = []
    for preset, effect in (("100m", -0.045), ("350m", -0.09)):
        for seed in (1, 2, 3):
            base = 3.3 + rng.normal(0, 0.02)
            runs.append(dict(method="baseline", H=None, kv=4, lr=5e-4, seed=seed, preset=preset, tail_mean=base,
                             curve=[], path=f"{preset}/b{seed}"))
            runs.append(dict(method="mhar", H=4, kv=4, lr=5e-4, seed=seed, preset=preset,
                             tail_mean=base + effect + rng.normal(0, 0.004), curve=[], path=f"{preset}/m{seed}"))
    return runs


def test_paired_seed_deltas_match_ttest_rel():
    runs = _runs(np.random.default_rng(0))
    rows = paired_seed_deltas(runs)
    assert len(rows) == 2
    for row in rows:
        b = [r["tail_mean"] for r in runs if r["preset"] == row.preset and r["method"] == "baseline"]
        m = [r["tail_mean"] for r in runs if r["preset"] == row.preset and r["method"] == "mhar"]
        ref = sps.ttest_rel(m, b)
        d = np.subtract(m, b)
        assert row.mean == pytest.approx(d.mean())
        assert row.se == pytest.approx(sps.sem(d))
        assert row.p_value == pytest.approx(ref.pvalue)
        assert row.abs_over_se == pytest.approx(abs(ref.statistic))
        assert row.n == 3 and row.unpaired_seeds == []


def test_unpaired_and_duplicate_runs():
    runs = _runs(np.random.default_rng(1))
    runs = [r for r in runs if not (r["method"] == "baseline" and r["seed"] == 3 and r["preset"] == "100m")]
    row = [r for r in paired_seed_deltas(runs) if r.preset == "100m"][0]
    assert row.n == 2 and row.unpaired_seeds == [3]
    with pytest.raises(StatsError, match="two baseline runs"):
        paired_seed_deltas(runs + [dict(runs[0], path="dup")])


def test_best_vs_best():
    runs = []
    for method, table in (("baseline", {1e-4: 4.5, 5e-4: 3.35, 1e-3: 3.336}),
                          ("attnres", {1e-4: 4.6, 5e-4: 3.328, 1e-3: 3.345})):
        for lr, v in table.items():
            runs.append(dict(method=method, H=None, kv=8, lr=lr, seed=0, preset="350m", tail_mean=v, curve=[],
                             path="x"))
    rows = {r.method: r for r in best_vs_best(runs)}
    assert rows["baseline"].best_lr == 1e-3 and rows["attnres"].best_lr == 5e-4
    assert rows["attnres"].delta == pytest.approx(3.328 - 3.336)
    assert rows["baseline"].delta == 0


def test_load_run_and_malformed_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for step in range(0, 300, 10):
        rec = dict(step=step, tokens=step * 100, flops=step * 1e9, lr=1e-3, loss=4.0, grad_norm=1.0, tokens_per_s=9.0)
        if step % 20 == 0:
            rec["val_loss"] = 5.0 - step / 100
        lines.append(json.dumps(rec))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "train_config.json").write_text(json.dumps(dict(method="mhar", heads=4, kv_heads=2, lr=1e-3, seed=7,
                                                           preset="tiny")))
    rec = load_run(run)
    vals = [p["val_loss"] for p in eval_curve(read_metrics(run / "metrics.jsonl"))]
    assert rec["tail_mean"] == pytest.approx(np.mean(vals[-11:]))
    assert (rec["method"], rec["H"], rec["kv"], rec["seed"]) == ("mhar", 4, 2, 7)
    (run / "metrics.jsonl").write_text(lines[0] + "\n{oops\n")
    with pytest.raises(StatsError, match=r"metrics.jsonl:2: not valid JSON"):
        load_run(run)
    assert math.isnan(t_interval([1.0])[1])


def test_scale_label_separates_overridden_sizes():
    from analysis.stats.curves import scale_label

    assert scale_label("tiny", 128, 4) == "tiny"
    assert scale_label("tiny", 64, 4) == "tiny/d64L4"
    assert scale_label("1b", 1280, 36) == "1b"
    assert scale_label("custom", 64, 2) == "custom" and scale_label("tiny", None, None) == "tiny"


def test_paired_seed_deltas_never_pair_runs_of_different_sizes():
    mk = lambda method, seed, scale, loss: dict(method=method, H=None, kv=2, lr=1e-3, seed=seed,  # noqa: E731
                                                preset="tiny", scale=scale, tail_mean=loss, path=f"{method}{seed}{scale}")
    runs = [mk("baseline", 1, "tiny", 5.0), mk("baseline", 1, "tiny/d64L4", 6.0), mk("mhar", 1, "tiny", 4.9),
            mk("mhar", 1, "tiny/d64L4", 5.7)]
    rows = {r.preset: r for r in paired_seed_deltas(runs)}
    assert rows["tiny"].deltas == [pytest.approx(-0.1)] and rows["tiny/d64L4"].deltas == [pytest.approx(-0.3)]


def test_the_one_tail_mean_definition():
    """mhar_probe.tail: the last 11 evaluations after step 0; a run with fewer has none (never a
    mean over the whole curve, or one reaching back to step 0's untrained loss)."""
    from mhar_probe.tail import TAIL_K, full_tail_mean, tail_mean, tail_of

    points = [(25 * i, float(100 if i == 0 else i)) for i in range(13)]  # step 0 and 12 evaluations after it
    assert TAIL_K == 11 and tail_mean(points) == np.mean(range(2, 13)) == 7.0
    assert tail_mean(points[::-1]) == 7.0 and tail_mean(points, 3) == 11.0  # in step order, whatever the order given
    assert tail_mean(points[1:]) == 7.0 and tail_mean(points[2:]) == 7.0  # step 0 is never in the window
    issue_run = [(25 * i, v) for i, v in enumerate([8.31, 7.0, 6.5, 6.2, 5.9, 5.8, 5.62])]  # 150 steps, every 25
    tail = tail_of(issue_run)
    assert tail.mean is None and (tail.k, tail.evaluations) == (11, 6)
    assert tail.note("runs/x") == "runs/x has 6 evaluations after step 0; the tail-mean needs the last k=11"
    assert tail_mean(points[:11]) is None and tail_mean(points[:12]) == 6.0  # 11 points, but one is step 0
    assert tail_mean([]) is None
    assert full_tail_mean(points) == 7.0
    with pytest.raises(ValueError, match="has 6 evaluations after step 0"):
        full_tail_mean(issue_run, where="run x")


def _curve_record(method, seed, losses, H=None, steps=(0, 250, 500, 750)):
    """A run record with hand-made held-out losses at `steps`."""
    return dict(method=method, H=H, kv=8, lr=5e-4, seed=seed, preset="350m", scale="350m", tail_mean=losses[-1],
                path=f"{method}{H}-s{seed}", curve=[dict(step=s, tokens=s * 32768, flops=None, val_loss=v)
                                                    for s, v in zip(steps, losses)])


def test_the_gain_curve_band_is_scipys_t_interval_at_every_step():
    """Three seeds of baseline and MHAR with known losses per step: at each step the band is
    scipy.stats.t.interval over the three paired deltas; a step one run did not log is left out; a
    configuration at one seed has its value and no band."""
    from analysis.stats.curves import paired_gain_curves, study_gain_curves

    base = {0: [10.0, 4.00, 3.60, 3.40], 1: [10.1, 4.05, 3.62, 3.43], 2: [9.9, 3.98, 3.57, 3.41]}
    mhar = {0: [10.0, 3.80, 3.50, 3.35], 1: [10.1, 3.90, 3.55, 3.39], 2: [9.9, 3.85, 3.49, 3.36]}
    runs = [_curve_record("baseline", s, v) for s, v in base.items()]
    runs += [_curve_record("mhar", s, v, H=8) for s, v in mhar.items()]
    (curve,) = paired_gain_curves(runs)
    assert (curve.method, curve.H, curve.reference, curve.seeds, curve.steps) == ("mhar", 8, "baseline", [0, 1, 2],
                                                                                [0, 250, 500, 750])
    for i in range(1, 4):
        d = [mhar[s][i] - base[s][i] for s in range(3)]
        low, high = sps.t.interval(0.95, 2, loc=np.mean(d), scale=sps.sem(d))
        assert (curve.mean[i], curve.low[i], curve.high[i]) == pytest.approx((np.mean(d), low, high), abs=1e-12)
    assert curve.deltas[1] == pytest.approx([mhar[1][i] - base[1][i] for i in range(4)])
    assert curve.tokens == [0, 250 * 32768, 500 * 32768, 750 * 32768]
    # seed 2's MHAR run did not log step 500: the step is left out of the whole curve (every point has n seeds)
    gap = [r for r in runs if not (r["method"] == "mhar" and r["seed"] == 2)]
    gap.append(_curve_record("mhar", 2, [9.9, 3.85, 3.36], H=8, steps=(0, 250, 750)))
    assert paired_gain_curves(gap)[0].steps == [0, 250, 750]
    # one seed: the mean is its delta, no band
    (one,) = paired_gain_curves([runs[0], runs[3]])
    assert one.n == 1 and one.mean[1] == pytest.approx(3.80 - 4.00) and all(math.isnan(v) for v in one.low + one.high)
    # against single-head: MHAR only (the baseline is not read against attnres)
    single = [_curve_record("attnres", s, [v + 0.02 for v in mhar[s]]) for s in range(3)]
    curves = study_gain_curves(runs + single)
    assert [(c.method, c.reference) for c in curves] == [("attnres", "baseline"), ("mhar", "baseline"),
                                                        ("mhar", "attnres")]
    assert curves[-1].mean[1:] == pytest.approx([-0.02] * 3) and curves[-1].high[1] == pytest.approx(-0.02)


def test_the_tail_mean_deltas_and_the_curves_pair_alike():
    """One pairing rule (`paired_runs`): a seed without its baseline is unpaired in both."""
    from analysis.stats.curves import paired_gain_curves

    runs = [_curve_record("baseline", s, [10.0, 4.0, 3.6, 3.4]) for s in (0, 1)]
    runs += [_curve_record("mhar", s, [10.0, 3.9, 3.5, 3.3], H=8) for s in (0, 1, 2)]
    (deltas,), (curve,) = paired_seed_deltas(runs), paired_gain_curves(runs)
    assert deltas.seeds == curve.seeds == [0, 1] and deltas.unpaired_seeds == curve.unpaired_seeds == [2]
