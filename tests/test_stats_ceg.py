"""Power-law fits and compute-equivalent gain."""

import math

import numpy as np
import pytest

from analysis.stats.ceg import ceg, ceg_table, final_points, fit_power_law, lower_envelope
from analysis.stats.errors import StatsError


def test_fit_recovers_power_law_with_noise():
    rng = np.random.default_rng(0)
    A, alpha = 25.0, 0.089
    C = np.logspace(15, 19, 200)
    L = A * C ** -alpha * np.exp(rng.normal(0, 0.003, C.size))
    fit = fit_power_law(C, L)
    assert fit.alpha == pytest.approx(alpha, abs=0.002)
    assert fit.A == pytest.approx(A, rel=0.1)
    assert fit.r2 > 0.98 and fit.n == 200
    exact = fit_power_law(C, A * C ** -alpha)
    assert exact.alpha == pytest.approx(alpha, rel=1e-10) and exact.A == pytest.approx(A, rel=1e-8)
    assert exact.compute_for_loss(exact.predict(1e17)) == pytest.approx(1e17, rel=1e-9)


def test_lower_envelope_is_the_pareto_front():
    rng = np.random.default_rng(1)
    curves = []
    for scale in (1.0, 3.0, 9.0):
        C = np.linspace(1e15, 1e18, 50) * scale
        curves.append((C, 30.0 * C ** -0.09 + 0.3 / scale + rng.normal(0, 0.01, C.size)))
    ec, el = lower_envelope(curves)
    allc = np.concatenate([c for c, _ in curves])
    alll = np.concatenate([l for _, l in curves])
    assert np.all(np.diff(ec) > 0) and np.all(np.diff(el) < 0)
    for c, l in zip(ec, el):  # nothing at less or equal compute is lower
        assert not np.any((allc <= c) & (alll < l))
    for c, l in zip(allc, alll):  # every omitted point is dominated
        if not np.any((ec == c) & (el == l)):
            assert np.any((allc <= c) & (alll < l) & ~((allc == c) & (alll == l)))
    fc, fl = final_points(curves)
    assert list(fc) == [c[-1] for c, _ in curves]


def test_envelope_fit_recovers_alpha():
    rng = np.random.default_rng(2)
    curves = []
    for scale in (1.0, 4.0, 16.0):
        C = np.logspace(15, 18, 80) * scale
        curves.append((C, 20.0 * C ** -0.07 * np.exp(rng.normal(0, 0.001, C.size))))
    fit = fit_power_law(*lower_envelope(curves))
    assert fit.alpha == pytest.approx(0.07, abs=0.005)


def test_paper_arithmetic():
    # main table (anneal corpus), alpha = 0.089 -> 1.3x / 1.8x / 1.7x at 100M / 350M / 1B
    table = [("100M", 3.031, 2.969, 1.3), ("350M", 2.997, 2.848, 1.8), ("1B", 2.894, 2.754, 1.7)]
    for _, lb, lm, paper in table:
        assert round(ceg(lb, lm, 0.089), 1) == paper
    assert ceg(3.031, 2.969, 0.089) == pytest.approx(math.exp(math.log(3.031 / 2.969) / 0.089))
    # bracket: final-points alpha 0.053 -> 1.5-2.6x, alpha 0.15 -> 1.15-1.4x
    rows = ceg_table([dict(scale=s, L_base=lb, L_method=lm) for s, lb, lm, _ in table],
                     {"envelope": 0.089, "final": 0.053, "chinchilla": 0.15})
    assert round(min(r.ceg["final"] for r in rows), 1) == 1.5 and round(max(r.ceg["final"] for r in rows), 1) == 2.6
    assert round(min(r.ceg["chinchilla"] for r in rows), 2) == 1.15
    assert round(max(r.ceg["chinchilla"] for r in rows), 1) == 1.4
    assert all(r.low == r.ceg["chinchilla"] and r.high == r.ceg["final"] for r in rows)
    # routing FLOPs divided out
    assert ceg(3.031, 2.969, 0.089, 0.0066) == pytest.approx(ceg(3.031, 2.969, 0.089) / 1.0066)
    r = ceg_table([dict(scale="100M", L_base=3.031, L_method=2.969, routing_fraction=0.0066)], {"a": 0.089},
                  divide_routing=True)[0]
    assert r.ceg["a"] == pytest.approx(ceg(3.031, 2.969, 0.089) / 1.0066)


def test_errors():
    with pytest.raises(StatsError, match="at least two"):
        fit_power_law([1e15], [3.0])
    with pytest.raises(StatsError, match="positive"):
        fit_power_law([0.0, 1e15], [3.0, 2.9])
    with pytest.raises(StatsError, match="alpha must be positive"):
        ceg(3.0, 2.9, 0.0)
