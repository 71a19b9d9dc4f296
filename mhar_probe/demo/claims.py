"""The claim table: each paper claim a study's runs can test, our measurement with its interval,
and one of four verdicts.

    replicated                  the interval lies on the paper's side
    not replicated              the interval lies on the other side (the opposite holds)
    inconclusive at this scale  the interval straddles the line, or the runs cannot test it
    pending: needs rerun        the files lack what the test needs (too few null draws, a null
                                without halves, a finished run never captured): a capture on the
                                GPU machine, not a verdict
    pending: runs missing       runs the plan trains for this claim are not finished yet (a study
                                that fills call by call); the row names them and shows what the
                                runs present give, without a verdict

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
A plan may add rows (Plan.paper_deltas, Plan.spread_claims; the study at the paper's 100M shape):
  * the paper's Table-main delta of an arm beside ours, its tail-mean minus the same-seed baseline's
    (Student t over seeds; one seed: its value, "1 seed, no interval"); the verdict reads the sign;
  * per routed method, whether the queries left their zero initialisation (a uniform read): the
    depth-read spread, TV = 1/2 sum_n |w_n - 1/N| averaged over sites and heads, against the same
    for the matched-norm random queries (z, as the deviation claim), at the main seed.
  * across model scales (Plan.scale_rungs), whether MHAR's gain over the same-seed baseline grows
    from one scale to the next, as the paper's Table main has it from 100M to 350M (`scale_claim`);
  * (Plan.extra_claims) MHAR at the paper's over-split H above single-head at the main seed, read
    against the seed-to-seed margin of the optimum row (`over_split_claim`), and MHAR's gain over the
    baseline along training, at the quarters and across the tail window (`gain_path_claim`), and the McNemar
    pairs at every seed evaluated with the combined test over seeds (`mcnemar_claim`, stats/mcnemar_seeds.json).
A plan that trains fewer steps than the paper at its scale (Plan.paper_steps) says so in every row
that reads tail-mean losses (`schedule_clause`).
A study fills run by run: a claim whose planned runs are not finished is `pending: runs missing`,
names them and shows what the runs present give (`Study`, `held_back`).
Nothing here is tuned to the paper: the thresholds are fixed before the numbers are read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import UserError
from ..model.methods import run_label
from ..runfiles import RunFiles
from ..sweep.grid import format_lr
from ..tables import md_escape, md_row
from ..tail import TAIL_K
from .plan import Plan, evaluation_steps

REPLICATED, NOT_REPLICATED, INCONCLUSIVE = "replicated", "not replicated", "inconclusive at this scale"
PENDING = "pending: needs rerun"
PENDING_RUNS = "pending: runs missing"
VERDICTS = (REPLICATED, NOT_REPLICATED, INCONCLUSIVE, PENDING, PENDING_RUNS)
LEVEL = 0.95
#: the relative standard error allowed of the null's sd over its draws, 1/sqrt(2(n-1)) ...
NULL_SD_REL_SE = 0.10
#: ... hence the fewest draws a z against the null is read with (51)
MIN_NULL_DRAWS = math.ceil(1 + 1 / (2 * NULL_SD_REL_SE ** 2))
#: the null draws the advice to capture again names (>= MIN_NULL_DRAWS; what the GPU studies capture)
ADVISED_DRAWS = 64


def capture_command(plan: Plan, overwrite: bool = True) -> str:
    """The `mhar capture` call that gives a run of `plan` what its claims need: ADVISED_DRAWS null
    draws, on the plan's own held-out tokens (named when they are not `mhar capture`'s default, so
    that following the advice never changes what the capture reads)."""
    from ..capture.of_run import RunCapture

    tokens = "" if plan.capture_tokens == RunCapture.tokens else f" --tokens {plan.capture_tokens}"
    return f"`mhar capture RUN{' --overwrite' * overwrite} --draws {ADVISED_DRAWS}{tokens}`"


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
    paper: str = ""  # the paper's side, where it is not PAPER[key] (rows a plan adds)

    @property
    def claim(self) -> str:
        return self.paper or PAPER[self.key]


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


def order_deltas(base: dict[int, float], single: dict[int, float], multi: dict[int, float]
                 ) -> tuple[list[int], tuple[float, float, float], tuple[float, float, float], str]:
    """The order MHAR < AttnRes < baseline from per-seed losses: the seeds all three share, the t
    intervals (mean, low, high) of attnres - baseline and MHAR - attnres paired by seed (NaN bounds
    for one seed), and the verdict: both below 0 replicated, either above 0 not replicated."""
    seeds = sorted(set(base) & set(single) & set(multi))
    if not seeds:
        none = (math.nan, math.nan, math.nan)
        return seeds, none, none, INCONCLUSIVE
    d1 = _t_interval([single[s] - base[s] for s in seeds])
    d2 = _t_interval([multi[s] - single[s] for s in seeds])
    v1, v2 = side(d1[1], d1[2], 0.0), side(d2[1], d2[2], 0.0)
    verdict = (NOT_REPLICATED if NOT_REPLICATED in (v1, v2) else REPLICATED if v1 == v2 == REPLICATED
               else INCONCLUSIVE)
    return seeds, d1, d2, verdict


def order_claim(plan: Plan, tails: dict[str, Any]) -> Claim:
    """MHAR < AttnRes < baseline: paired per-seed deltas of tail-mean loss, both must be below 0."""
    kv = plan.main_kv
    seeds, d1, d2, verdict = order_deltas(_tail_means(tails, "baseline", None, kv),
                                          _tail_means(tails, "attnres", None, kv),
                                          _tail_means(tails, "mhar", plan.mhar_heads, kv))
    paper = ""
    if plan.paper_scale:  # the paper's two steps of the order at the plan's scale
        row = _paper_deltas(plan.paper_scale)
        d = row["deltas"]
        paper = (f"{PAPER['order']}; at {plan.paper_scale.upper()} attnres - baseline {d['attnres']:+.3f}, "
                 f"{run_label('mhar', row['mhar_H'])} - attnres {d['mhar'] - d['attnres']:+.3f}")
    if not seeds:
        return Claim("order", "no seed has baseline, attnres and mhar", INCONCLUSIVE, paper=paper)
    ours = (f"attnres - baseline {_fmt_interval(*d1)}; {run_label('mhar', plan.mhar_heads)} - attnres "
            f"{_fmt_interval(*d2)} ({len(seeds)} seeds, tail-mean loss)")
    return Claim("order", ours, verdict, "both deltas must be below 0; either one above 0 reverses the order", paper)


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
    if not grid:
        return Claim("optimum", "no KV value has >= 3 H (H = 1 is attnres) at the main seed", INCONCLUSIVE)
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
    one_kv = "; one KV value only (the paper's figure has several)" if len(grid) == 1 else ""
    note = (f"seed {plan.main_seed}{one_kv}; a gap counts when it exceeds the margin {margin:.3f} = "
            f"t(0.975, {len(deltas) - 1}) x "
            f"sd of the paired seed deltas {run_label('mhar', plan.mhar_heads)} - attnres ({spread})")
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


def _z_verdict(plan: Plan, reads: dict[int, NullRead], what: str) -> tuple[str, str]:
    """(verdict, note) of per-seed z: above the null in every seed (z > 2) or below it in every seed
    (z < -2); pending where a seed's null lacks values or has fewer than MIN_NULL_DRAWS draws."""
    lacking = [s for s, r in reads.items() if math.isnan(r.null_mean)]
    few = [s for s, r in reads.items() if r.draws < MIN_NULL_DRAWS and s not in lacking]
    rule = ("z = (trained - null mean) / null sd over draws; z > 2 in every seed: above the null, "
            "z < -2 in every seed: below")
    if lacking:
        return PENDING, (f"{rule}. Pending: the capture of seed(s) {', '.join(map(str, lacking))} has no {what}; "
                         f"capture again with >= {MIN_NULL_DRAWS} draws ({capture_command(plan)})")
    if few:
        draws = sorted({reads[s].draws for s in few})
        return PENDING, (f"{rule}. Pending: a stable z needs >= {MIN_NULL_DRAWS} null draws (sd within 10%); seed(s) "
                         f"{', '.join(map(str, few))} have {', '.join(map(str, draws))}: capture again "
                         f"({capture_command(plan)})")
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
        return Claim("deviation", f"no routing dataset of {run_label('mhar', plan.mhar_heads)}", INCONCLUSIVE)
    verdict, note = _z_verdict(plan, reads, "null draws")
    return Claim("deviation", f"max |D| of {run_label('mhar', plan.mhar_heads)}: {_per_seed(reads)}", verdict, note)


