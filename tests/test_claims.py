"""The claim table's verdicts: an interval wholly on the paper's side replicates, wholly on the
other side does not, and one that straddles the line (or is missing) is inconclusive."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from mhar_probe.demo import claims
from mhar_probe.demo.plan import DEMO, LADDER, PLANS


def _tails(base, single, multi):
    runs = []
    for method, H, values in (("baseline", None, base), ("attnres", 1, single), ("mhar", 8, multi)):
        runs += [dict(method=method, H=H, kv=4, seed=s, tail_mean=v) for s, v in enumerate(values)]
    return {"runs": runs}


@pytest.mark.parametrize("low,high,verdict", [
    (-0.3, -0.1, claims.REPLICATED), (0.1, 0.3, claims.NOT_REPLICATED), (-0.1, 0.1, claims.INCONCLUSIVE),
    (math.nan, math.nan, claims.INCONCLUSIVE)])
def test_side(low, high, verdict):
    assert claims.side(low, high, 0.0) == verdict


def test_order_claim_reads_paired_seed_deltas():
    base = [4.00, 4.05, 3.98]
    ok = claims.order_claim(LADDER, _tails(base, [3.90, 3.96, 3.87], [3.80, 3.85, 3.78]))
    assert ok.verdict == claims.REPLICATED
    worse = claims.order_claim(LADDER, _tails(base, [3.90, 3.96, 3.87], [3.95, 4.01, 3.93]))
    assert worse.verdict == claims.NOT_REPLICATED  # mhar above attnres in every seed
    noisy = claims.order_claim(LADDER, _tails(base, [3.90, 3.96, 3.87], [3.70, 4.10, 3.86]))
    assert noisy.verdict == claims.INCONCLUSIVE
    deltas = [a - b for a, b in zip([3.90, 3.96, 3.87], base)]
    low, high = stats.t.interval(0.95, len(deltas) - 1, loc=sum(deltas) / 3, scale=stats.sem(deltas))
    assert f"[{low:+.3f}, {high:+.3f}]" in ok.ours
    none = claims.order_claim(LADDER, {"runs": []})  # no seed has all three arms
    assert none.verdict == claims.INCONCLUSIVE and none.ours == "no seed has baseline, attnres and mhar"


def _reads(*triples, draws=64):
    return {seed: claims.NullRead(v, m, sd, draws) for seed, (v, m, sd) in enumerate(triples)}


def test_deviation_claim_reads_every_seed_and_reports_each():
    """Issue 32, item 4: seed 0 alone (z = 2.07) read as replicated; every seed must be above the
    null (the ladder's seeds 1 and 2 give 1.42 and -0.10), each seed's z is shown."""
    above = _reads((0.30, 0.10, 0.05), (0.25, 0.10, 0.05), (0.40, 0.12, 0.04))
    assert claims.deviation_claim(LADDER, above).verdict == claims.REPLICATED
    mixed = _reads((0.152, 0.102, 0.024), (0.073, 0.054, 0.0135), (0.072, 0.074, 0.0187))
    c = claims.deviation_claim(LADDER, mixed)
    assert c.verdict == claims.INCONCLUSIVE
    assert all(f"seed {s}: " in c.ours for s in range(3)) and "z = 2.08" in c.ours and "z = -0.11" in c.ours
    below = _reads((0.01, 0.10, 0.02), (0.02, 0.10, 0.02))
    assert claims.deviation_claim(LADDER, below).verdict == claims.NOT_REPLICATED
    few = claims.deviation_claim(LADDER, {**above, 1: claims.NullRead(0.25, 0.10, 0.05, 8)})
    assert few.verdict == claims.PENDING and "seed(s) 1 have 8" in few.note  # an 8-draw sd is not a stable z
    assert claims.deviation_claim(LADDER, {}).verdict == claims.INCONCLUSIVE


def test_null_draws_give_the_sd_its_stated_precision():
    """MIN_NULL_DRAWS is the fewest draws whose sd has a relative standard error within 10%
    (normal draws, simulated), and the ladder plan captures at least that many."""
    rng = np.random.default_rng(0)
    n = claims.MIN_NULL_DRAWS
    for draws, ok in ((n, True), (8, False)):
        sds = rng.standard_normal((20000, draws)).std(axis=1, ddof=1)
        assert (sds.std() / sds.mean() <= claims.NULL_SD_REL_SE * 1.02) == ok, draws
    assert LADDER.null_draws >= n
    for plan in PLANS.values():  # every run the claims read by z is captured with enough draws
        routed = [(m, h) for g in plan.grids.values() for m in g["methods"] for h in g.get("heads", [None])
                  if m in plan.routed_methods]
        assert ("mhar", plan.mhar_heads) in routed, plan.name
        for m, h in routed:
            draws = plan.capture_draws(m, h, plan.main_seed)
            assert draws >= n if (m, h) == ("mhar", plan.mhar_heads) or plan.spread_claims else draws > 0, plan.name
        assert plan.capture_draws("mhar", plan.mhar_heads, plan.main_seed + 1) >= n  # every seed's z


def test_the_advice_to_capture_again_keeps_the_plans_tokens():
    """Issue 54: the advice once omitted --tokens, so following it on the demo captured the CLI's default
    65,536 tokens (the whole 56,192-token split) instead of the demo's 16,384."""
    from mhar_probe.capture.of_run import RunCapture

    assert "--tokens 16384" in claims.capture_command(DEMO) and DEMO.capture_tokens == 16384
    assert claims.capture_command(LADDER) == f"`mhar capture RUN --overwrite --draws {claims.ADVISED_DRAWS}`"
    assert LADDER.capture_tokens == RunCapture.tokens  # the default: nothing to name
    assert claims.ADVISED_DRAWS >= claims.MIN_NULL_DRAWS
    few = claims.deviation_claim(DEMO, {42: claims.NullRead(0.25, 0.10, 0.05, 8)})
    assert claims.capture_command(DEMO) in few.note


def test_replication_claim_holds_only_above_the_nulls_split_half_r():
    """Issue 32, item 5: matched-norm random queries replicate about as well as trained ones
    (r 0.55-0.58 against 0.52-0.73), so r alone is no evidence; the trained r must exceed the null's."""
    halves = {s: "documents" for s in range(3)}
    like_null = _reads((0.52, 0.56, 0.03), (0.73, 0.57, 0.03), (0.60, 0.55, 0.04))
    assert claims.replication_claim(LADDER, like_null, halves).verdict == claims.INCONCLUSIVE
    above = _reads((0.90, 0.56, 0.03), (0.85, 0.57, 0.03), (0.88, 0.55, 0.04))
    assert claims.replication_claim(LADDER, above, halves).verdict == claims.REPLICATED
    below = _reads((0.30, 0.56, 0.03), (0.35, 0.57, 0.03))
    assert claims.replication_claim(LADDER, below, halves).verdict == claims.NOT_REPLICATED
    no_null = _reads((0.94, math.nan, math.nan), (0.87, math.nan, math.nan), draws=8)
    c = claims.replication_claim(LADDER, no_null, halves)
    assert c.verdict == claims.PENDING and "0.940" in c.ours and "null halves" in c.note
    rows = claims.replication_claim(LADDER, above, {**halves, 1: "rows"})
    assert rows.verdict == claims.INCONCLUSIVE and "not disjoint text" in rows.ours


def test_excess_claim_is_a_t_interval_over_seeds():
    """Issue 32, item 7: the interval was excess +- 2 sd of one seed's null draws; it is Student t
    over the seeds' excesses (the ladder's: [0.042, 0.073])."""
    excess = {0: 0.05761030877710027, 1: 0.06354631983992931, 2: 0.050889976482835664}
    c = claims.excess_claim(LADDER, excess)
    values = list(excess.values())
    low, high = stats.t.interval(0.95, 2, loc=np.mean(values), scale=stats.sem(values))
    assert f"[{low:.4f}, {high:.4f}]" in c.ours and (round(low, 3), round(high, 3)) == (0.042, 0.073)
    assert c.verdict == claims.REPLICATED
    assert claims.excess_claim(LADDER, {0: 0.01, 1: -0.02, 2: 0.015}).verdict == claims.INCONCLUSIVE
    assert claims.excess_claim(LADDER, {0: 0.05}).verdict == claims.INCONCLUSIVE  # one seed: no interval


def test_optimum_claim_reads_each_kv_value_against_a_margin():
    tails = _tails([4.0] * 3, [3.9] * 3, [3.80, 3.81, 3.79])  # seed sd 0.01: margin 0.028
    clear = [dict(method="mhar", H=h, kv=kv, seed=0, tail_mean=3.7 + 0.1 * abs(h - 4) / 4)
             for kv in (2, 4) for h in (2, 4, 8, 16)]
    assert claims.optimum_claim(LADDER, clear, tails).verdict == claims.REPLICATED  # H=4 best by 0.05+
    off = [dict(r, tail_mean=3.7 + 0.05 * r["H"]) for r in clear]  # H=2 best at both KV by 0.1
    assert claims.optimum_claim(LADDER, off, tails).verdict == claims.NOT_REPLICATED
    one_kv = claims.optimum_claim(LADDER, [r for r in clear if r["kv"] == 4], tails)  # read, and said so
    assert one_kv.verdict == claims.REPLICATED and "one KV value only" in one_kv.note
    assert "KV=4: best H=4" in one_kv.ours and "KV=2" not in one_kv.ours
    two_h = [r for r in clear if r["kv"] == 4 and r["H"] in (4, 8)]  # fewer than 3 H: no grid to read
    assert claims.optimum_claim(LADDER, two_h, tails).verdict == claims.INCONCLUSIVE


def test_optimum_includes_h1_and_takes_the_margin_from_paired_deltas():
    """Issue 32, item 6: attnres is MHAR at H = 1 and joins each KV's grid; the noise margin is
    t(0.975, n-1) x the sd of the paired seed deltas (mhar H=8 - attnres), not 2 sqrt 2 x the
    noisiest arm's seed sd. Seeds that move both arms together give a tight margin."""
    tails = _tails([4.0, 4.2, 3.8], [3.90, 4.10, 3.70], [3.95, 4.16, 3.74])  # deltas +0.05, +0.06, +0.04
    deltas = [0.05, 0.06, 0.04]
    margin = stats.t.ppf(0.975, 2) * np.std(deltas, ddof=1)
    assert claims.optimum_margin(LADDER, tails)[0] == pytest.approx(margin)
    mhar = [dict(method="mhar", H=h, kv=kv, seed=0, tail_mean=3.7 + 0.1 * abs(h - 4) / 4)
            for kv in (2, 4) for h in (2, 4, 8, 16)]  # H=4 best of the mhar runs at both KV
    assert claims.optimum_claim(LADDER, mhar, tails).verdict == claims.REPLICATED
    single = [dict(method="attnres", H=1, kv=kv, seed=0, tail_mean=3.55) for kv in (2, 4)]  # H=1 lower by 0.15
    c = claims.optimum_claim(LADDER, mhar + single, tails)
    assert c.verdict == claims.NOT_REPLICATED and "KV=4: best H=1" in c.ours
    assert "best of H 4-8 (H4) +0.150" in c.ours and f"margin {margin:.3f}" in c.note  # the gap the rule reads
    other_seed = [dict(r, seed=1) for r in single]  # only the main seed's runs make the grid
    assert claims.optimum_claim(LADDER, mhar + other_seed, tails).verdict == claims.REPLICATED


def test_plans_evaluate_often_enough_that_the_tail_is_the_last_quarter():
    """Issue 32, item 8: the tail-mean's last 11 evaluations cover the last quarter of training, as
    the paper's (steps 15-20k of 20k at one evaluation per 500 steps); the committed ladder's 11 of
    20 covered half. The schedule is the trainer's own (read off a committed run's metrics)."""
    import dataclasses
    import json
    from pathlib import Path

    from mhar_probe.demo.plan import PLANS, evaluation_steps, tail_covers_last_quarter
    from mhar_probe.runfiles import RunFiles

    run = Path(__file__).resolve().parents[1] / "results/ladder/runs/tiny-baseline-kv4-lr2e-3-s0-n480"
    logged = [r["step"] for r in RunFiles(run).metrics() if "val_loss" in r]
    assert logged == evaluation_steps(480, 24) and logged[-11] == 240  # the committed ladder: half
    assert evaluation_steps(20_000, 500)[-11] == 15_000 and tail_covers_last_quarter(20_000, 500)
    assert not tail_covers_last_quarter(480, 24) and tail_covers_last_quarter(480, 12)
    for plan in PLANS.values():
        every = plan.recipe.get("eval_every", 25)
        assert 4 * evaluation_steps(plan.steps, every)[-11] >= 3 * plan.steps, plan.name
    with pytest.raises(ValueError, match="evaluate every 12 steps or fewer"):
        dataclasses.replace(LADDER, recipe={**LADDER.recipe, "eval_every": 24})


def test_the_capture_stage_draws_the_plans_null(tmp_path, monkeypatch):
    """The ladder's captures take its 64 null draws (enough for the claim table's z), not the
    capture default of 8."""
    import mhar_probe.capture as capture
    from mhar_probe.demo.run import capture_stage
    from mhar_probe.demo.runs import SweptRun

    seen = []

    class Done:
        def close(self):
            pass

    monkeypatch.setattr(capture, "capture_run", lambda cfg: seen.append(cfg) or Done())
    monkeypatch.setattr(capture, "capture_summary", lambda ds, out: f"captured {out}")
    run = SweptRun(path=tmp_path / "tiny-mhar-h8", method="mhar", heads=8, seed=0, status="finished", kv=4)
    capture_stage(LADDER, [run], overwrite=False)
    assert [(c.run, c.draws, c.tokens) for c in seen] == [(str(run.path), 64, LADDER.capture_tokens)]


def test_depth_spread_is_the_total_variation_from_uniform():
    """Analytic cases: the zero-initialised query's uniform read has spread 0, a one-hot read
    1 - 1/N; sources a site cannot read yet (NaN) and sites with one source are left out."""
    nan = math.nan
    sources = np.array([1, 2, 4])  # [site]
    uniform = np.array([[1, nan, nan, nan], [0.5, 0.5, nan, nan], [0.25] * 4])[:, :, None]  # [site, source, head=1]
    assert claims.depth_spread(uniform, sources) == pytest.approx(0.0, abs=1e-15)
    onehot = np.array([[1, nan, nan, nan], [0.0, 1.0, nan, nan], [0, 0, 1.0, 0]])[:, :, None]
    assert claims.depth_spread(onehot, sources) == pytest.approx((0.5 + 0.75) / 2)
    two_heads = np.concatenate([uniform, onehot], axis=-1)  # the mean over heads too
    assert claims.depth_spread(two_heads, sources) == pytest.approx((0 + 0 + 0.5 + 0.75) / 4)
    draws = np.stack([uniform, onehot])  # [draw, site, source, head]: one value per draw
    np.testing.assert_allclose(claims.depth_spread(draws, sources), [0.0, 0.625], atol=1e-15)


def test_a_claim_with_missing_runs_is_held_back_and_names_them():
    c = claims.Claim("order", "-0.04 (one seed)", claims.INCONCLUSIVE, "rule")
    held = claims.held_back(c, ["attnres seed 0", "mhar H=8 seed 1"])
    assert held.verdict == claims.PENDING_RUNS and held.ours == c.ours
    assert held.note == "runs missing: attnres seed 0, mhar H=8 seed 1. When in: rule"
    assert claims.held_back(c, [], ["attnres seed 2"]).verdict == claims.PENDING  # finished, not captured
    assert claims.held_back(c, []) is c


def test_width_claim_fits_the_paired_deltas_against_log2_of_the_head_width():
    """MHAR - attnres per seed at 16 / 32 / 64-channel routing heads: the slope per doubling and its
    interval against a float64 least-squares fit written out here (slope, residual variance, t)."""
    rungs = [claims.WidthRung("ladder", 16, {0: 0.30, 1: 0.25, 2: 0.50}, []),
             claims.WidthRung("middle", 32, {0: 0.10, 1: 0.05}, []),
             claims.WidthRung("study100m", 64, {0: 0.016, 1: 0.009, 2: 0.0005}, [])]
    x = np.array([4.0] * 3 + [5.0] * 2 + [6.0] * 3)
    y = np.array([0.30, 0.25, 0.50, 0.10, 0.05, 0.016, 0.009, 0.0005])
    sxx = ((x - x.mean()) ** 2).sum()
    slope = ((x - x.mean()) * (y - y.mean())).sum() / sxx
    resid = y - (y.mean() + slope * (x - x.mean()))
    se = math.sqrt((resid ** 2).sum() / (len(x) - 2) / sxx)
    t = stats.t.ppf(0.975, len(x) - 2)
    c = claims.width_claim(rungs)
    assert f"slope per doubling {slope:+.3f} [{slope - t * se:+.3f}, {slope + t * se:+.3f}]" in c.ours
    assert c.verdict == claims.REPLICATED and slope + t * se < 0
    assert "16-ch ladder" in c.ours and "32-ch middle" in c.ours and "(2 seeds)" in c.ours
    flat = [claims.WidthRung(r.name, r.width, {s: 0.1 + 0.01 * s for s in r.deltas}, []) for r in rungs]
    assert claims.width_claim(flat).verdict == claims.INCONCLUSIVE  # slope 0 within noise
    assert "step by step 16->32 -0.275, 32->64 -0.067" in c.ours  # seed means 0.35, 0.075, 0.0085


def test_width_claim_is_inconclusive_when_one_rung_carries_the_slope():
    """The committed case: a large delta at 16 channels, none at 32 and 64 (rising slightly from
    32 to 64): the least-squares slope is below 0, but the deltas do not fall as the heads widen."""
    rungs = [claims.WidthRung("ladder", 16, {0: 0.30, 1: 0.35, 2: 0.40}, []),
             claims.WidthRung("middle", 32, {0: -0.03, 1: -0.02, 2: -0.01}, []),
             claims.WidthRung("study100m", 64, {0: 0.005, 1: 0.010, 2: 0.012}, [])]
    c = claims.width_claim(rungs)
    fit = stats.linregress([4.0] * 3 + [5.0] * 3 + [6.0] * 3, [d for r in rungs for d in r.deltas.values()])
    assert fit.slope < 0 and f"slope per doubling {fit.slope:+.3f}" in c.ours
    assert "32->64 +0.029" in c.ours and c.verdict == claims.INCONCLUSIVE


def test_width_claim_is_pending_while_a_rung_misses_runs_and_needs_two_widths():
    present = claims.WidthRung("ladder", 16, {0: 0.3, 1: 0.25, 2: 0.5}, [])
    empty = claims.WidthRung("middle", 32, {}, ["attnres seed 0", "mhar H=8 seed 1"])
    wide = claims.WidthRung("study100m", 64, {0: 0.016, 1: 0.009, 2: 0.0005}, [])
    c = claims.width_claim([present, empty, wide])
    assert c.verdict == claims.PENDING_RUNS
    assert "middle: attnres seed 0" in c.note and "32-ch middle: no seed has both arms yet" in c.ours
    assert "slope per doubling" in c.ours  # what the rungs present give, shown while pending
    one = claims.width_claim([present, claims.WidthRung("middle", 32, {}, [])])
    assert one.verdict == claims.INCONCLUSIVE and "fewer than two widths" in one.ours


def _rows(tails: dict[tuple[str, int], float], kv: int = 4, h: int = 8) -> list[dict]:
    return [dict(method=m, H=h if m == "mhar" else (1 if m == "attnres" else None), kv=kv, seed=s, tail_mean=v)
            for (m, s), v in tails.items()]


def test_second_rate_claim_reads_each_method_at_its_better_rate_and_waits_for_missing_runs():
    """Best-vs-best: per method and seed the lower of the two rates' tail-means; the order's deltas
    over those bests (a t interval over seeds, written out here); pending while a run is missing."""
    plan = dataclasses.replace(PLANS["study100m"], grids={
        **PLANS["study100m"].grids,
        "bestvsbest": dict(methods=["baseline", "attnres", "mhar"], heads=[8], kv_heads=[4], seeds=[0, 1],
                           lrs=[1e-3])})
    main = _rows({("baseline", 0): 2.20, ("attnres", 0): 2.15, ("mhar", 0): 2.16,
                  ("baseline", 1): 2.21, ("attnres", 1): 2.14, ("mhar", 1): 2.17})
    second = {("baseline", 0): 2.18, ("attnres", 0): 2.16, ("mhar", 0): 2.10,
              ("baseline", 1): 2.19, ("attnres", 1): 2.15, ("mhar", 1): 2.12}
    pending = claims.second_rate_claim(plan, "bestvsbest", main, _rows({k: v for k, v in second.items()
                                                                        if k != ("attnres", 1)}))
    assert pending.verdict == claims.PENDING_RUNS and "attnres seed 1 at lr 1e-3" in pending.note
    assert "mhar H=8 seed 0: 5e-4 2.1600, 1e-3 2.1000 (best 1e-3)" in pending.ours
    c = claims.second_rate_claim(plan, "bestvsbest", main, _rows(second))
    # bests: baseline 2.18, 2.19; attnres 2.15, 2.14; mhar 2.10, 2.12
    for name, d in (("best attnres - best baseline", [2.15 - 2.18, 2.14 - 2.19]),
                    ("best mhar H=8 - best attnres", [2.10 - 2.15, 2.12 - 2.14])):
        mean, sd = np.mean(d), np.std(d, ddof=1)
        half = stats.t.ppf(0.975, 1) * sd / math.sqrt(2)
        assert f"{name} {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]" in c.ours
    assert c.ours.endswith("(2 seeds)")
    assert c.verdict == claims.INCONCLUSIVE  # 1 df: both intervals reach above 0
    tight = {**second, ("attnres", 1): 2.158, ("mhar", 1): 2.108}  # deltas -0.03/-0.032 and -0.05/-0.05
    tight_main = _rows({**{(r["method"], r["seed"]): r["tail_mean"] for r in main}, ("attnres", 1): 2.16})
    assert claims.second_rate_claim(plan, "bestvsbest", tight_main, _rows(tight)).verdict == claims.REPLICATED
    worse = {**tight, ("mhar", 0): 2.25, ("mhar", 1): 2.251}  # mhar's best is its 5e-4 run, 0.05 above attnres
    worse_main = _rows({**{(r["method"], r["seed"]): r["tail_mean"] for r in tight_main},
                        ("mhar", 0): 2.20, ("mhar", 1): 2.208})
    assert claims.second_rate_claim(plan, "bestvsbest", worse_main, _rows(worse)).verdict == claims.NOT_REPLICATED
    one = dataclasses.replace(plan, grids={**plan.grids, "bestvsbest": {**plan.grids["bestvsbest"], "seeds": [0]}})
    c1 = claims.second_rate_claim(plan=one, grid="bestvsbest", main_runs=main, second_runs=_rows(second))
    assert c1.verdict == claims.INCONCLUSIVE
    nothing = claims.second_rate_claim(plan, "bestvsbest", main, [])  # no run at the second rate yet
    assert nothing.verdict == claims.PENDING_RUNS and nothing.ours == "no method has runs at both rates yet"
    assert "mhar H=8 seed 1 at lr 1e-3" in nothing.note
    assert "best mhar H=8 - best attnres -0.050 (one seed: no interval) (seed 0)" in c1.ours


def _scale_folder(where, preset: str, kv: int, width: int, tails: dict[tuple[str, int], float],
                  tokens: int = 100_007_936, parameters: int = 385_929_216) -> None:
    """A results folder as a device call exports it, reduced to what the scale row reads: the sweep's
    manifest and, per finished run, its summary (tail-mean, tokens, parameters) and model config."""
    import json

    from mhar_probe.sweep.manifest import write_manifest

    rows = []
    for (method, seed), tail in tails.items():
        h = 8 if method == "mhar" else None
        name = f"{preset}-{method}-s{seed}"
        run = where / "runs" / name
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(dict(finished=True, tail_mean_val_loss=tail, tokens=tokens,
                                                          parameters=parameters, epochs=tokens / 43.6e6)))
        (run / "config.json").write_text(json.dumps(dict(hidden_size=8 * width)))
        rows.append(dict(name=name, status="finished",
                         axes=dict(preset=preset, method=method, H=h, kv=kv, lr=5e-4, seed=seed, steps=10)))
    write_manifest(where / "runs", {}, rows)


