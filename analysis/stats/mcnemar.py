"""Exact McNemar test, paired bootstrap of an accuracy delta, and Holm's step-down adjustment.

For two arms A and B scored 0/1 on the same n items, the 2x2 table of per-item correctness is

                  B right   B wrong
      A right       a         b
      A wrong       c         d

Only the discordant cells carry information about a difference. Under H0 (equal accuracy)
b ~ Binomial(b + c, 1/2), so the exact two-sided McNemar p-value is

    p = min(1, 2 * P[X <= min(b, c)]),  X ~ Binomial(b + c, 1/2),      p = 1 when b + c = 0,

which for p0 = 1/2 (a symmetric distribution) equals the "sum of probabilities no larger than
the observed one" definition used by `scipy.stats.binomtest` and statsmodels'
`mcnemar(exact=True)`. The accuracy delta is acc_B - acc_A = (c - b) / n. Its chi-square statistic
(no continuity correction) is

    X^2 = (b - c)^2 / (b + c)  ~  chi^2_1 under H0                      (NaN when b + c = 0).

Over K independent strata k (seeds) of matched pairs, the Cochran-Mantel-Haenszel test with every
matched pair as its own stratum is McNemar's on the pooled discordant counts (Agresti, Categorical
Data Analysis, 3rd ed., sec. 11.1.4): with B = sum_k b_k and C = sum_k c_k,

    X^2_CMH = (B - C)^2 / (B + C),     exact: the binomial test of B in B + C trials at 1/2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np
from scipy.special import betainc

from .errors import StatsError

#: up to this many trials the tail sum is done in exact integer arithmetic
EXACT_LIMIT = 20_000


def binom_cdf_half(k: int, n: int) -> float:
    """P[X <= k] for X ~ Binomial(n, 1/2).

    Exact (sum_{i<=k} C(n, i) / 2^n with integers) for n <= EXACT_LIMIT; beyond, the identity
    P[X <= k] = I_{1/2}(n - k, k + 1) with the regularised incomplete beta function.
    """
    if n < 0 or k < 0:
        raise StatsError(f"binomial counts must be non-negative (k={k}, n={n})")
    if k >= n:
        return 1.0
    if n <= EXACT_LIMIT:
        total, term = 0, 1
        for i in range(k + 1):  # term = C(n, i), updated in place
            total += term
            term = term * (n - i) // (i + 1)
        return float(Fraction(total, 1 << n))
    return float(betainc(n - k, k + 1, 0.5))


def binom_test_half(k: int, n: int) -> float:
    """Exact two-sided binomial test of k successes in n trials against p = 1/2."""
    if not 0 <= k <= n:
        raise StatsError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binom_cdf_half(min(k, n - k), n))


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts b and c (1 when b + c = 0)."""
    if b < 0 or c < 0 or int(b) != b or int(c) != c:
        raise StatsError(f"discordant counts must be non-negative integers (b={b}, c={c})")
    return binom_test_half(int(b), int(b) + int(c))


def mcnemar_chi2(b: int, c: int) -> float:
    """McNemar's statistic (b - c)^2 / (b + c) without continuity correction (NaN when b + c = 0)."""
    if b < 0 or c < 0:
        raise StatsError(f"discordant counts must be non-negative (b={b}, c={c})")
    return math.nan if b + c == 0 else (b - c) ** 2 / (b + c)


@dataclass(frozen=True)
class Stratified:
    """McNemar over strata of matched pairs (the CMH test with each pair a stratum): pooled counts."""

    b: int  # sum over strata of A right & B wrong
    c: int  # ... of A wrong & B right
    statistic: float  # (B - C)^2 / (B + C), NaN when B + C = 0
    p_chi2: float  # P[chi^2_1 >= statistic] (1 when B + C = 0)
    p_exact: float  # exact two-sided binomial p of B in B + C at 1/2


def mcnemar_stratified(counts: Sequence[tuple[int, int]]) -> Stratified:
    """The combined McNemar test over strata given each stratum's (b, c) (module docstring)."""
    from scipy.stats import chi2

    if not counts:
        raise StatsError("a stratified McNemar test needs at least one stratum")
    b, c = sum(int(x) for x, _ in counts), sum(int(y) for _, y in counts)
    stat = mcnemar_chi2(b, c)
    return Stratified(b=b, c=c, statistic=stat, p_chi2=1.0 if math.isnan(stat) else float(chi2.sf(stat, 1)),
                      p_exact=mcnemar_exact(b, c))


