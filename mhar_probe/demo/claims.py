"""The claim table: each paper claim a study's runs can test, our measurement with its interval,
and one of four verdicts.

    replicated                  the interval lies on the paper's side
    not replicated              the interval lies on the other side (the opposite holds)
    inconclusive at this scale  the interval straddles the line, or the runs cannot test it
    pending: needs rerun        the files lack what the test needs (too few null draws, a null
                                without halves): a capture on the GPU machine, not a verdict

Read from the files the earlier stages wrote (stats/tails.json, stats/ceg.json, the runs'
summaries and the routing dataset of every seed), so the table regenerates from a results folder
alone. Intervals are 95%:
  * order, CEG gain: Student t over paired seed deltas of tail-mean loss;
  * slice-KL excess: Student t over seeds of each seed's excess (trained - mean of its null draws);
  * per-head deviations, replication: per seed, z = (trained - null mean) / null sd over the
    matched-norm random-query draws; z > 2 in every seed is above the null, z < -2 in every seed
    below it. The sd needs at least MIN_NULL_DRAWS draws (its relative standard error
    1/sqrt(2(n-1)) at most 10%): with fewer the claim is pending;
  * per-KV optimum of H (H = 1 is attnres, MHAR at one head): a difference between two H of one
    seed counts when it exceeds t_{0.975, n-1} x the sd of the paired per-seed deltas of two H arms
    the study ran over n seeds (mhar at the plan's H - attnres).
Nothing here is tuned to the paper: the thresholds are fixed before the numbers are read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from .plan import Plan

REPLICATED, NOT_REPLICATED, INCONCLUSIVE = "replicated", "not replicated", "inconclusive at this scale"
PENDING = "pending: needs rerun"
VERDICTS = (REPLICATED, NOT_REPLICATED, INCONCLUSIVE, PENDING)
LEVEL = 0.95
#: the relative standard error allowed of the null's sd over its draws, 1/sqrt(2(n-1)) ...
NULL_SD_REL_SE = 0.10
#: ... hence the fewest draws a z against the null is read with (51)
MIN_NULL_DRAWS = math.ceil(1 + 1 / (2 * NULL_SD_REL_SE ** 2))
#: the paper's numbers each claim is read against (section / figure in the paper)
PAPER = {
    "order": "MHAR < single-head < baseline in held-out loss at 100M-1B (Table main)",
    "optimum": "per-KV optimum of H at 4 or 8 (Figure hushape, kv x H grids)",
    "excess": "learned slice-KL excess 0.235-0.606 > 0 over a matched-norm random query (Table probe)",
    "deviation": "per-head deviations up to 0.28 against 0.067 under a matched-norm random query (Figure perhead)",
    "replication": "deviations replicate on disjoint evaluation text, r = 0.77 (Figure perhead)",
    "ceg": "compute-equivalent gain 1.3x / 1.8x / 1.7x (alpha 0.089), bracket 1.15-2.6x",
}
PAPER_OPTIMA = (4, 8)
PAPER_CEG_BRACKET = (1.15, 2.6)


@dataclass
class Claim:
    key: str
    ours: str
    verdict: str
    note: str = ""


def _t_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the statistics' own Student t interval (NaN bounds for one value)."""
    from analysis.stats.curves import t_interval

    mean, _, _, low, high = t_interval(values, LEVEL)
    return mean, low, high


def side(low: float, high: float, paper_side_below: float) -> str:
    """Verdict of an interval against a line: replicated when it lies wholly on the paper's side
    (below `paper_side_below`), not replicated when wholly above, else inconclusive."""
    if math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if high < paper_side_below:
        return REPLICATED
    if low > paper_side_below:
        return NOT_REPLICATED
    return INCONCLUSIVE


