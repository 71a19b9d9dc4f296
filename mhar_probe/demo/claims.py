"""The claim table: each paper claim a study's runs can test, our measurement with its interval,
and one of three verdicts.

    replicated                  the interval lies on the paper's side
    not replicated              the interval lies on the other side (the opposite holds)
    inconclusive at this scale  the interval straddles the line, or the runs cannot test it

Read from the files the earlier stages wrote (stats/tails.json, stats/ceg.json, probes/*.csv and
the runs' summaries), so the table regenerates from a results folder alone. Intervals are 95%:
Student t over paired seed deltas, two-sided z (2 sd) against the random-query nulls, and a
Fisher interval for the replication r over the deviation map's cells (cells are not independent,
so that interval is optimistic; the table says so). Nothing here is tuned to the paper: the
thresholds are fixed before the numbers are read.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from .plan import Plan

REPLICATED, NOT_REPLICATED, INCONCLUSIVE = "replicated", "not replicated", "inconclusive at this scale"
LEVEL = 0.95
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


def _read_csv(path: Path) -> dict[str, dict[str, str]]:
    """A probe table written by analysis.probes (first column: row label) as {row: {column: cell}}."""
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    return {r[0]: dict(zip(header[1:], r[1:])) for r in rows[1:]}


def _float(cell: str | None) -> float:
    try:
        return float(cell)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


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


def optimum_claim(plan: Plan, runs: list[dict[str, Any]], tails: dict[str, Any]) -> Claim:
    """Per-KV optimum of H: argmin over H of the main seed's tail-mean loss, with the seed noise."""
    grid: dict[int, dict[int, float]] = {}
    for r in runs:
        if r["method"] == "mhar" and r["seed"] == plan.main_seed:
            grid.setdefault(r["kv"], {})[r["H"]] = r["tail_mean"]
    grid = {kv: hs for kv, hs in grid.items() if len(hs) >= 3}
    if len(grid) < 2:
        return Claim("optimum", f"kv x H grid has {len(grid)} KV value(s) with >= 3 H", INCONCLUSIVE)
    from statistics import stdev

    seeds = _tail_means(tails, "mhar", plan.mhar_heads, plan.main_kv)
    sd = stdev(seeds.values()) if len(seeds) >= 2 else math.nan
    margin = 2 * math.sqrt(2) * sd  # two single runs differ by more than this 95% of the time only if real
    parts, verdicts = [], []
    for kv in sorted(grid):
        hs = grid[kv]
        best = min(hs, key=hs.get)
        paper_best = min((h for h in hs if h in PAPER_OPTIMA), key=hs.get, default=None)
        gap = hs[paper_best] - hs[best] if paper_best is not None else math.nan
        parts.append(f"KV={kv}: best H={best} ({', '.join(f'H{h} {hs[h]:.3f}' for h in sorted(hs))})")
        if best in PAPER_OPTIMA:
            others = [hs[h] - hs[best] for h in hs if h not in PAPER_OPTIMA]
            verdicts.append(REPLICATED if others and min(others) > margin else INCONCLUSIVE)
        else:
            verdicts.append(NOT_REPLICATED if gap > margin else INCONCLUSIVE)
    verdict = (NOT_REPLICATED if all(v == NOT_REPLICATED for v in verdicts)
               else REPLICATED if all(v == REPLICATED for v in verdicts) else INCONCLUSIVE)
    note = (f"a difference counts when it exceeds 2*sqrt(2) x the seed sd of mhar H={plan.mhar_heads} "
            f"({sd:.3f} over {len(seeds)} seeds): {margin:.3f}")
    return Claim("optimum", "; ".join(parts), verdict, note)