def replication_claim(plan: Plan, reads: dict[int, NullRead], halves: dict[int, str]) -> Claim:
    """Split-half r of the deviation map between document-disjoint halves against the same r of
    the random-query null's heads, every seed: the claim holds only where the trained r exceeds it."""
    if not reads:
        return Claim("replication", f"no routing dataset of {run_label('mhar', plan.mhar_heads)}", INCONCLUSIVE)
    shared = [s for s, h in halves.items() if h != "documents"]
    if shared:
        return Claim("replication", f"r by seed {_per_seed(reads)}; seed(s) {', '.join(map(str, shared))} split by "
                     f"{halves[shared[0]] or 'unknown'} (not disjoint text)", INCONCLUSIVE)
    verdict, note = _z_verdict(plan, reads, "null halves (null_weight_mean_half, recorded since issue 32)")
    return Claim("replication", f"split-half r (halves by documents) of {run_label('mhar', plan.mhar_heads)}: "
                 f"{_per_seed(reads)}", verdict, note)


def ceg_claim(plan: Plan, ceg: dict[str, Any], tails: dict[str, Any], study: "Study") -> Claim:
    """MHAR's (the plan's H) compute-equivalent gain over the baseline, read so that it can fail.

    CEG = (L_b / L_m)^(1/alpha) / (F_m / F_b): the compute the baseline's loss-compute fit L = A C^-alpha
    needs to reach MHAR's loss, over the baseline's, with MHAR's extra FLOPs per run divided out (F
    from each run's summary), as the paper's CEG counts them. L_b is the seed mean of the baseline's
    tail-mean loss, L_m = L_b + the seed-mean paired gain, and the gain's Student t interval over
    seeds gives the CEG's interval. The verdict reads the study's own exponent (the envelope fit of
    stats/ceg.json): replicated when that interval overlaps the paper's 1.15-2.6x, not replicated when
    it lies wholly outside, inconclusive with one seed (no interval) or a gain the seeds cannot tell
    from zero. The paper's exponents (alpha 0.089, 0.15) are shown beside it, not judged."""
    what = run_label("mhar", plan.mhar_heads)
    alpha = ceg.get("alphas", {}).get("envelope")
    if alpha is None:
        return Claim("ceg", "no envelope fit in stats/ceg.json (the study's own exponent)", INCONCLUSIVE)
    base = _tail_means(tails, "baseline", None, plan.main_kv)
    multi = _tail_means(tails, "mhar", plan.mhar_heads, plan.main_kv)
    seeds = sorted(set(base) & set(multi))
    if not seeds:
        return Claim("ceg", f"no seed has both {what} and the baseline", INCONCLUSIVE)
    mean, low, high = _t_interval([multi[s] - base[s] for s in seeds])
    flops = _flops_ratio(study, seeds)
    if flops is None:
        return Claim("ceg", f"no seed's {what} and baseline runs both record their FLOPs (summary.json flops)",
                     INCONCLUSIVE)
    base_loss = sum(base[s] for s in seeds) / len(seeds)

    def gain_at(delta: float, a: float) -> float:
        return (base_loss / (base_loss + delta)) ** (1 / a) / flops

    lo, hi = PAPER_CEG_BRACKET
    at = f"{gain_at(mean, alpha):.2f}x"
    if not math.isnan(low):
        at += f" [{gain_at(high, alpha):.2f}x, {gain_at(low, alpha):.2f}x]"
    others = ", ".join(f"{k} {gain_at(mean, a):.2f}x" for k, a in ceg["alphas"].items() if k != "envelope")
    ours = (f"study exponent (envelope alpha {alpha:.3f}): {at} from the loss gain over {len(seeds)} seed(s) "
            f"{_fmt_interval(mean, low, high)}, {what}'s FLOPs divided out ({flops:.3f}x the baseline's); "
            f"the paper's exponents (secondary): {others}")
    gain = side(low, high, 0.0)
    if gain != REPLICATED:
        verdict = NOT_REPLICATED if gain == NOT_REPLICATED else INCONCLUSIVE
    elif gain_at(low, alpha) < lo or gain_at(high, alpha) > hi:
        verdict = NOT_REPLICATED
    else:
        verdict = REPLICATED
    note = ("CEG = (L_b / L_m)^(1/alpha) / (F_m / F_b) at the seed-mean losses, its interval from the paired gain's "
            "t interval; verdict at the study's own exponent: replicated when the interval overlaps 1.15-2.6x, "
            "not replicated when wholly outside, inconclusive with one seed or a gain not told from zero")
    pairs = {**_labelled(study, "baseline", None, seeds), **_labelled(study, "mhar", plan.mhar_heads, seeds)}
    return Claim("ceg", ours, verdict, _with_origin(note, pairs))


def schedule_clause(plan: Plan) -> str:
    """Where the plan trains fewer steps than the paper at its scale (`Plan.paper_steps`), what a row
    that reads tail-mean losses says of it ("" where the lengths agree or the paper's is not given)."""
    if plan.paper_steps is None or plan.steps >= plan.paper_steps:
        return ""
    evals = evaluation_steps(plan.steps, plan.recipe.get("eval_every", 25))
    return (f"Depends on the shorter schedule: read at {plan.steps:,} of the paper's {plan.paper_steps:,} steps "
            f"(tail-mean over steps {evals[-TAIL_K]:,}-{plan.steps:,}), so a gain still changing when training stops "
            f"would read differently at the paper's length (its path: stats/gain_curves.md)")


#: the rows that read tail-mean losses (and so the length of training), beside every delta_* row
SCHEDULE_ROWS = ("order", "optimum", "ceg", "over_split", "gain_path")


def with_schedule(plan: Plan, claim: Claim) -> Claim:
    """`claim` with `schedule_clause` after its note, where it reads tail-mean losses."""
    clause = schedule_clause(plan)
    if not clause or not (claim.key in SCHEDULE_ROWS or claim.key.startswith("delta_")):
        return claim
    note = f"{claim.note.rstrip('.')}. {clause}" if claim.note else clause
    return Claim(claim.key, claim.ours, claim.verdict, note, claim.paper)