def _fmt_interval(mean: float, low: float, high: float, digits: int = 3) -> str:
    if math.isnan(low):
        return f"{mean:+.{digits}f} (one seed: no interval)"
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def _tail_means(tails: dict[str, Any], method: str, heads: int | None, kv: int | None) -> dict[int, float]:
    return {r["seed"]: r["tail_mean"] for r in tails["runs"]
            if r["method"] == method and (heads is None or r["H"] == heads) and (kv is None or r["kv"] == kv)}


def order_claim(plan: Plan, tails: dict[str, Any]) -> Claim:
    """MHAR < AttnRes < baseline: paired per-seed deltas of tail-mean loss, both must be below 0."""
    kv = plan.main_kv
    base = _tail_means(tails, "baseline", None, kv)
    single = _tail_means(tails, "attnres", None, kv)
    multi = _tail_means(tails, "mhar", plan.mhar_heads, kv)
    seeds = sorted(set(base) & set(single) & set(multi))
    if not seeds:
        return Claim("order", "no seed has baseline, attnres and mhar", INCONCLUSIVE)
    d1 = _t_interval([single[s] - base[s] for s in seeds])
    d2 = _t_interval([multi[s] - single[s] for s in seeds])
    v1, v2 = side(d1[1], d1[2], 0.0), side(d2[1], d2[2], 0.0)
    verdict = (NOT_REPLICATED if NOT_REPLICATED in (v1, v2) else REPLICATED if v1 == v2 == REPLICATED
               else INCONCLUSIVE)
    ours = (f"attnres - baseline {_fmt_interval(*d1)}; mhar H={plan.mhar_heads} - attnres {_fmt_interval(*d2)} "
            f"({len(seeds)} seeds, tail-mean loss)")
    return Claim("order", ours, verdict, "both deltas must be below 0; either one above 0 reverses the order")


def optimum_margin(plan: Plan, tails: dict[str, Any]) -> tuple[float, list[float]]:
    """(margin, deltas): the paired per-seed deltas of two H arms of the plan (mhar at its H minus
    attnres, H = 1, at its KV) and t_{0.975, n-1} x their sd, the size a single seed's difference
    between two H must exceed (under no difference, delta / sd(deltas) is t with n-1 df)."""
    single = _tail_means(tails, "attnres", None, plan.main_kv)
    multi = _tail_means(tails, "mhar", plan.mhar_heads, plan.main_kv)
    deltas = [multi[s] - single[s] for s in sorted(set(single) & set(multi))]
    if len(deltas) < 2:
        return math.nan, deltas
    mean, low, high = _t_interval(deltas)
    return (high - mean) * math.sqrt(len(deltas)), deltas  # (t sd / sqrt(n)) sqrt(n) = t sd


def optimum_claim(plan: Plan, runs: list[dict[str, Any]], tails: dict[str, Any]) -> Claim:
    """Per-KV optimum of H over every H the main seed ran, H = 1 (attnres: MHAR at one head)
    included: argmin of tail-mean loss, read against `optimum_margin`."""
    grid: dict[int, dict[int, float]] = {}
    for r in runs:
        if r["seed"] == plan.main_seed and r["method"] in ("mhar", "attnres"):
            grid.setdefault(r["kv"], {})[1 if r["method"] == "attnres" else r["H"]] = r["tail_mean"]
    grid = {kv: hs for kv, hs in grid.items() if len(hs) >= 3}
    if len(grid) < 2:
        return Claim("optimum", f"kv x H grid has {len(grid)} KV value(s) with >= 3 H", INCONCLUSIVE)
    margin, deltas = optimum_margin(plan, tails)
    parts, verdicts = [], []
    for kv in sorted(grid):
        hs = grid[kv]
        best = min(hs, key=hs.get)
        losses = ", ".join(f"H{h} {hs[h]:.3f}" for h in sorted(hs))
        missing = "" if 1 in hs else "; H=1 not run"
        if best in PAPER_OPTIMA:
            others = {h: hs[h] - hs[best] for h in hs if h not in PAPER_OPTIMA}
            h_next = min(others, key=others.get) if others else None
            gap = others[h_next] if h_next is not None else math.nan
            verdicts.append(REPLICATED if gap > margin else INCONCLUSIVE)
            gap_text = f"next best outside 4-8 (H{h_next}) {gap:+.3f}"
        else:
            paper = {h: hs[h] - hs[best] for h in hs if h in PAPER_OPTIMA}
            h_paper = min(paper, key=paper.get) if paper else None
            gap = paper[h_paper] if h_paper is not None else math.nan
            verdicts.append(NOT_REPLICATED if gap > margin else INCONCLUSIVE)
            gap_text = f"best of H 4-8 (H{h_paper}) {gap:+.3f}" if h_paper is not None else "no H in 4-8"
        parts.append(f"KV={kv}: best H={best} ({losses}{missing}); {gap_text}")
    verdict = (NOT_REPLICATED if all(v == NOT_REPLICATED for v in verdicts)
               else REPLICATED if all(v == REPLICATED for v in verdicts) else INCONCLUSIVE)
    spread = ", ".join(f"{d:+.3f}" for d in deltas)
    note = (f"seed {plan.main_seed}; a gap counts when it exceeds the margin {margin:.3f} = "
            f"t(0.975, {len(deltas) - 1}) x "
            f"sd of the paired seed deltas mhar H={plan.mhar_heads} - attnres ({spread})")
    return Claim("optimum", "; ".join(parts), verdict, note)


