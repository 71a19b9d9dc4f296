"""Exact McNemar / binomial p-values, bootstrap and Holm against scipy and statsmodels."""

import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from analysis.stats.errors import StatsError
from analysis.stats.mcnemar import (binom_cdf_half, binom_test_half, compare_binary, holm,
                                    mcnemar_exact, paired_bootstrap_ci)


def _tables(rng):
    fixed = [(0, 0), (0, 1), (1, 0), (0, 7), (9, 0), (5, 5), (40, 40), (123, 81), (27, 13),
             (1, 1), (0, 30), (3000, 3100), (12000, 11500)]
    rand = [tuple(int(x) for x in rng.integers(0, 200, size=2)) for _ in range(150)]
    big = [tuple(int(x) for x in rng.integers(0, 30000, size=2)) for _ in range(15)]
    return fixed + rand + big


def test_mcnemar_matches_scipy_and_statsmodels():
    rng = np.random.default_rng(1)
    for b, c in _tables(rng):
        ours = mcnemar_exact(b, c)
        if b + c == 0:
            assert ours == 1.0
            continue
        ref = binomtest(b, b + c, 0.5).pvalue
        sm = sm_mcnemar(np.array([[7, b], [c, 11]]), exact=True).pvalue
        assert ours == pytest.approx(ref, rel=1e-9, abs=1e-300), (b, c)
        assert ours == pytest.approx(sm, rel=1e-9, abs=1e-300), (b, c)
        assert mcnemar_exact(c, b) == ours  # symmetric


def test_b_equals_c_gives_one_and_zero_cell():
    assert mcnemar_exact(17, 17) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 * 0.5**6)


def test_binomial_cdf_exact_and_beta_branches_agree():
    from scipy.stats import binom
    for n, k in [(10, 3), (1000, 480), (20000, 9800), (20001, 9800), (50000, 24700)]:
        assert binom_cdf_half(k, n) == pytest.approx(binom.cdf(k, n, 0.5), rel=1e-9)
    assert binom_test_half(3, 10) == pytest.approx(binomtest(3, 10).pvalue)


def test_paper_gsm8k_and_gpqa():
    # paper, Mid-training: GSM8K 123 vs 81 discordant, p = 0.004; GPQA 27 vs 13, p = 0.038
    assert round(mcnemar_exact(123, 81), 3) == 0.004
    assert round(mcnemar_exact(27, 13), 3) == 0.038


def test_compare_binary_counts_and_ci():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 500).astype(float)
    b = np.where(rng.random(500) < 0.2, 1 - a, a)
    r = compare_binary(a, b, n_boot=2000, seed=3)
    assert r.b == int(((a == 1) & (b == 0)).sum()) and r.c == int(((a == 0) & (b == 1)).sum())
    assert r.delta == pytest.approx(b.mean() - a.mean())
    assert r.delta == pytest.approx((r.c - r.b) / r.n)
    assert r.ci_low <= r.delta <= r.ci_high
    # seeded: same seed, same interval
    assert paired_bootstrap_ci(a, b, n_boot=2000, seed=3) == (r.ci_low, r.ci_high)
    # width close to the normal approximation of the paired difference
    d = b - a
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert (r.ci_high - r.ci_low) == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_compare_binary_rejects_non_binary():
    with pytest.raises(StatsError, match="non-binary"):
        compare_binary([0, 1, 0.5], [1, 1, 0])


def test_holm_matches_statsmodels():
    rng = np.random.default_rng(5)
    for m in (1, 2, 5, 17):
        for _ in range(20):
            p = rng.random(m) ** 3
            ref = multipletests(p, method="holm")[1]
            np.testing.assert_allclose(holm(p), ref, rtol=1e-12)
    out = holm([0.01, float("nan"), 0.04])
    assert np.isnan(out[1]) and out[0] == pytest.approx(0.02) and out[2] == pytest.approx(0.04)