def over_split_claim(plan: Plan, study: "Study", tails: dict[str, Any]) -> Claim:
    """MHAR at the paper's over-split H (Table main's "MHAR (H=16)", twice the KV heads) above
    single-head attnres, at the main seed: the plan trains that H at one seed (its extra grid), so the
    seed's difference counts when it exceeds `optimum_margin` (t_{0.975, n-1} x the sd of the paired
    seed deltas mhar at the plan's H - attnres, the seed-to-seed spread of a difference between two H
    arms), as the optimum row reads one seed's differences."""
    row = _paper_deltas(plan.paper_scale or plan.preset)
    over, seed = row["over_H"], plan.main_seed
    what = run_label("mhar", over)
    paper_gap = row["deltas"]["mhar_over"] - row["deltas"]["attnres"]
    paper = (f"{what} lands above single-head: {what} - attnres = {paper_gap:+.3f} at {row['scale'].upper()} "
             f"({row['deltas']['mhar_over']:+.3f} against {row['deltas']['attnres']:+.3f} vs the baseline; Table main, "
             f"one seed, 20K steps): over-splitting")
    single = _tail_means(tails, "attnres", None, plan.main_kv)
    multi = _tail_means(tails, "mhar", over, plan.main_kv)
    margin, deltas = optimum_margin(plan, tails)
    if seed in single and seed in multi:
        gap = multi[seed] - single[seed]
        ours = f"{what} - attnres {gap:+.3f} (seed {seed} only: the plan trains {what} at one seed)"
        if math.isnan(margin):
            verdict = INCONCLUSIVE
            ours += f"; no margin yet (needs {run_label('mhar', plan.mhar_heads)} - attnres at two or more seeds)"
        else:
            verdict = REPLICATED if gap > margin else NOT_REPLICATED if gap < -margin else INCONCLUSIVE
            ours += f"; margin {margin:.3f}"
    else:
        ours, verdict = f"no seed-{seed} pair of {what} and attnres yet", INCONCLUSIVE
    spread = ", ".join(f"{d:+.3f}" for d in deltas)
    note = (f"seed {seed} only; replicated: {what} - attnres above the margin; not replicated: below minus the margin "
            f"(the margin: t(0.975, n-1) x the sd of the paired seed deltas {run_label('mhar', plan.mhar_heads)} - attnres"
            + (f", {spread})" if deltas else ")"))
    note = _with_origin(note, {**_labelled(study, "attnres", None, [seed]), **_labelled(study, "mhar", over, [seed])})
    missing = study.missing("mhar", over, {seed}) + study.missing("attnres") + study.missing("mhar", plan.mhar_heads)
    return held_back(Claim("over_split", ours, verdict, note, paper), missing)


def _quarter_steps(steps: list[int], last: int) -> list[int]:
    """The evaluation steps nearest a quarter, half, three quarters and all of `last` steps."""
    return sorted({min(steps, key=lambda s: abs(s - q * last / 4)) for q in (1, 2, 3, 4)})


def gain_path_claim(plan: Plan, study: "Study", gains: dict[str, Any] | None) -> Claim:
    """MHAR's (the plan's H) gain over the baseline along training, from stats/gain_curves.json: the
    paired delta at a quarter, half, three quarters and the end of training with its t interval over
    seeds, and its change across the tail-mean window (per seed, delta at the last evaluation minus at
    the window's first; t interval). Verdict on the last evaluation's interval (below 0: replicated);
    the paper reports the end of training only."""
    h, kv = plan.mhar_heads, plan.main_kv
    what = run_label("mhar", h)
    row = _paper_deltas(plan.paper_scale or plan.preset)
    paper = (f"{what} - baseline = {row['deltas']['mhar']:+.3f} at {row['scale'].upper()} at the end of training "
             f"(Table main; one seed, 20K steps; the paper gives the end only)")
    curves = {c["reference"]: c for c in (gains or {}).get("curves", [])
              if c["method"] == "mhar" and c["H"] == h and (kv is None or c["kv"] == kv)}
    missing = study.missing("baseline") + study.missing("mhar", h)
    base = curves.get("baseline")
    if base is None:
        ours, verdict = f"no seed has both {what} and the baseline yet", INCONCLUSIVE
    else:
        steps = base["steps"]
        one = base["n"] == 1

        def value(mean: float, low: float, high: float) -> str:
            return f"{mean:+.3f}" if one else _fmt_interval(mean, low, high)

        seeds = f"seed {base['seeds'][0]}; one seed, no interval" if one else f"{base['n']} seeds"
        ours = f"{what} - baseline ({seeds}) at step " + "; ".join(
            f"{s:,} {value(*(base[k][steps.index(s)] for k in ('mean', 'low', 'high')))}"
            for s in _quarter_steps(steps, steps[-1]))
        if len(steps) > TAIL_K:  # the tail-mean window of the curve: its last TAIL_K evaluations
            first = steps[-TAIL_K]
            drift = _t_interval([d[-1] - d[-TAIL_K] for d in base["deltas"]])
            ours += f"; change over the tail window (step {first:,} -> {steps[-1]:,}) {value(*drift)}"
        single = curves.get("attnres")
        if single is not None:
            ours += f"; {what} - attnres at step {single['steps'][-1]:,} " + value(
                single["mean"][-1], single["low"][-1], single["high"][-1])
        verdict = side(base["low"][-1], base["high"][-1], 0.0)
    note = ("paired held-out loss delta at every evaluation (stats/gain_curves.json, figure gain_curve), mean over "
            "seeds with a 95% t interval; replicated: the last evaluation's interval below 0, not replicated: above 0; "
            "the change over the tail window says whether the gain still moves when training stops")
    return held_back(Claim("gain_path", ours, verdict, note, paper), missing)


#: the family-wise level the McNemar row reads its Holm-adjusted combined p-values at
MCNEMAR_ALPHA = 0.05


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _mcnemar_task(pair: dict[str, Any], across: dict[str, Any], pending: list[int]) -> str:
    """One pair's task across its seeds: each seed's acc B - acc A [interval], b/c, exact p; the pending seeds;
    then how many seeds favour each side and the combined test ('seed S only' where one seed is in)."""
    key = (across["task"], across["filter"], across["metric"])
    seeds = [f"seed {t['seed']} {r['delta']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] b/c {r['b']}/{r['c']} "
             f"p {_p(r['p_value'])}" for t in pair["tables"] for r in t["rows"]
             if (r["task"], r["filter"], r["metric"]) == key]
    only = f" (seed {across['seeds'][0]} only)" if len(across["seeds"]) == 1 else ""
    text = f"{across['task']} {across['metric']}{only}: " + "; ".join(seeds + [f"seed {s} pending" for s in pending])
    if only:
        return text
    return (text + f"; {across['favour_b']} of {len(across['seeds'])} seeds favour {pair['label_b']}, "
            f"{across['favour_a']} {pair['label_a']}; over seeds b/c {across['b']}/{across['c']}, exact p "
            f"{_p(across['p_exact'])}, items clustered p {_p(across.get('p_items'))} (Holm {_p(across['p_holm'])})")