def excess_claim(plan: Plan, excess: dict[int, float]) -> Claim:
    """Learned slice-KL excess of the single-head run over its random-query null (per seed: trained
    minus the null draws' mean), with a Student t interval over seeds."""
    if not excess:
        return Claim("excess", "no routing dataset of attnres", INCONCLUSIVE)
    seeds = sorted(excess)
    mean, low, high = _t_interval([excess[s] for s in seeds])
    per_seed = ", ".join(f"{excess[s]:.4f}" for s in seeds)
    ours = (f"{mean:.4f} [{low:.4f}, {high:.4f}] over {len(seeds)} seeds (attnres; per seed {per_seed})"
            if not math.isnan(low) else f"{mean:.4f} (one seed: no interval; attnres)")
    verdict = side(-high, -low, 0.0)  # the paper's side is excess > 0
    return Claim("excess", ours, verdict, "Student t interval over seeds of each seed's excess (trained - null mean)")


@dataclass
class NullRead:
    """One seed's statistic against its random-query null (mean and sd over `draws` draws)."""

    value: float
    null_mean: float
    null_sd: float
    draws: int

    @property
    def z(self) -> float:
        return (self.value - self.null_mean) / self.null_sd if self.null_sd > 0 else math.nan


def _z_verdict(reads: dict[int, NullRead], what: str) -> tuple[str, str]:
    """(verdict, note) of per-seed z: above the null in every seed (z > 2) or below it in every seed
    (z < -2); pending where a seed's null lacks values or has fewer than MIN_NULL_DRAWS draws."""
    lacking = [s for s, r in reads.items() if math.isnan(r.null_mean)]
    few = [s for s, r in reads.items() if r.draws < MIN_NULL_DRAWS and s not in lacking]
    rule = ("z = (trained - null mean) / null sd over draws; z > 2 in every seed: above the null, "
            "z < -2 in every seed: below")
    if lacking:
        return PENDING, (f"{rule}. Pending: the capture of seed(s) {', '.join(map(str, lacking))} has no {what}; "
                         f"capture again with >= {MIN_NULL_DRAWS} draws (`mhar capture RUN --overwrite --draws 64`)")
    if few:
        draws = sorted({reads[s].draws for s in few})
        return PENDING, (f"{rule}. Pending: a stable z needs >= {MIN_NULL_DRAWS} null draws (sd within 10%); seed(s) "
                         f"{', '.join(map(str, few))} have {', '.join(map(str, draws))}: capture again "
                         f"(`mhar capture RUN --overwrite --draws 64`)")
    zs = [r.z for r in reads.values()]
    if any(math.isnan(z) for z in zs):
        return INCONCLUSIVE, rule
    return (REPLICATED if min(zs) > 2 else NOT_REPLICATED if max(zs) < -2 else INCONCLUSIVE), rule


