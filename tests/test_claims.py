"""The claim table's verdicts: an interval wholly on the paper's side replicates, wholly on the
other side does not, and one that straddles the line (or is missing) is inconclusive."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from mhar_probe.demo import claims
from mhar_probe.demo.plan import LADDER


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


def test_replication_claim_fisher_interval_and_text_split():
    row = {"replication r": "0.5", "cells": "103", "replication halves": "documents"}
    c = claims.replication_claim(LADDER, {"tiny mhar H8": row})
    z, se = math.atanh(0.5), 1 / math.sqrt(100)
    assert f"[{math.tanh(z - 1.96 * se):.3f}, {math.tanh(z + 1.96 * se):.3f}]" in c.ours
    assert c.verdict == claims.REPLICATED
    rows = {"tiny mhar H8": dict(row, **{"replication halves": "rows"})}
    assert claims.replication_claim(LADDER, rows).verdict == claims.INCONCLUSIVE  # not disjoint text
    assert claims.replication_claim(LADDER, {"tiny mhar H4": row}).verdict == claims.INCONCLUSIVE  # no H=8 row


def test_deviation_claim_z_against_the_null():
    def row(ours, null, sd):
        return {"tiny mhar H8": {"max |D|": str(ours), "null max |D| (mean)": str(null), "null max |D| (sd)": str(sd)}}

    assert claims.deviation_claim(LADDER, row(0.30, 0.10, 0.05)).verdict == claims.REPLICATED
    assert claims.deviation_claim(LADDER, row(0.12, 0.10, 0.05)).verdict == claims.INCONCLUSIVE
    assert claims.deviation_claim(LADDER, row(0.01, 0.10, 0.02)).verdict == claims.NOT_REPLICATED


def test_optimum_claim_needs_two_kv_values_and_a_margin():
    tails = _tails([4.0] * 3, [3.9] * 3, [3.80, 3.81, 3.79])  # seed sd 0.01: margin 0.028
    clear = [dict(method="mhar", H=h, kv=kv, seed=0, tail_mean=3.7 + 0.1 * abs(h - 4) / 4)
             for kv in (2, 4) for h in (2, 4, 8, 16)]
    assert claims.optimum_claim(LADDER, clear, tails).verdict == claims.REPLICATED  # H=4 best by 0.05+
    off = [dict(r, tail_mean=3.7 + 0.05 * r["H"]) for r in clear]  # H=2 best at both KV by 0.1
    assert claims.optimum_claim(LADDER, off, tails).verdict == claims.NOT_REPLICATED
    one_kv = [r for r in clear if r["kv"] == 4]
    assert claims.optimum_claim(LADDER, one_kv, tails).verdict == claims.INCONCLUSIVE