STUDY100 = {("baseline", 0): 2.19, ("baseline", 1): 2.20, ("baseline", 2): 2.21,
            ("mhar", 0): 2.15, ("mhar", 1): 2.17, ("mhar", 2): 2.17}  # gains -0.04, -0.03, -0.04


def test_scale_step_is_a_pooled_two_sample_t_interval():
    """Against scipy's equal-variance two-sample t (Student's pooled test) where both scales have seeds
    to spare, and the same formula written out in float64 where the larger scale has one seed."""
    a = claims.ScaleRung("study100m", "100m", {0: -0.045, 1: -0.029, 2: -0.038}, [])
    b = claims.ScaleRung("study350m", "350m", {0: -0.090, 1: -0.070}, [])
    diff, low, high = claims.scale_step(a, b)
    ref = stats.ttest_ind(list(b.deltas.values()), list(a.deltas.values()), equal_var=True).confidence_interval(0.95)
    assert (low, high) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert diff == pytest.approx(-0.080 - (-0.112 / 3), abs=1e-12)
    one = claims.ScaleRung("study350m", "350m", {0: -0.090}, [])
    x = np.array(list(a.deltas.values()))
    half = stats.t.ppf(0.975, 2) * x.std(ddof=1) * math.sqrt(1 / 3 + 1)  # the one seed varies as the three do
    assert claims.scale_step(a, one) == pytest.approx((-0.090 - x.mean(), -0.090 - x.mean() - half,
                                                       -0.090 - x.mean() + half), abs=1e-12)
    lone = claims.ScaleRung("study100m", "100m", {0: -0.045}, [])
    assert all(math.isnan(v) for v in claims.scale_step(lone, one)[1:])  # no spread at either scale