def _per_seed(reads: dict[int, NullRead], digits: int = 3) -> str:
    return "; ".join(f"seed {s}: {r.value:.{digits}f} vs null {r.null_mean:.{digits}f} +- {r.null_sd:.{digits}f} "
                     f"(z = {r.z:.2f}, {r.draws} draws)" if not math.isnan(r.null_mean) else
                     f"seed {s}: {r.value:.{digits}f}, null not captured" for s, r in sorted(reads.items()))


def deviation_claim(plan: Plan, reads: dict[int, NullRead]) -> Claim:
    """max |D| of the trained heads against the matched-norm random query's, every seed."""
    if not reads:
        return Claim("deviation", f"no routing dataset of mhar H={plan.mhar_heads}", INCONCLUSIVE)
    verdict, note = _z_verdict(reads, "null draws")
    return Claim("deviation", f"max |D| of mhar H={plan.mhar_heads}: {_per_seed(reads)}", verdict, note)


def replication_claim(plan: Plan, reads: dict[int, NullRead], halves: dict[int, str]) -> Claim:
    """Split-half r of the deviation map between document-disjoint halves against the same r of
    the random-query null's heads, every seed: the claim holds only where the trained r exceeds it."""
    if not reads:
        return Claim("replication", f"no routing dataset of mhar H={plan.mhar_heads}", INCONCLUSIVE)
    shared = [s for s, h in halves.items() if h != "documents"]
    if shared:
        return Claim("replication", f"r by seed {_per_seed(reads)}; seed(s) {', '.join(map(str, shared))} split by "
                     f"{halves[shared[0]] or 'unknown'} (not disjoint text)", INCONCLUSIVE)
    verdict, note = _z_verdict(reads, "null halves (null_weight_mean_half, recorded since issue 32)")
    return Claim("replication", f"split-half r (halves by documents) of mhar H={plan.mhar_heads}: {_per_seed(reads)}",
                 verdict, note)


def ceg_claim(plan: Plan, ceg: dict[str, Any], tails: dict[str, Any]) -> Claim:
    """The CEG bracket of MHAR (the plan's H) over baseline, read against the paper's bracket; a gain
    that the seeds cannot tell from zero leaves the claim inconclusive."""
    rows = [r for r in ceg.get("rows", []) if r["method"].startswith(f"mhar H={plan.mhar_heads} ")]
    if not rows:
        return Claim("ceg", f"no mhar H={plan.mhar_heads} row in stats/ceg.json", INCONCLUSIVE)
    row = rows[0]
    base = _tail_means(tails, "baseline", None, plan.main_kv)
    multi = _tail_means(tails, "mhar", plan.mhar_heads, plan.main_kv)
    seeds = sorted(set(base) & set(multi))
    mean, low, high = _t_interval([multi[s] - base[s] for s in seeds]) if seeds else (math.nan,) * 3
    alphas = ", ".join(f"{k} {v:.2f}x" for k, v in row["ceg"].items())
    ours = (f"bracket {row['low']:.2f}x-{row['high']:.2f}x ({alphas}); its loss gain over seeds "
            f"{_fmt_interval(mean, low, high)}")
    gain = side(low, high, 0.0)
    if gain != REPLICATED:
        verdict = NOT_REPLICATED if gain == NOT_REPLICATED else INCONCLUSIVE
    else:
        lo, hi = PAPER_CEG_BRACKET
        verdict = REPLICATED if row["high"] >= lo and row["low"] <= hi else NOT_REPLICATED
    return Claim("ceg", ours, verdict, "needs a loss gain the seeds tell from zero, then a bracket overlapping 1.15-2.6x")