def mcnemar_missing(plan: Plan, study: "Study") -> list[str]:
    """Labels of the planned runs of the McNemar pairs, at every seed each pair is tested at, not finished."""
    return list(dict.fromkeys(x for a, b in plan.mcnemar_pairs for seed in plan.mcnemar_seeds(a, b) for m in (a, b)
                              for x in study.missing(m, plan.mhar_heads if m == "mhar" else None, {seed})))


def mcnemar_claim(plan: Plan, study: "Study", doc: dict[str, Any] | None) -> Claim:
    """The plan's McNemar pairs (B: the MHAR arm) at every seed they are tested at (stats/mcnemar_seeds.json,
    analysis.stats.mcnemar_seeds): per pair and task each seed's acc B - acc A with its bootstrap interval,
    b/c and exact p, and across the seeds in how many favour each side, the combined test (CMH over seeds
    as strata: McNemar on the pooled b, c) and the item-clustered sign-flip test the verdict reads (Holm
    over every pair and task). Verdict, fixed before reading:
    replicated when some combined Holm p < MCNEMAR_ALPHA favours B (c > b) and none favours A; not replicated
    when some favours A and none B; else inconclusive. Pending while a planned run is missing (named), and
    'needs rerun' while a finished run has no evaluation (named)."""
    from figures.context import load_paper_values

    rows = {r["task"]: r for r in load_paper_values()["midtrain"]["rows"] if "b" in r}
    paper = ("+MHAR against a schedule-matched control, paired per-item exact McNemar (8B mid-training, Table "
             "midtrain): " + ", ".join(f"{t.upper()} {100 * (r['mhar'] - r['control']):+.1f} ({r['c']} vs {r['b']} "
                                       f"discordant, p = {r['p']})" for t, r in rows.items())
             + ", the other tasks unchanged; at 350M the paper reports held-out loss only")
    missing = mcnemar_missing(plan, study)
    parts, unevaluated, favour = [], [], {"a": 0, "b": 0}
    for pair in (doc or {}).get("pairs", []):
        pending = [x["seed"] for x in pair["pending"]]
        unevaluated += [u for x in pair["pending"] for u in x["unevaluated"]]
        tasks = [_mcnemar_task(pair, row, pending) for row in pair["across"]]
        for row in pair["across"]:
            if row["p_holm"] < MCNEMAR_ALPHA:  # (b = c gives p = 1)
                favour["b" if row["c"] > row["b"] else "a"] += 1
        parts.append(f"{pair['label_b']} vs {pair['label_a']}: " + (" | ".join(tasks) if tasks else
                                                                     "no seed in yet (seeds " + ", ".join(
                                                                         map(str, pending)) + " pending)"))
    ours = "; ".join(parts) if parts else "no stats/mcnemar_seeds.json (its runs are missing)"
    if not any(pair["across"] for pair in (doc or {}).get("pairs", [])):
        verdict = INCONCLUSIVE
    elif favour["b"] and not favour["a"]:
        verdict = REPLICATED
    elif favour["a"] and not favour["b"]:
        verdict = NOT_REPLICATED
    else:
        verdict = INCONCLUSIVE
    note = (f"per seed: acc B - acc A on the held-out tasks with its paired bootstrap 95% interval, exact McNemar p; "
            f"over seeds: CMH with the seeds as strata (McNemar on the pooled b, c), exact p, and, since the seeds "
            f"share their items, the item-clustered sign-flip test (d = sum over seeds of B right - A right per item) "
            f"that the verdict reads, Holm over every pair and task (stats/mcnemar_seeds.md); replicated: some Holm p "
            f"< {MCNEMAR_ALPHA} in favour of the MHAR arm and none against it, not replicated: the reverse")
    if plan.paper_steps is not None and plan.steps < plan.paper_steps:
        note += (f". Depends on the shorter schedule: the final checkpoint at {plan.steps:,} of the paper's "
                 f"{plan.paper_steps:,} steps is evaluated")
    if unevaluated:  # a finished run's evaluation is made in the call that trains it: a rerun
        lacking = "finished, not evaluated: " + ", ".join(dict.fromkeys(unevaluated))
        if not missing:
            return Claim("mcnemar", ours, PENDING, f"{lacking}. Then: {note}", paper)
        note = f"{lacking}; {note}"
    return held_back(Claim("mcnemar", ours, verdict, note, paper), missing)


def _flops_ratio(study: "Study", seeds: list[int]) -> float | None:
    """Seed mean of MHAR's training FLOPs over the same-seed baseline's (summary.json ``flops``);
    None where no seed has both."""
    flops = {path: RunFiles(path).summary().get("flops") for path in study.present.values()}
    ratios = []
    for s in seeds:
        multi = [flops[p] for p in _labelled(study, "mhar", study.plan.mhar_heads, [s]).values() if flops[p]]
        base = [flops[p] for p in _labelled(study, "baseline", None, [s]).values() if flops[p]]
        if multi and base:
            ratios.append(multi[0] / base[0])
    return sum(ratios) / len(ratios) if ratios else None


def _labelled(study: "Study", method: str, heads: int | None, seeds: list[int]) -> dict[str, Path]:
    """The finished runs of `method` (at H `heads`, the plan's KV) of `seeds`, by their label."""
    kv = study.plan.main_kv
    return {label(m, h, k, s): path for (m, h, k, s), path in study.present.items()
            if m == method and (heads is None or h == heads) and (kv is None or k == kv) and s in seeds}


def _with_origin(note: str, runs: dict[str, Path]) -> str:
    """`note`, then where the paired runs differ in card or commit (`run_origin.pair_note`)."""
    from .run_origin import pair_note

    differs = pair_note(runs)
    return f"{note}. {differs[0].upper()}{differs[1:]}" if differs else note


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
    from .runs import finished, swept_so_far

    out = SeedProbes({}, {}, {}, {})
    for r in finished(swept_so_far(runs)):
        path = RunFiles(r.path).routing_path
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


#: any H (a `Study.missing` filter that leaves H open)
ANY = object()