def test_scale_row_is_pending_while_the_350m_pair_is_missing(tmp_path):
    _scale_folder(tmp_path, "100m", 4, 64, STUDY100, tokens=250_019_840, parameters=41_957_376)
    rungs = [claims.ScaleRung.read(name, tmp_path, folder) for name, folder in PLANS["study100m"].scale_rungs]
    c = claims.scale_claim(rungs)
    assert c.verdict == claims.PENDING_RUNS
    assert "study350m: baseline seed 0, mhar H=8 seed 0 (no runs in scale350m)" in c.note
    assert "100M (study100m: 64-ch routing heads at KV 4, 250.0M tokens = 5.96 per parameter" in c.ours
    assert "-0.037 [" in c.ours and "350M (study350m): no seed has both arms yet" in c.ours
    assert "-0.061 at 100M, -0.149 at 350M" in c.claim and "tokens per parameter" in c.note
    # one of the pair in: still pending, and it names the other
    _scale_folder(tmp_path / "scale350m", "350m", 8, 128, {("baseline", 0): 2.60})
    c = claims.scale_claim([claims.ScaleRung.read(n, tmp_path, f) for n, f in PLANS["study100m"].scale_rungs])
    assert c.verdict == claims.PENDING_RUNS and c.note.startswith("runs missing: study350m: mhar H=8 seed 0.")