@dataclass
class SeedProbes:
    """Per seed, what the routing datasets of the plan's single-head and MHAR runs give."""

    excess: dict[int, float]  # attnres: slice-KL excess (trained - null draws' mean)
    deviation: dict[int, NullRead]  # mhar at the plan's H: max |D| against its null
    replication: dict[int, NullRead]  # ... split-half r against the null's split-half r
    halves: dict[int, str]  # ... how the halves were split ("documents": disjoint text)


def seed_probes(plan: Plan, runs: Path) -> SeedProbes:
    """Every seed's probes from RUN/routing.nc of the finished attnres and mhar (the plan's H)
    runs at the plan's KV (runs without a routing dataset are left out)."""
    from analysis.probes import per_head_deviation, width_disagreement

    from ..capture.io import open_routing_dataset
    from .runs import finished, swept_runs

    out = SeedProbes({}, {}, {}, {})
    for r in finished(swept_runs(runs)):
        path = r.path / "routing.nc"
        if not path.is_file() or (plan.main_kv is not None and r.kv != plan.main_kv):
            continue
        if r.method == "attnres":
            ds = open_routing_dataset(path)
            out.excess[r.seed] = float(width_disagreement(ds).sel(slicing="contiguous").summary_excess)
        elif r.method == "mhar" and r.heads == plan.mhar_heads:
            ds = open_routing_dataset(path)
            d = per_head_deviation(ds)
            draws = int(ds.sizes.get("draw", 0))
            out.deviation[r.seed] = NullRead(float(d.max_abs), float(d.null_max_abs_mean),
                                             float(d.null_max_abs_std), draws)
            out.replication[r.seed] = NullRead(float(d.replication_r), float(d.null_replication_r_mean),
                                               float(d.null_replication_r_std), draws)
            out.halves[r.seed] = d.attrs["halves"].split(" ")[0]
        else:
            continue
        ds.close()
    return out


def claims_of(plan: Plan, out: Path) -> list[Claim]:
    """Every claim, from the files under `out` (stats/, runs/ with their routing datasets)."""
    need = [out / "stats" / "tails.json", out / "stats" / "ceg.json"]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise UserError(f"the claim table needs {', '.join(missing)}; run the stats stage first")
    tails = json.loads(need[0].read_text())
    ceg = json.loads(need[1].read_text())
    grid_runs = _grid_runs(out / "runs")
    seeds = seed_probes(plan, out / "runs")
    return [order_claim(plan, tails), optimum_claim(plan, grid_runs, tails), excess_claim(plan, seeds.excess),
            deviation_claim(plan, seeds.deviation), replication_claim(plan, seeds.replication, seeds.halves),
            ceg_claim(plan, ceg, tails)]


def _grid_runs(runs: Path) -> list[dict[str, Any]]:
    """Every finished run of the sweep (all KV values) with its tail-mean loss, from the manifest."""
    from .runs import finished, swept_runs

    rows = []
    for r in finished(swept_runs(runs)):
        summary = json.loads((r.path / "summary.json").read_text())
        rows.append(dict(method=r.method, H=r.heads, kv=r.kv, seed=r.seed, tail_mean=summary["tail_mean_val_loss"]))
    return rows


def claims_markdown(claims: list[Claim]) -> str:
    lines = ["## Claims", "",
             "| claim (paper) | ours (95% interval) | verdict | how read |", "|---|---|---|---|"]
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731  (|D| inside a table cell)
    for c in claims:
        lines.append(f"| {cell(PAPER[c.key])} | {cell(c.ours)} | **{c.verdict}** | {cell(c.note)} |")
    return "\n".join(lines) + "\n"


def write_claims(plan: Plan, out: Path) -> str:
    """claims.md (and claims.json) under `out`; returns the markdown."""
    from ..atomic import write_json, write_text

    claims = claims_of(plan, out)
    text = claims_markdown(claims)
    write_text(out / "claims.md", text)
    write_json(out / "claims.json", [dict(claim=PAPER[c.key], key=c.key, ours=c.ours, verdict=c.verdict,
                                          note=c.note) for c in claims])
    return text