@dataclass
class Study:
    """What the plan trains into OUT/runs against what is finished there, so that a claim whose runs
    are missing is held back (pending) and names them."""

    plan: Plan
    planned: list[tuple[str, int | None, int, int]]  # (method, H, KV, seed) of every planned run
    present: dict[tuple[str, int | None, int | None, int], Path]  # finished runs: key -> run folder

    @classmethod
    def read(cls, plan: Plan, runs: Path) -> "Study":
        """The plan's runs at its own rate and length (a grid with its own steps or rates, the lr
        sweep or the best-vs-best rate, trains into a folder of its own) and the finished ones."""
        from .runs import finished, swept_runs

        present = {(r.method, r.heads, r.kv, r.seed): r.path for r in finished(swept_runs(runs))}
        return cls(plan, cls.planned_runs(plan), present)

    @classmethod
    def so_far(cls, plan: Plan, runs: Path) -> "Study":
        """`read`, or before the study's first run (no runs/manifest.json yet) every planned run missing."""
        if (runs / "manifest.json").is_file():
            return cls.read(plan, runs)
        return cls(plan, cls.planned_runs(plan), {})

    @staticmethod
    def planned_runs(plan: Plan) -> list[tuple[str, int | None, int, int]]:
        """(method, H, KV, seed) of every run the plan trains into OUT/runs at its own rate and length."""
        lr = plan.recipe["lr"]
        return [(s.method, s.H, s.kv, s.seed) for axes in plan.grids.values()
                if "steps" not in axes and all(x == lr for x in axes.get("lrs", [lr]))
                for s in plan.grid(axes).expand()]

    def arms(self, method: str, heads: Any = ANY, seeds: set[int] | None = None, any_kv: bool = False
             ) -> list[tuple[str, int | None, int, int]]:
        """The planned runs of `method` (at H `heads`, the plan's KV unless `any_kv`, `seeds`)."""
        kv = self.plan.main_kv
        return [a for a in self.planned if a[0] == method and (heads is ANY or a[1] == heads)
                and (any_kv or kv is None or a[2] == kv) and (seeds is None or a[3] in seeds)]

    def missing(self, method: str, heads: Any = ANY, seeds: set[int] | None = None, any_kv: bool = False
                ) -> list[str]:
        """Labels of the planned runs of `method` that are not finished."""
        return [label(*a) for a in self.arms(method, heads, seeds, any_kv) if a not in self.present]

    def uncaptured(self, method: str, heads: Any = ANY, seeds: set[int] | None = None) -> list[str]:
        """Labels of finished planned runs of `method` without a routing dataset."""
        return [label(*a) for a in self.arms(method, heads, seeds)
                if a in self.present and not RunFiles(self.present[a]).routing_path.is_file()]

    def seeds(self, method: str, heads: Any = ANY) -> set[int]:
        return {a[3] for a in self.arms(method, heads)}

    @property
    def probe_seeds(self) -> set[int] | None:
        """The seeds whose routed runs the plan captures (None: every seed)."""
        return None if self.plan.capture_all_seeds else {self.plan.main_seed}


def label(method: str, heads: int | None, kv: int | None, seed: int) -> str:
    """'mhar H=8 seed 1': a run as the claim table names it."""
    return f"{run_label(method, heads)} seed {seed}"


def held_back(claim: Claim, missing: Sequence[str], uncaptured: Sequence[str] = (), plan: Plan | None = None
              ) -> Claim:
    """`claim` with its verdict held back while planned runs are missing (pending: runs missing) or
    finished runs lack their routing dataset (pending: needs rerun: `plan`'s capture command); its
    `ours` keeps what the runs present give."""
    if missing:
        return Claim(claim.key, claim.ours, PENDING_RUNS, f"runs missing: {', '.join(missing)}"
                     + (f". When in: {claim.note}" if claim.note else ""), claim.paper)
    if uncaptured:
        how = capture_command(plan, overwrite=False) if plan is not None else f"`mhar capture RUN --draws {ADVISED_DRAWS}`"
        return Claim(claim.key, claim.ours, PENDING, f"not captured: {', '.join(uncaptured)} ({how})"
                     + (f". Then: {claim.note}" if claim.note else ""), claim.paper)
    return claim


def _runs_or_stats(path: Path, missing: list[str]) -> dict[str, Any] | None:
    """stats/<what>.json, or None when it is absent because runs are missing (the stats stage
    skipped it); absent with every run present is an error: the stats stage has not run."""
    if path.exists():
        return json.loads(path.read_text())
    if missing:
        return None
    raise UserError(f"the claim table needs {path}; run the stats stage first")


def claims_of(plan: Plan, out: Path) -> list[Claim]:
    """Every claim, from the files under `out` (stats/, runs/ with their routing datasets); a claim
    whose runs are not all finished is pending and names them."""
    study = Study.so_far(plan, out / "runs")
    h, main = plan.mhar_heads, {plan.main_seed}
    miss_order = study.missing("baseline") + study.missing("attnres") + study.missing("mhar", h)
    miss_optimum = (study.missing("attnres", seeds=main, any_kv=True)
                    + study.missing("mhar", seeds=main, any_kv=True))
    miss_ceg = study.missing("baseline") + study.missing("mhar", h)
    probe = study.probe_seeds
    tails = _runs_or_stats(out / "stats" / "tails.json", miss_order + miss_ceg)
    ceg = _runs_or_stats(out / "stats" / "ceg.json", miss_ceg)
    none = {"runs": []}
    grid_runs = _grid_runs(out / "runs")
    seeds = seed_probes(plan, out / "runs")
    core = [
        held_back(order_claim(plan, tails or none), miss_order),
        held_back(optimum_claim(plan, grid_runs, tails or none), miss_optimum),
        held_back(excess_claim(plan, seeds.excess), study.missing("attnres", seeds=probe),
                  study.uncaptured("attnres", seeds=probe), plan),
        held_back(deviation_claim(plan, seeds.deviation), study.missing("mhar", h, probe),
                  study.uncaptured("mhar", h, probe), plan),
        held_back(replication_claim(plan, seeds.replication, seeds.halves), study.missing("mhar", h, probe),
                  study.uncaptured("mhar", h, probe), plan),
        held_back(ceg_claim(plan, ceg, tails or none, study) if ceg is not None
                  else Claim("ceg", "no stats/ceg.json (its runs are missing)", INCONCLUSIVE), miss_ceg),
    ]
    claims = [c for c in core if c.key in plan.core_claims]
    claims += [delta_claim(plan, study, tails or none, method, heads, key)
               for method, heads, key in plan.paper_deltas]
    if "over_split" in plan.extra_claims:
        claims.append(over_split_claim(plan, study, tails or none))
    if "gain_path" in plan.extra_claims:
        claims.append(gain_path_claim(plan, study, _runs_or_stats(out / "stats" / "gain_curves.json", miss_ceg)))
    if "mcnemar" in plan.extra_claims:
        seeds_doc = _runs_or_stats(out / "stats" / "mcnemar_seeds.json", mcnemar_missing(plan, study))
        claims.append(mcnemar_claim(plan, study, seeds_doc))
    if plan.spread_claims:
        claims += spread_claims(plan, study)
    if plan.width_rungs:
        claims.append(width_claim([WidthRung.read(name, out / folder) for name, folder in plan.width_rungs]))
    if plan.scale_rungs:
        claims.append(scale_claim([ScaleRung.read(name, out, folder) for name, folder in plan.scale_rungs]))
    if plan.second_rate:
        folder, grid = plan.second_rate
        claims.append(second_rate_claim(plan, grid, grid_runs, _grid_runs(out / folder / "runs")
                                        if (out / folder / "runs" / "manifest.json").is_file() else []))
    return [with_schedule(plan, c) for c in claims]