def excess_claim(plan: Plan, probe: dict[str, dict[str, str]]) -> Claim:
    """Learned slice-KL excess of the single-head run over its random-query null (z over draws)."""
    col = next((c for c in probe.get("learned excess (trained - null)", {}) if "attnres" in c), None)
    if col is None:
        return Claim("excess", "no attnres column in probes/probe.csv", INCONCLUSIVE)
    excess = _float(probe["learned excess (trained - null)"][col])
    sd = _float(probe["random-query null (sd over draws)"][col])
    low, high = excess - 2 * sd, excess + 2 * sd
    verdict = side(-high, -low, 0.0)  # the paper's side is excess > 0
    return Claim("excess", f"{excess:.4f} [{low:.4f}, {high:.4f}] ({col}; null sd over draws {sd:.4f})",
                 verdict, "interval: excess +- 2 sd of the null over its random draws")


def _perhead_row(plan: Plan, perhead: dict[str, dict[str, str]]) -> tuple[str, dict[str, str]] | None:
    label = f"mhar H{plan.mhar_heads}"
    hits = [(k, v) for k, v in perhead.items() if k.endswith(label)]
    return hits[0] if hits else None


def deviation_claim(plan: Plan, perhead: dict[str, dict[str, str]]) -> Claim:
    """max |D| of the trained heads against the matched-norm random query's (z over draws)."""
    hit = _perhead_row(plan, perhead)
    if hit is None:
        return Claim("deviation", f"no mhar H{plan.mhar_heads} row in probes/perhead.csv", INCONCLUSIVE)
    name, row = hit
    ours, null, sd = _float(row["max |D|"]), _float(row["null max |D| (mean)"]), _float(row["null max |D| (sd)"])
    z = (ours - null) / sd if sd > 0 else math.nan
    verdict = INCONCLUSIVE if math.isnan(z) else REPLICATED if z > 2 else NOT_REPLICATED if z < -2 else INCONCLUSIVE
    return Claim("deviation", f"max |D| {ours:.3f} vs null {null:.3f} +- {sd:.3f} (z = {z:.1f}; {name})", verdict,
                 "z > 2: above the null; z < -2: below it")


def replication_claim(plan: Plan, perhead: dict[str, dict[str, str]]) -> Claim:
    """Replication r of the deviation map between document-disjoint halves, with a Fisher interval."""
    hit = _perhead_row(plan, perhead)
    if hit is None:
        return Claim("replication", f"no mhar H{plan.mhar_heads} row in probes/perhead.csv", INCONCLUSIVE)
    name, row = hit
    r, cells, halves = _float(row["replication r"]), int(_float(row["cells"])), row.get("replication halves", "")
    if halves != "documents":
        return Claim("replication", f"r = {r:.3f}, halves by {halves or 'unknown'} (not disjoint text)", INCONCLUSIVE)
    z, se = math.atanh(max(min(r, 0.999999), -0.999999)), 1 / math.sqrt(max(cells - 3, 1))
    low, high = math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)
    verdict = side(-high, -low, 0.0)
    return Claim("replication", f"r = {r:.3f} [{low:.3f}, {high:.3f}] over {cells} cells, halves by documents "
                 f"({name})", verdict, "Fisher interval over cells, which are not independent: optimistic")


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


def claims_of(plan: Plan, out: Path) -> list[Claim]:
    """Every claim, from the files under `out` (stats/, probes/, runs/)."""
    need = [out / "stats" / "tails.json", out / "stats" / "ceg.json", out / "probes" / "probe.csv",
            out / "probes" / "perhead.csv"]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise UserError(f"the claim table needs {', '.join(missing)}; run the probe and stats stages first")
    tails = json.loads(need[0].read_text())
    ceg = json.loads(need[1].read_text())
    probe, perhead = _read_csv(need[2]), _read_csv(need[3])
    grid_runs = _grid_runs(out / "runs")
    return [order_claim(plan, tails), optimum_claim(plan, grid_runs, tails), excess_claim(plan, probe),
            deviation_claim(plan, perhead), replication_claim(plan, perhead), ceg_claim(plan, ceg, tails)]


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