@pytest.mark.parametrize("mhar350, verdict", [(2.45, claims.REPLICATED),  # gain -0.150 against -0.037
                                              (2.59, claims.INCONCLUSIVE),  # -0.010: inside the seeds' noise
                                              (2.70, claims.NOT_REPLICATED)])  # +0.100: a loss at 350M
def test_scale_row_reads_whether_the_gain_grows_from_100m_to_350m(tmp_path, mhar350, verdict):
    _scale_folder(tmp_path, "100m", 4, 64, STUDY100, tokens=250_019_840, parameters=41_957_376)
    _scale_folder(tmp_path / "scale350m", "350m", 8, 128, {("baseline", 0): 2.60, ("mhar", 0): mhar350})
    rungs = [claims.ScaleRung.read(n, tmp_path, f) for n, f in PLANS["study100m"].scale_rungs]
    assert [r.deltas.keys() for r in rungs] == [{0, 1, 2}, {0}] and rungs[1].width == 128
    c = claims.scale_claim(rungs)
    assert c.verdict == verdict
    gains = np.array([-0.04, -0.03, -0.04])
    diff = mhar350 - 2.60 - gains.mean()
    half = stats.t.ppf(0.975, 2) * gains.std(ddof=1) * math.sqrt(1 / 3 + 1)
    assert f"100M -> 350M {diff:+.3f} [{diff - half:+.3f}, {diff + half:+.3f}]" in c.ours
    assert f"same seed 0: -0.040 -> {mhar350 - 2.60:+.3f}" in c.ours
    assert "350M (study350m: 128-ch routing heads at KV 8, 100.0M tokens = 0.26 per parameter, 2.29 epochs)" in c.ours