def second_rate_claim(plan: Plan, grid: str, main_runs: list[dict[str, Any]], second_runs: list[dict[str, Any]]
                      ) -> Claim:
    """The order MHAR < AttnRes < baseline in loss with each method at its own best of two rates
    (the paper's tab:lrsweep reads each method at its best rate): per method and seed, the lower
    tail-mean loss of the plan's rate and the second rate, then `order_deltas` of those bests. One
    seed gives values without an interval (inconclusive); pending while a planned run is missing."""
    axes = plan.grids[grid]
    rate, second = plan.recipe["lr"], axes["lrs"][0]
    kv = plan.main_kv
    paper = ("the order holds with each method at its own best learning rate (tab:lrsweep: best-vs-best), "
             "so that it is not an artifact of one shared rate")

    def heads(method: str) -> int | None:
        return plan.mhar_heads if method == "mhar" else None

    def tails(rows: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
        return {(r["method"], r["seed"]): r["tail_mean"] for r in rows if r["kv"] == kv
                and r["method"] in ("baseline", "attnres", "mhar") and (r["method"] != "mhar" or r["H"] == plan.mhar_heads)}

    at_rate, at_second = tails(main_runs), tails(second_runs)
    planned = [(m, s) for m in axes["methods"] for s in axes["seeds"]]
    missing = [f"{label(m, heads(m), kv, s)} at lr {format_lr(lr)}" for lr, have in ((second, at_second), (rate, at_rate))
               for m, s in planned if (m, s) not in have]
    parts, best = [], {m: {} for m in ("baseline", "attnres", "mhar")}
    for m, s in planned:
        a, b = at_rate.get((m, s)), at_second.get((m, s))
        if a is not None and b is not None:
            best[m][s] = min(a, b)
            parts.append(f"{run_label(m, heads(m))} seed {s}: {format_lr(rate)} {a:.4f}, {format_lr(second)} {b:.4f} "
                         f"(best {format_lr(rate if a <= b else second)})")
    seeds, d1, d2, verdict = order_deltas(best["baseline"], best["attnres"], best["mhar"])
    if seeds:  # (no seed with all three: inconclusive, the values above only)
        parts.append(f"best attnres - best baseline {_fmt_interval(*d1)}; best {run_label('mhar', plan.mhar_heads)} "
                     f"- best attnres {_fmt_interval(*d2)} " + (f"({len(seeds)} seeds)" if len(seeds) > 1 else f"(seed {seeds[0]})"))
    if not parts:
        parts.append("no method has runs at both rates yet")
    note = (f"each method's lower tail-mean loss of lr {format_lr(rate)} (the study's shared rate) and "
            f"{format_lr(second)}, same seed; replicated: both best-vs-best deltas below 0 over seeds (an interval); "
            "one seed gives the values only")
    return held_back(Claim("second_rate", "; ".join(parts), verdict, note, paper), missing)


@dataclass
class WidthRung:
    """One plan's paired per-seed deltas, tail-mean loss of mhar at its H minus attnres at its KV,
    with the width of its routing heads (d / H) and the planned runs not finished yet."""

    name: str
    width: int | None  # channels per routing head; None: no finished run to read it from
    deltas: dict[int, float]  # seed -> mhar - attnres
    missing: list[str]

    @classmethod
    def read(cls, name: str, out: Path) -> "WidthRung":
        from .plan import PLANS

        plan = PLANS[name]
        if not (out / "runs" / "manifest.json").is_file():
            return cls(name, None, {}, [f"no runs under {out}"])
        study = Study.read(plan, out / "runs")
        h, kv = plan.mhar_heads, plan.main_kv
        tails = {(r["method"], r["seed"]): r["tail_mean"] for r in _grid_runs(out / "runs")
                 if r["kv"] == kv and (r["method"] == "attnres" or (r["method"] == "mhar" and r["H"] == h))}
        seeds = sorted({s for m, s in tails if m == "attnres"} & {s for m, s in tails if m == "mhar"})
        width = None
        for key, path in study.present.items():
            config = json.loads((path / "config.json").read_text())
            width = config["hidden_size"] // h
            break
        return cls(name, width, {s: tails["mhar", s] - tails["attnres", s] for s in seeds},
                   study.missing("attnres") + study.missing("mhar", h))


def width_claim(rungs: list[WidthRung]) -> Claim:
    """MHAR - attnres (paired per seed) at each routing-head width, and the slope of those deltas
    over log2(width): ordinary least squares over every (rung, seed) point, a Student t interval
    with n - 2 degrees of freedom. Replicated only if that interval lies below 0 and the seed-mean
    delta also falls at every step between adjacent widths. The paper trains 64-channel heads only; the hypothesis read here
    (issue 33, from the ladder's 16-channel heads) is that narrow heads cost MHAR, i.e. slope < 0.
    Pending while a rung's planned runs are missing; the rungs present are shown."""
    from scipy import stats

    paper = ("(not the paper's: issue 33's reading of the ladder) MHAR's loss against single-head falls as "
             "routing heads widen, 16 -> 32 -> 64 channels (the paper trains 64)")
    parts = []
    for r in rungs:
        where = f"{r.width}-ch {r.name}" if r.width else r.name
        if r.deltas:
            mean, low, high = _t_interval(list(r.deltas.values()))
            parts.append(f"{where} {_fmt_interval(mean, low, high)} ({len(r.deltas)} seeds)")
        else:
            parts.append(f"{where}: no seed has both arms yet")
    x = [math.log2(r.width) for r in rungs if r.width for _ in r.deltas]
    y = [d for r in rungs if r.width for d in r.deltas.values()]
    rule = ("slope of the paired deltas over log2(width), OLS over every (rung, seed) point, t interval "
            "n - 2 df; replicated: below 0 (wider heads favour MHAR) and the mean delta falls at every step between "
            "adjacent widths (a slope carried by one rung is inconclusive); not replicated: above 0. The rungs differ in "
            "more than head width (model width and depth, tokens per parameter, corpus, step): read the slope as "
            "across these three studies, not as head width alone")
    if len(set(x)) >= 2 and len(x) >= 3:
        fit = stats.linregress(x, y)
        t = stats.t.ppf(0.5 + LEVEL / 2, len(x) - 2)
        low, high = fit.slope - t * fit.stderr, fit.slope + t * fit.stderr
        parts.append(f"slope per doubling {fit.slope:+.3f} [{low:+.3f}, {high:+.3f}]")
        verdict = side(low, high, 0.0)
        means = [(r.width, sum(r.deltas.values()) / len(r.deltas)) for r in sorted(rungs, key=lambda r: r.width or 0)
                 if r.width and r.deltas]
        steps = [(a[0], b[0], b[1] - a[1]) for a, b in zip(means, means[1:])]
        parts.append("step by step " + ", ".join(f"{a}->{b} {d:+.3f}" for a, b, d in steps))
        if verdict == REPLICATED and any(d >= 0 for _, _, d in steps):
            verdict = INCONCLUSIVE  # a fall carried by one rung is not a fall "as heads widen"
    else:
        parts.append("slope: fewer than two widths with pairs")
        verdict = INCONCLUSIVE
    missing = [f"{r.name}: {m}" for r in rungs for m in r.missing]
    return held_back(Claim("width", "; ".join(parts), verdict, rule, paper), missing)


@dataclass
class ScaleRung:
    """One plan's per-seed gains at one model scale, tail-mean loss of MHAR at the plan's H minus the
    same-seed baseline at its KV, with what its runs saw (read from the baseline's summary) and the
    planned runs not finished yet."""

    name: str
    scale: str  # the paper's scale the plan is read at (a key of figures/paper_values.json main.rows)
    deltas: dict[int, float]  # seed -> mhar - baseline
    missing: list[str]
    tokens: int | None = None  # per run
    parameters: int | None = None  # the baseline's
    epochs: float | None = None
    width: int | None = None  # channels per routing head, d / H
    kv: int | None = None  # the plan's KV heads
    runs: dict[str, Path] | None = None  # the paired runs' folders, by label

    @classmethod
    def read(cls, name: str, out: Path, folder: str) -> "ScaleRung":
        """The rung of plan `name` from its results folder `out / folder` (no runs there yet: every
        planned run missing; `folder` names it in the claim table, relative to `out`)."""
        from .plan import PLANS

        plan = PLANS[name]
        scale = plan.paper_scale or plan.preset
        runs = out / folder / "runs"
        h, kv = plan.mhar_heads, plan.main_kv
        study, rows = Study.so_far(plan, runs), _grid_runs(runs)
        tails = {(r["method"], r["seed"]): r["tail_mean"] for r in rows
                 if r["kv"] == kv and (r["method"] == "baseline" or (r["method"] == "mhar" and r["H"] == h))}
        seeds = sorted({s for m, s in tails if m == "baseline"} & {s for m, s in tails if m == "mhar"})
        missing = study.missing("baseline") + study.missing("mhar", h)
        if missing and not rows:
            missing = [f"{', '.join(missing)} (no runs in {folder})"]
        rung = cls(name, scale, {s: tails["mhar", s] - tails["baseline", s] for s in seeds}, missing, kv=kv,
                   runs={f"{name} {k}": v for k, v in {**_labelled(study, "baseline", None, seeds),
                                                       **_labelled(study, "mhar", h, seeds)}.items()})
        for (method, heads, run_kv, _), path in sorted(study.present.items(), key=lambda kv_: kv_[0][3]):
            if method == "baseline" and run_kv == kv:
                summary = RunFiles(path).summary()
                rung.tokens, rung.parameters = summary.get("tokens"), summary.get("parameters")
                rung.epochs = summary.get("epochs")
                rung.width = json.loads((path / "config.json").read_text())["hidden_size"] // h
                break
        return rung

    def describe(self) -> str:
        """'100M (study100m: 64-ch routing heads at KV 4, 250.0M tokens = 5.96 per parameter, 5.73 epochs)'."""
        seen = []
        if self.width:
            seen.append(f"{self.width}-ch routing heads" + (f" at KV {self.kv}" if self.kv else ""))
        if self.tokens and self.parameters:
            seen.append(f"{self.tokens / 1e6:.1f}M tokens = {self.tokens / self.parameters:.2f} per parameter")
        if self.epochs:
            seen.append(f"{self.epochs:.2f} epochs")
        return f"{self.scale.upper()} ({self.name}" + (f": {', '.join(seen)})" if seen else ")")


def scale_step(a: ScaleRung, b: ScaleRung) -> tuple[float, float, float]:
    """(difference, low, high): mean gain at scale b minus mean gain at scale a, a Student t interval
    with the pooled sd of the two scales' per-seed gains, s_p^2 = sum_i (n_i - 1) s_i^2 / (n_a + n_b - 2),
    half-width t(0.975, n_a + n_b - 2) s_p sqrt(1/n_a + 1/n_b). A scale of one seed adds no spread of
    its own, so its seed is taken to vary as the other scale's do; NaN bounds when neither has two."""
    from scipy import stats

    xa, xb = list(a.deltas.values()), list(b.deltas.values())
    diff = sum(xb) / len(xb) - sum(xa) / len(xa)
    df = len(xa) + len(xb) - 2
    if len(xa) < 2 and len(xb) < 2:
        return diff, math.nan, math.nan

    def ss(x: list[float]) -> float:
        m = sum(x) / len(x)
        return sum((v - m) ** 2 for v in x)

    sp = math.sqrt((ss(xa) + ss(xb)) / df)
    half = stats.t.ppf(0.5 + LEVEL / 2, df) * sp * math.sqrt(1 / len(xa) + 1 / len(xb))
    return diff, diff - half, diff + half


def scale_claim(rungs: list[ScaleRung]) -> Claim:
    """MHAR's gain over the baseline (MHAR at H minus the same-seed baseline, tail-mean loss) at each
    model scale, smallest first, and whether it grows from each scale to the next (`scale_step`):
    replicated when every step's interval lies below 0 (a larger gain at the larger scale), not
    replicated when one lies above 0. Pending while a scale's planned runs are missing."""
    paper_rows = {r.scale: _paper_deltas(r.scale) for r in rungs}
    paper = ("MHAR (H=8)'s gain over the baseline grows with scale: "
             + ", ".join(f"{paper_rows[r.scale]['deltas']['mhar']:+.3f} at {r.scale.upper()}" for r in rungs)
             + " (Table main; one seed each, 20K steps)")
    parts = []
    for r in rungs:
        if r.deltas:
            mean, low, high = _t_interval(list(r.deltas.values()))
            seeds = f"{len(r.deltas)} seeds" if len(r.deltas) > 1 else f"seed {next(iter(r.deltas))}"
            parts.append(f"{r.describe()} {_fmt_interval(mean, low, high)} ({seeds})")
        else:
            parts.append(f"{r.describe()}: no seed has both arms yet")
    verdicts = []
    for a, b in zip(rungs, rungs[1:]):
        if not (a.deltas and b.deltas):
            verdicts.append(INCONCLUSIVE)
            continue
        diff, low, high = scale_step(a, b)
        step = f"{a.scale.upper()} -> {b.scale.upper()} {_fmt_interval(diff, low, high)}"
        shared = sorted(set(a.deltas) & set(b.deltas))
        if shared:
            step += "; same seed " + ", ".join(f"{s}: {a.deltas[s]:+.3f} -> {b.deltas[s]:+.3f}" for s in shared)
        parts.append(step)
        verdicts.append(side(low, high, 0.0))
    verdict = (NOT_REPLICATED if NOT_REPLICATED in verdicts else REPLICATED if verdicts and all(
        v == REPLICATED for v in verdicts) else INCONCLUSIVE)
    rule = ("gain = MHAR - the same-seed baseline, tail-mean loss; a step between scales is the difference of "
            "their seed-mean gains with a Student t interval of the pooled per-seed sd (n_a + n_b - 2 df; a scale "
            "of one seed is taken to vary as the other's seeds do); replicated: every step below 0 (the gain "
            "grows), not replicated: one above 0. The scales differ in more than size: in routing-head width, KV, "
            "tokens per parameter and epochs (each scale's beside its gain; the paper trains every scale 20K "
            "steps), so a scale that saw fewer tokens per parameter gives a gain read earlier in its training")
    missing = [f"{r.name}: {m}" for r in rungs for m in r.missing]
    for r in rungs:  # each scale's own pairs: do its baseline and MHAR share a card and a commit?
        rule = _with_origin(rule, r.runs or {})
    return held_back(Claim("scale", "; ".join(parts), verdict, rule, paper), missing)


def _paper_deltas(scale: str) -> dict[str, Any]:
    """The paper's Table-main row at `scale` (figures/paper_values.json)."""
    from figures.context import load_paper_values

    rows = [r for r in load_paper_values()["main"]["rows"] if r["scale"] == scale]
    if len(rows) != 1:
        raise UserError(f"figures/paper_values.json has {len(rows)} Table-main rows at scale {scale}")
    return rows[0]


def delta_claim(plan: Plan, study: Study, tails: dict[str, Any], method: str, heads: int | None,
                key: str) -> Claim:
    """Our tail-mean delta of `method` (at H `heads`) minus the same-seed baseline beside the
    paper's Table-main delta at the plan's scale: a Student t interval over the seeds both ran
    (one seed: its value, no interval). Verdict on the sign (the paper's side is a gain, delta < 0);
    the sizes are set side by side, not judged."""
    row = _paper_deltas(plan.paper_scale or plan.preset)
    paper_value = row["deltas"][key]
    what = run_label(method, heads)
    paper = (f"{what} - baseline = {paper_value:+.3f} at {row['scale'].upper()} (Table main; one seed, 20K steps, "
             f"tail-mean loss {row['baseline']:.3f} baseline)")
    arm_seeds = study.seeds(method, heads if heads is not None else ANY)
    missing = study.missing(method, heads if heads is not None else ANY) + study.missing("baseline", seeds=arm_seeds)
    base = _tail_means(tails, "baseline", None, plan.main_kv)
    arm = _tail_means(tails, method, heads, plan.main_kv)
    both = sorted(set(base) & set(arm))
    deltas = [arm[s] - base[s] for s in both]
    note = ("tail-mean loss minus the same-seed baseline's; replicated: the interval lies below 0 (a gain, as "
            "the paper); not replicated: above 0; the paper's size is shown, not judged (its corpus, length "
            "and vocabulary differ)")
    if not deltas:
        ours = "no seed has both this arm and the baseline yet"
        verdict = INCONCLUSIVE
    elif len(deltas) == 1:
        ours = f"{deltas[0]:+.3f} (seed {both[0]}; 1 seed, no interval)"
        verdict = INCONCLUSIVE
    else:
        mean, low, high = _t_interval(deltas)
        inside = "inside" if low <= paper_value <= high else "outside"
        ours = (f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] over {len(deltas)} seeds "
                f"({', '.join(f'{d:+.3f}' for d in deltas)}); the paper's {paper_value:+.3f} lies {inside} it")
        verdict = side(low, high, 0.0)
    note = _with_origin(note, {**_labelled(study, "baseline", None, both), **_labelled(study, method, heads, both)})
    return held_back(Claim(f"delta_{key}", ours, verdict, note, paper), missing)


