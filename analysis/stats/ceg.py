"""Compute-equivalent gain (paper, "Compute-equivalent gain"; Kaplan et al. 2020 style fit).

Power law L(C) = A C^-alpha, fitted by ordinary least squares in log-log space,
    log L = log A - alpha log C,
to either the lower envelope of a set of baseline training curves (loss vs cumulative
training FLOPs) or the final points of the baseline runs. The compute-equivalent gain of a
method with loss L_m over a baseline with loss L_b is the factor by which baseline compute
would have to grow to reach L_m:
    CEG = C(L_m) / C(L_b) = (L_b / L_m)^(1 / alpha),
and, with the method's extra routing FLOPs f (per-step compute (1 + f) x baseline) divided
out, CEG_FLOPs = CEG / (1 + f). The exponent is uncertain, so the CEG is reported for every
available alpha (envelope fit, final-points fit, user values) and as their bracket.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import StatsError

Curve = tuple[Sequence[float], Sequence[float]]  # (cumulative FLOPs, loss)


@dataclass(frozen=True)
class PowerLawFit:
    A: float
    alpha: float
    r2: float  # in log-log space
    n: int
    c_min: float
    c_max: float

    def predict(self, C: float | np.ndarray) -> float | np.ndarray:
        return self.A * np.asarray(C, dtype=float) ** (-self.alpha)

    def compute_for_loss(self, L: float) -> float:
        """C such that A C^-alpha = L."""
        return (self.A / L) ** (1.0 / self.alpha)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_power_law(C: Sequence[float], L: Sequence[float]) -> PowerLawFit:
    """Least squares of log L on log C; needs >= 2 distinct positive C and positive L."""
    c = np.asarray(C, dtype=float)
    y = np.asarray(L, dtype=float)
    if c.shape != y.shape or c.ndim != 1:
        raise StatsError("FLOPs and losses must be 1-D arrays of equal length")
    if c.size < 2 or np.unique(c).size < 2:
        raise StatsError(f"a power-law fit needs at least two points at different compute (got {c.size})")
    if (c <= 0).any() or (y <= 0).any() or not np.isfinite(c).all() or not np.isfinite(y).all():
        raise StatsError("a power-law fit needs positive, finite FLOPs and losses (drop step 0)")
    x, ly = np.log(c), np.log(y)
    slope, intercept = np.polyfit(x, ly, 1)
    resid = ly - (intercept + slope * x)
    ss_tot = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    return PowerLawFit(A=float(math.exp(intercept)), alpha=float(-slope), r2=r2, n=int(c.size),
                       c_min=float(c.min()), c_max=float(c.max()))


def lower_envelope(curves: Sequence[Curve], *, min_flops: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Pareto front of all (C, L) points: a point is kept when its loss is strictly lower than
    that of every point at smaller or equal compute (C > min_flops only)."""
    pts = []
    for C, L in curves:
        c, y = np.asarray(C, dtype=float), np.asarray(L, dtype=float)
        if c.shape != y.shape:
            raise StatsError("each curve needs as many FLOP values as losses")
        keep = c > min_flops
        pts.extend(zip(c[keep], y[keep]))
    if not pts:
        raise StatsError("no curve points above min_flops")
    pts.sort(key=lambda p: (p[0], p[1]))
    env_c, env_l, best = [], [], math.inf
    for c, y in pts:
        if y < best:
            if env_c and env_c[-1] == c:  # same compute: keep the lower loss only
                env_l[-1] = y
            else:
                env_c.append(c)
                env_l.append(y)
            best = y
    return np.asarray(env_c), np.asarray(env_l)


def final_points(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray]:
    """(C, L) of the last point of every curve."""
    if not curves:
        raise StatsError("no curves")
    return (np.asarray([float(np.asarray(C)[-1]) for C, _ in curves]),
            np.asarray([float(np.asarray(L)[-1]) for _, L in curves]))


def ceg(L_base: float, L_method: float, alpha: float, routing_fraction: float = 0.0) -> float:
    """(L_base / L_method)^(1/alpha) / (1 + routing_fraction)."""
    if alpha <= 0:
        raise StatsError(f"alpha must be positive, got {alpha}")
    if L_base <= 0 or L_method <= 0:
        raise StatsError("losses must be positive")
    if routing_fraction <= -1:
        raise StatsError(f"routing fraction must be > -1, got {routing_fraction}")
    return (L_base / L_method) ** (1.0 / alpha) / (1.0 + routing_fraction)


@dataclass
class CEGRow:
    scale: str
    method: str
    L_base: float
    L_method: float
    routing_fraction: float
    ceg: dict[str, float]  # alpha label -> CEG
    low: float
    high: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ceg_table(entries: Sequence[Mapping[str, Any]], alphas: Mapping[str, float], *,
              divide_routing: bool = False) -> list[CEGRow]:
    """CEG per entry {scale, method, L_base, L_method[, routing_fraction]} for every alpha,
    with the bracket [min, max] over the alphas."""
    if not alphas:
        raise StatsError("no alpha to compute the CEG with")
    rows = []
    for e in entries:
        f = float(e.get("routing_fraction") or 0.0) if divide_routing else 0.0
        vals = {k: ceg(e["L_base"], e["L_method"], a, f) for k, a in alphas.items()}
        rows.append(CEGRow(scale=str(e["scale"]), method=str(e.get("method", "")), L_base=float(e["L_base"]),
                           L_method=float(e["L_method"]), routing_fraction=f, ceg=vals,
                           low=min(vals.values()), high=max(vals.values())))
    return rows