def paired_bootstrap_ci(
    x_a: Sequence[float] | np.ndarray,
    x_b: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of mean(x_b - x_a), resampling items (pairs kept together) with replacement.

    delta* = mean_i (x_b - x_a)[I_i],  I ~ Uniform{0..n-1}^n,  n_boot draws from
    `numpy.random.default_rng(seed)`; the CI is the (1-level)/2 and (1+level)/2 quantiles.
    """
    a = np.asarray(x_a, dtype=float)
    b = np.asarray(x_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise StatsError(f"paired arrays must be 1-D of equal length (got {a.shape} and {b.shape})")
    if a.size == 0:
        return (math.nan, math.nan)
    if not 0 < level < 1:
        raise StatsError(f"confidence level must be in (0, 1), got {level}")
    diff = b - a
    rng = np.random.default_rng(seed)
    n = diff.size
    chunk = max(1, 2_000_000 // n)
    means = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        means[start:start + m] = diff[rng.integers(0, n, size=(m, n))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


#: resamples of the item-clustered sign-flip test (`sign_flip_p`); exact where 2^m is no more
SIGN_FLIP_RESAMPLES = 9_999


def sign_flip_p(d: Sequence[float], n_resamples: int = SIGN_FLIP_RESAMPLES, seed: int = 0) -> float:
    """Two-sided sign-flip (paired permutation) p of mean(d) = 0, d one value per independent unit.

    Used with d_i = sum over seeds of (B right - A right) on item i: the seeds' evaluations share
    their items, so an item is the unit, not an (item, seed) pair. Under H0 each d_i is symmetric
    about 0; p = share of the 2^m sign vectors (m = number of nonzero units) whose |mean| is at least
    the observed one: enumerated when 2^m <= n_resamples, else `n_resamples` random ones (seeded), with
    the observed counted once (scipy.stats.permutation_test). 1.0 when every d_i is 0."""
    from scipy.stats import permutation_test

    x = np.asarray(d, dtype=np.float64)
    x = x[x != 0]  # a zero's sign changes nothing: the test is the same on the nonzero units
    if x.size == 0:
        return 1.0
    res = permutation_test((x,), lambda v, axis: np.mean(v, axis=axis), permutation_type="samples",
                           n_resamples=n_resamples, alternative="two-sided", vectorized=True,
                           random_state=np.random.default_rng(seed))
    return float(min(1.0, res.pvalue))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm (1979) step-down adjusted p-values; NaN entries stay NaN and are not counted.

    With the m finite p-values sorted p_(1) <= ... <= p_(m):
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = ok.size
    if m == 0:
        return out.tolist()
    order = ok[np.argsort(p[ok], kind="stable")]
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))
        out[idx] = running
    return out.tolist()


@dataclass(frozen=True)
class PairedBinary:
    """Per-item comparison of two arms on one task (delta = acc_b - acc_a)."""

    n: int
    acc_a: float
    acc_b: float
    delta: float
    b: int  # A right, B wrong
    c: int  # A wrong, B right
    p_value: float
    ci_low: float
    ci_high: float


def compare_binary(
    x_a: Sequence[float] | np.ndarray,
    x_b: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedBinary:
    """Counts, exact McNemar p and bootstrap CI for paired 0/1 outcomes."""
    a = np.asarray(x_a, dtype=float)
    bb = np.asarray(x_b, dtype=float)
    for name, arr in (("A", a), ("B", bb)):
        bad = ~np.isin(arr, (0.0, 1.0))
        if bad.any():
            raise StatsError(f"arm {name} has non-binary scores (e.g. {arr[bad][0]!r}); McNemar needs 0/1 per item")
    if a.shape != bb.shape:
        raise StatsError(f"paired arrays differ in length ({a.size} vs {bb.size})")
    n = int(a.size)
    b = int(np.sum((a == 1) & (bb == 0)))
    c = int(np.sum((a == 0) & (bb == 1)))
    acc_a = float(a.mean()) if n else math.nan
    acc_b = float(bb.mean()) if n else math.nan
    lo, hi = paired_bootstrap_ci(a, bb, n_boot=n_boot, level=level, seed=seed)
    return PairedBinary(n=n, acc_a=acc_a, acc_b=acc_b, delta=acc_b - acc_a, b=b, c=c,
                        p_value=mcnemar_exact(b, c), ci_low=lo, ci_high=hi)