def depth_spread(weights: Any, sources: Any) -> float:
    """Mean over sites with N >= 2 sources and over heads of the total-variation distance of the
    token-averaged depth read from uniform, TV = 1/2 sum_n |w_n - 1/N| (0: the zero-initialised
    query's read, 1 - 1/N: one source only). weights [..., site, source, head], sources [site]
    (`analysis.probes.spread`)."""
    from analysis.probes.spread import mean_spread, read_spread

    return mean_spread(read_spread(weights, sources), sources)


def spread_read(path: Path) -> tuple[NullRead, str]:
    """One routing dataset's depth-read spread against the matched-norm random queries' (per draw),
    and the final site's read: min-max of its token-averaged weights against uniform 1/N."""
    import numpy as np

    from analysis.probes.spread import mean_spread, null_read_spread

    from ..capture.io import open_routing_dataset

    ds = open_routing_dataset(path)
    try:
        sources = ds["site_num_sources"].values  # [S]
        value = float(depth_spread(ds["weight_mean"].values, sources))
        tv = null_read_spread(ds)  # [draw, site, head], from the null's maps or its summary form
        if tv is not None:
            null = np.asarray(mean_spread(tv, sources))  # [draw]
            read = NullRead(value, float(null.mean()), float(null.std(ddof=1)) if null.size > 1 else math.nan,
                            int(null.size))
        else:
            read = NullRead(value, math.nan, math.nan, 0)
        last = ds["weight_mean"].values[-1, : int(sources[-1])]  # [N, H]
        final = (f"final site: weights {np.nanmin(last):.3f}-{np.nanmax(last):.3f} "
                 f"against uniform {1 / sources[-1]:.3f}")
    finally:
        ds.close()
    return read, final


