"""McNemar per seed (issue 52, item 4): the stats stage tests every McNemar pair of PAPER350 at every seed
whose two evaluations are in, writes the line across seeds, and names the seeds pending; the claim row reads
them. References: the per-item correctness the synthetic evaluations were written from (counted here),
statsmodels' McNemar and its Cochran-Mantel-Haenszel test over every matched pair as a stratum, scipy's
binomial test, statsmodels' Holm."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import StratifiedTable
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from analysis.stats.mcnemar import mcnemar_chi2, mcnemar_stratified, sign_flip_p
from mhar_probe.demo import run_demo
from mhar_probe.demo.claims import INCONCLUSIVE, NOT_REPLICATED, PENDING, PENDING_RUNS, REPLICATED
from mhar_probe.demo.plan import PAPER350
from results_checks import EVAL_ITEMS, synthetic_correct, synthetic_paper350_study

MAIN = [(m, h, s) for m, h in (("baseline", None), ("attnres", None), ("mhar", 8)) for s in (0, 1, 2)]
HEADS = {"baseline": None, "attnres": None, "mhar": 8}


def _cmh_over_pairs(arms: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """statsmodels' CMH statistic and p (no continuity correction) with every matched pair of every seed its own
    stratum: a 2x2 table arm (A, B) x (right, wrong) holding one item per row."""
    tables = [np.array([[x, 1 - x], [y, 1 - y]], dtype=float) for a, b in arms for x, y in zip(a, b)]
    test = StratifiedTable(np.dstack(tables)).test_null_odds(correction=False)
    return float(test.statistic), float(test.pvalue)


def _counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    return int((a & ~b).sum()), int((~a & b).sum())


def test_the_combined_test_is_cmh_over_matched_pairs():
    """Over seeds as strata, the combined statistic equals statsmodels' CMH with each pair a stratum, its exact p
    scipy's binomial test of the pooled counts; per seed the statistic is statsmodels' uncorrected McNemar."""
    rng = np.random.default_rng(7)
    for trial in range(5):
        seeds = [(rng.random(150) < 0.4, rng.random(150) < 0.45 + 0.03 * trial) for _ in range(3)]
        counts = [_counts(a, b) for a, b in seeds]
        for (a, b), (nb, nc) in zip(seeds, counts):
            table = np.array([[(a & b).sum(), nb], [nc, (~a & ~b).sum()]])
            assert mcnemar_chi2(nb, nc) == pytest.approx(sm_mcnemar(table, exact=False, correction=False).statistic)
        ours = mcnemar_stratified(counts)
        stat, p = _cmh_over_pairs(seeds)
        assert (ours.b, ours.c) == (sum(x for x, _ in counts), sum(y for _, y in counts))
        assert ours.statistic == pytest.approx(stat, rel=1e-9) and ours.p_chi2 == pytest.approx(p, rel=1e-9)
        assert ours.p_exact == pytest.approx(binomtest(ours.b, ours.b + ours.c, 0.5).pvalue, rel=1e-9)
    none = mcnemar_stratified([(0, 0), (0, 0)])  # no discordant pair anywhere: no evidence either way
    assert np.isnan(none.statistic) and none.p_chi2 == 1.0 and none.p_exact == 1.0


def _study(tmp_path: Path, arms, unevaluated=()) -> Path:
    out = tmp_path / "study350m"
    synthetic_paper350_study(out, arms, unevaluated=list(unevaluated))
    assert run_demo(out, plan=PAPER350, stages=["stats", "claims"]) == 0
    return out


def _read(out: Path) -> tuple[dict, dict]:
    doc = json.loads((out / "stats" / "mcnemar_seeds.json").read_text())
    claims = {c["key"]: c for c in json.loads((out / "claims.json").read_text())}
    return {(p["a"], p["b"]): p for p in doc["pairs"]}, claims["mcnemar"]


def _reference_across(a: str, b: str, task: str, seeds: list[int]) -> tuple[int, int, float, float]:
    arms = [(synthetic_correct(a, HEADS[a], s, task), synthetic_correct(b, HEADS[b], s, task)) for s in seeds]
    nb, nc = map(sum, zip(*(_counts(x, y) for x, y in arms)))
    return nb, nc, *_cmh_over_pairs(arms)


def test_each_seed_in_is_tested_and_the_missing_ones_named(tmp_path):
    """MHAR H=8 seed 2 not trained, attnres seed 1 trained but not evaluated: baseline vs MHAR is tested at seeds
    0 and 1 and combined over them, attnres vs MHAR at seed 0 alone ('seed 0 only'); seed 2 (and seed 1 of the
    second pair) are pending with why; the seed-0 files keep their names."""
    out = _study(tmp_path, [a for a in MAIN if a != ("mhar", 8, 2)], unevaluated=[("attnres", None, 1)])
    pairs, row = _read(out)
    assert set(pairs) == set(PAPER350.mcnemar_pairs)
    first, second = pairs["baseline", "mhar"], pairs["attnres", "mhar"]
    assert first["seeds"] == second["seeds"] == [0, 1, 2]
    assert [t["seed"] for t in first["tables"]] == [0, 1] and [t["seed"] for t in second["tables"]] == [0]
    assert first["pending"] == [dict(seed=2, why="no evaluation of mhar H=8 seed 2 (run not finished)", unevaluated=[])]
    assert second["pending"] == [
        dict(seed=1, why="no evaluation of attnres seed 1 (not evaluated)", unevaluated=["attnres seed 1"]),
        dict(seed=2, why="no evaluation of mhar H=8 seed 2 (run not finished)", unevaluated=[])]
    stats = out / "stats"
    assert {p.name for p in stats.iterdir() if p.is_dir()} == {"mcnemar", "mcnemar_s1", "mcnemar_attnres_mhar"}
    for pair in (first, second):
        for table in pair["tables"]:  # each seed's table against the correctness it was written from
            assert json.loads((stats / table["folder"] / "mcnemar.json").read_text())["rows"][0]["n"] == EVAL_ITEMS
            for r in table["rows"]:
                x = synthetic_correct(pair["a"], HEADS[pair["a"]], table["seed"], r["task"])
                y = synthetic_correct(pair["b"], HEADS[pair["b"]], table["seed"], r["task"])
                nb, nc = _counts(x, y)
                assert (r["n"], r["b"], r["c"]) == (EVAL_ITEMS, nb, nc)
                assert r["delta"] == pytest.approx(y.mean() - x.mean()) and r["ci_low"] <= r["delta"] <= r["ci_high"]
                assert r["p_value"] == pytest.approx(binomtest(nb, nb + nc, 0.5).pvalue, rel=1e-9)
                table2 = np.array([[(x & y).sum(), nb], [nc, (~x & ~y).sum()]])
                assert r["statistic"] == pytest.approx(sm_mcnemar(table2, exact=False, correction=False).statistic)
    for r in first["across"]:  # combined over seeds 0 and 1
        nb, nc, stat, p = _reference_across("baseline", "mhar", r["task"], [0, 1])
        assert r["seeds"] == [0, 1] and (r["b"], r["c"]) == (nb, nc)
        assert r["statistic"] == pytest.approx(stat) and r["p_chi2"] == pytest.approx(p)
        assert r["p_exact"] == pytest.approx(binomtest(nb, nb + nc, 0.5).pvalue, rel=1e-9)
        rows = [x for t in first["tables"] for x in t["rows"] if x["task"] == r["task"]]
        assert r["favour_b"] == sum(x["c"] > x["b"] for x in rows) and r["favour_a"] == sum(x["b"] > x["c"] for x in rows)
        assert r["delta_pooled"] == pytest.approx((nc - nb) / (2 * EVAL_ITEMS))
    # the claim row: every seed in, the pending ones named, one seed said so; its verdict waits for MHAR seed 2
    assert row["verdict"] == PENDING_RUNS and row["note"].startswith("runs missing: mhar H=8 seed 2.")
    assert "finished, not evaluated: attnres seed 1" in row["note"] and "5,000 of the paper's 20,000" in row["note"]
    ours = row["ours"]
    lastword = first["tables"][1]["rows"][0]
    assert (f"seed 1 {lastword['delta']:+.3f} [{lastword['ci_low']:+.3f}, {lastword['ci_high']:+.3f}] "
            f"b/c {lastword['b']}/{lastword['c']}") in ours
    head, tail = ours.split("; mhar H=8 vs attnres: ")
    assert head.count("seed 2 pending") == 2 and "over seeds b/c" in head and "only)" not in head
    assert tail.count(" (seed 0 only): seed 0 ") == 2 and tail.count("seed 1 pending; seed 2 pending") == 2
    assert "over seeds" not in tail
    assert "GSM8K +3.2 (123 vs 81 discordant, p = 0.004)" in row["claim"]
    assert "| 2 | pending: no evaluation of mhar H=8 seed 2 (run not finished) |" in (stats / "mcnemar_seeds.md").read_text()


def test_the_verdict_reads_the_combined_tests_and_waits_for_an_evaluation(tmp_path):
    """Every run in: the row's verdict follows its rule on the Holm-adjusted item-clustered p of every pair and
    task (statsmodels' Holm). Then one evaluation gone: its seed's stale files are removed and the row needs a
    rerun, naming the run."""
    out = _study(tmp_path, MAIN)
    pairs, row = _read(out)
    across = [(pair, r) for pair in pairs.values() for r in pair["across"]]
    assert len(across) == 4 and all(r["seeds"] == [0, 1, 2] for _, r in across)
    # the verdict's test is item-clustered (the seeds share their items): d_i = sum over seeds of B right - A right
    clustered = []
    for pair, r in across:
        d = sum(synthetic_correct(pair["b"], HEADS[pair["b"]], s, r["task"]).astype(int)
                - synthetic_correct(pair["a"], HEADS[pair["a"]], s, r["task"]).astype(int) for s in (0, 1, 2))
        assert r["items"] == EVAL_ITEMS and r["p_basis"] == "p_items"
        assert r["p_items"] == sign_flip_p(d)  # (sign_flip_p itself: test_the_item_clustered_test_*)
        clustered.append(r["p_items"])
    holm = multipletests(clustered, method="holm")[1]
    for (pair, r), h in zip(across, holm):
        assert (r["b"], r["c"]) == _reference_across(pair["a"], pair["b"], r["task"], [0, 1, 2])[:2]
        assert r["p_exact"] == pytest.approx(binomtest(r["b"], r["b"] + r["c"], 0.5).pvalue, rel=1e-9)
        assert r["p_holm"] == pytest.approx(h, rel=1e-9)
    for_b = any(h < 0.05 and r["c"] > r["b"] for (_, r), h in zip(across, holm))
    for_a = any(h < 0.05 and r["b"] > r["c"] for (_, r), h in zip(across, holm))
    assert row["verdict"] == (REPLICATED if for_b and not for_a else NOT_REPLICATED if for_a and not for_b
                              else INCONCLUSIVE)
    assert "only)" not in row["ours"] and "pending" not in row["ours"] and row["ours"].count("of 3 seeds favour") == 4

    shutil.rmtree(next((out / "runs" / "evals").glob("*attnres*-s1-*")))
    assert (out / "stats" / "mcnemar_attnres_mhar_s1").is_dir()
    assert run_demo(out, plan=PAPER350, stages=["stats", "claims"]) == 0
    pairs, row = _read(out)
    assert not (out / "stats" / "mcnemar_attnres_mhar_s1").exists()
    assert [t["seed"] for t in pairs["attnres", "mhar"]["tables"]] == [0, 2]
    assert row["verdict"] == PENDING and row["note"].startswith("finished, not evaluated: attnres seed 1. Then:")


def test_seeds_favouring_each_side_count_ties_apart():
    """Hand-made seed tables, (b, c) = (5, 9), (7, 7), (10, 4): one seed favours B, one A, one neither; pooled
    B = 22, C = 20, exact p scipy's binomial test of 22 in 42."""
    from analysis.stats.compare import Comparison, McNemarRow
    from analysis.stats.mcnemar_seeds import PairSeeds, SeedTable, seeds_document, seeds_markdown

    def table(seed: int, b: int, c: int) -> SeedTable:
        row = McNemarRow(task="t", filter="none", metric="acc", n=50, acc_a=0.5, acc_b=0.5 + (c - b) / 50,
                         delta=(c - b) / 50, b=b, c=c, p_value=binomtest(b, b + c, 0.5).pvalue, p_holm=1.0,
                         ci_low=-0.1, ci_high=0.1, n_a=50, n_b=50, only_a=0, only_b=0, duplicated_a=0, duplicated_b=0,
                         hash_mismatch=0, hash_unchecked=0)
        return SeedTable(seed, f"mcnemar_s{seed}", Comparison("a", "b", "d", "d", [row]))

    pair = PairSeeds("baseline", "mhar", "baseline", "mhar H=8", [0, 1, 2, 3],
                     [table(0, 5, 9), table(1, 7, 7), table(2, 10, 4)], {3: "no evaluation of mhar H=8 seed 3"})
    (r,) = pair.across()
    assert (r["favour_b"], r["favour_a"], r["ties"], r["b"], r["c"]) == (1, 1, 1, 22, 20)
    assert r["p_exact"] == pytest.approx(binomtest(22, 42, 0.5).pvalue) and r["delta_pooled"] == pytest.approx(-2 / 150)
    doc = seeds_document([pair])
    assert doc["pairs"][0]["pending"] == [dict(seed=3, why="no evaluation of mhar H=8 seed 3", unevaluated=[])]
    # rows without item keys: no clustered test, Holm reads the exact p (and says so); one row: Holm leaves it
    assert r["p_items"] is None and doc["pairs"][0]["across"][0]["p_basis"] == "p_exact"
    assert doc["pairs"][0]["across"][0]["p_holm"] == pytest.approx(r["p_exact"])
    text = seeds_markdown(doc)
    assert "| 3 | pending: no evaluation of mhar H=8 seed 3 |" in text and "| t | acc | 0, 1, 2 | 1 / 1 / 1 | -0.013 |" in text


def test_the_item_clustered_test_against_every_sign_vector_and_a_monte_carlo_of_its_own():
    """sign_flip_p: with few nonzero units, the share of all 2^m sign vectors whose |sum| reaches the observed
    one (zeros left out change nothing); with many, within Monte Carlo error of a plain numpy sign-flip
    of 200,000 draws; 1 when every unit is 0."""
    import itertools

    d = np.array([2, 1, 1, 3, -1, 0, 0, 1, -2, 2])
    nz = d[d != 0]
    signs = np.array(list(itertools.product((1, -1), repeat=nz.size)))
    assert sign_flip_p(d) == pytest.approx(np.mean(np.abs(signs @ nz) >= abs(nz.sum()) - 1e-12), abs=1e-12)
    assert sign_flip_p(np.zeros(5)) == 1.0 and sign_flip_p([]) == 1.0
    rng = np.random.default_rng(7)
    d = np.concatenate([rng.choice([-2, -1, 0, 0, 0, 1, 2], size=400), np.ones(20, int)])  # a small lean to B
    draws = rng.choice((-1.0, 1.0), size=(200_000, d.size))
    reference = np.mean(np.abs(draws @ d) >= abs(d.sum()))
    assert 0.01 < reference < 0.2 and abs(sign_flip_p(d) - reference) < 0.01