def test_the_350m_pair_reads_its_own_rows_and_the_scale_row_from_its_folder(tmp_path):
    """results/study100m/scale350m regenerated on its own: only the rows its grid can test (no
    single-head arm, one H), its paper delta at 350M, its spread row and the scale row (read from
    the 100M study one folder up)."""
    import json

    _scale_folder(tmp_path, "100m", 4, 64, STUDY100, tokens=250_019_840, parameters=41_957_376)
    pair = tmp_path / "scale350m"
    _scale_folder(pair, "350m", 8, 128, {("baseline", 0): 2.60, ("mhar", 0): 2.45})
    (pair / "stats").mkdir()
    (pair / "stats" / "tails.json").write_text(json.dumps(dict(runs=[
        dict(method="baseline", H=None, kv=8, seed=0, tail_mean=2.60),
        dict(method="mhar", H=8, kv=8, seed=0, tail_mean=2.45)])))
    (pair / "stats" / "ceg.json").write_text(json.dumps(dict(rows=[])))
    rows = claims.claims_of(PLANS["study350m"], pair)
    assert [c.key for c in rows] == ["deviation", "replication", "ceg", "delta_mhar", "spread_mhar H=8", "scale"]
    delta = rows[3]
    assert delta.ours == "-0.150 (seed 0; 1 seed, no interval)" and "-0.149 at 350M" in delta.claim
    assert rows[-1].verdict == claims.REPLICATED
    # STUDY keeps all six core rows
    assert PLANS["study100m"].core_claims == ("order", "optimum", "excess", "deviation", "replication", "ceg")