def spread_claims(plan: Plan, study: Study) -> list[Claim]:
    """Per routed method of the plan (each H of MHAR), whether its routing queries left their
    initialisation: the depth-read spread against uniform at the main seed (the run every routed arm
    has), read against matched-norm random queries (z over the null draws, as the deviation claim)."""
    arms = sorted({(a[0], a[1]) for a in study.planned if a[0] in plan.routed_methods},
                  key=lambda a: (plan.routed_methods.index(a[0]), a[1] or 0))
    seeds = {plan.main_seed}
    note_rule = ("spread = total-variation distance of each site's token-averaged depth read from uniform, "
                 "1/2 sum_n |w_n - 1/N|, averaged over sites with N >= 2 sources and over heads: 0 is the "
                 "zero-initialised query's uniform read, 1 - 1/N one source only. Against the same for "
                 "matched-norm random queries (the capture's null draws)")
    claims = []
    for method, heads in arms:
        what = label(method, heads, None, 0).removesuffix(" seed 0")
        paper = (f"{what}: the routing queries leave their zero initialisation (a uniform 1/N read of every "
                 f"source) for a selective depth read (depth maps)")
        reads, finals = {}, []
        for m, h, kv, seed in study.arms(method, heads, seeds):
            path = study.present.get((m, h, kv, seed))
            if path is not None and RunFiles(path).routing_path.is_file():
                reads[seed], final = spread_read(RunFiles(path).routing_path)
                finals.append(f"seed {seed} {final}")
        if reads:
            verdict, rule = _z_verdict(plan, reads, "null draws")
            ours = f"spread {_per_seed(reads)}; {'; '.join(finals)}"
            note = f"{note_rule}; {rule}"
        else:
            ours, verdict, note = "no routing dataset yet", INCONCLUSIVE, note_rule
        claims.append(held_back(Claim(f"spread_{what}", ours, verdict, note, paper),
                                study.missing(method, heads, seeds), study.uncaptured(method, heads, seeds), plan))
    return claims


def _grid_runs(runs: Path) -> list[dict[str, Any]]:
    """Every finished run of the sweep (all KV values) with its tail-mean loss, from the manifest (a run
    too short for a tail-mean, as a CPU check's, left out)."""
    from .runs import finished, swept_so_far

    rows = []
    for r in finished(swept_so_far(runs)):
        summary = RunFiles(r.path).summary()
        if summary.get("tail_mean_val_loss") is None:
            continue
        rows.append(dict(method=r.method, H=r.heads, kv=r.kv, seed=r.seed, tail_mean=summary["tail_mean_val_loss"]))
    return rows


def claims_markdown(claims: list[Claim]) -> str:
    lines = ["## Claims", "",
             "| claim (paper) | ours (95% interval) | verdict | how read |", "|---|---|---|---|"]
    for c in claims:  # md_escape: |D| inside a table cell
        lines.append(md_row([md_escape(c.claim), md_escape(c.ours), f"**{c.verdict}**", md_escape(c.note)]))
    return "\n".join(lines) + "\n"


def write_claims(plan: Plan, out: Path) -> str:
    """claims.md (and claims.json) under `out`; returns the markdown."""
    from ..atomic import write_json, write_text

    claims = claims_of(plan, out)
    text = claims_markdown(claims)
    write_text(out / "claims.md", text)
    write_json(out / "claims.json", [dict(claim=c.claim, key=c.key, ours=c.ours, verdict=c.verdict,
                                          note=c.note) for c in claims])
    return text
