"""McNemar of a pair of arms at every seed, and the line across seeds.

Each seed's table is the `compare.Comparison` of that seed's two evaluations (`paired_eval`, its
files in a folder of their own); per (task, filter, metric) row it gives the discordant counts b
(A right, B wrong) and c (A wrong, B right), McNemar's X^2 = (b - c)^2 / (b + c), the exact p, and
acc_B - acc_A = (c - b) / n with its paired bootstrap interval.

Across the seeds that are in, per row: how many seeds favour B (c > b), A (b > c) or neither, the
pooled accuracy difference (C - B) / N over the seeds' N = sum n items, and the combined test with
the seeds as strata (`mcnemar.mcnemar_stratified`: the Cochran-Mantel-Haenszel test with every
matched pair a stratum, which is McNemar's on the pooled B = sum b, C = sum c; chi-square and exact
p). Holm's adjustment of the combined exact p runs over every row of every pair. Seeds whose runs or
evaluations are not in are pending, each with why: named, never left out silently.

Written as stats/mcnemar_seeds.json (what the claim table reads) and stats/mcnemar_seeds.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mhar_probe.tables import md_escape, md_row, md_rule

from .compare import Comparison
from .mcnemar import holm, mcnemar_chi2, mcnemar_stratified, sign_flip_p
from .output import write_text_new

#: what the combined test is, as the files say it
COMBINED = ("Cochran-Mantel-Haenszel over seeds as strata of matched pairs (each pair its own stratum): "
            "McNemar on the pooled discordant counts, X^2 = (B - C)^2 / (B + C) without continuity correction, "
            "and the exact binomial p of B in B + C. It counts an item once per seed, but the seeds' evaluations "
            "share their items, so the test the verdict reads is item-clustered: d_i = sum over seeds of "
            "(B right - A right) on item i, a two-sided sign-flip test of mean d = 0 (p items)")
#: the seed-table fields of each row, in order
SEED_FIELDS = ("task", "filter", "metric", "n", "acc_a", "acc_b", "delta", "ci_low", "ci_high", "b", "c",
               "statistic", "p_value")


@dataclass
class SeedTable:
    """One seed's comparison and the folder (relative to the stats folder) its files were written to."""

    seed: int
    folder: str
    comparison: Comparison

    def rows(self) -> list[dict[str, Any]]:
        """Per (task, filter, metric): counts, X^2, exact p, acc B - acc A with its interval."""
        return [{k: mcnemar_chi2(r.b, r.c) if k == "statistic" else getattr(r, k) for k in SEED_FIELDS}
                for r in self.comparison.rows]


@dataclass
class PairSeeds:
    """Arm A against arm B at every seed the plan tests them at: the tables in, and the seeds pending."""

    a: str  # method names
    b: str
    label_a: str  # as tables name the arms ("mhar H=8")
    label_b: str
    seeds: list[int]  # every seed the plan tests the pair at
    tables: list[SeedTable] = field(default_factory=list)
    pending: dict[int, str] = field(default_factory=dict)  # seed -> why it is not in
    unevaluated: dict[int, list[str]] = field(default_factory=dict)  # seed -> its finished runs without an evaluation

    def across(self) -> list[dict[str, Any]]:
        """Per (task, filter, metric) of the seeds in: seeds favouring each side and the combined test."""
        groups: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = {}
        for t in self.tables:
            for row in t.rows():
                groups.setdefault((row["task"], row["filter"], row["metric"]), []).append((t.seed, row))
        items = {(t.seed, r.task, r.filter, r.metric): r.items for t in self.tables for r in t.comparison.rows}
        out = []
        for (task, flt, metric), rows in groups.items():
            combined = mcnemar_stratified([(r["b"], r["c"]) for _, r in rows])
            per_seed = [items.get((s, task, flt, metric)) for s, _ in rows]
            p_items, units = None, None
            if all(x is not None for x in per_seed):
                d: dict[str, float] = {}
                for x in per_seed:
                    for key, (right_a, right_b) in x.items():
                        d[key] = d.get(key, 0.0) + right_b - right_a
                p_items, units = sign_flip_p(list(d.values())), len(d)
            n = sum(r["n"] for _, r in rows)
            out.append(dict(task=task, filter=flt, metric=metric, seeds=[s for s, _ in rows],
                            favour_b=sum(r["c"] > r["b"] for _, r in rows), favour_a=sum(r["b"] > r["c"] for _, r in rows),
                            ties=sum(r["b"] == r["c"] for _, r in rows), n=n,
                            delta_pooled=(combined.c - combined.b) / n if n else math.nan,
                            b=combined.b, c=combined.c, statistic=combined.statistic, p_chi2=combined.p_chi2,
                            p_exact=combined.p_exact, items=units, p_items=p_items))
        return out


def _clean(v: Any) -> Any:
    """JSON has no NaN: null."""
    return None if isinstance(v, float) and math.isnan(v) else v


def seeds_document(pairs: list[PairSeeds]) -> dict[str, Any]:
    """The JSON of every pair: planned seeds, each seed's rows, the pending seeds, the line across; `settings`:
    the bootstrap's of the seeds' comparisons (None before any seed is in)."""
    settings = next((t.comparison.settings for p in pairs for t in p.tables), None)
    across = [p.across() for p in pairs]
    for rows in across:
        for row in rows:
            row["p_basis"] = "p_items" if row["p_items"] is not None else "p_exact"
    adjusted = iter(holm([row[row["p_basis"]] for rows in across for row in rows]))
    docs = []
    for p, rows in zip(pairs, across):
        for row in rows:
            row["p_holm"] = next(adjusted)
        docs.append(dict(a=p.a, b=p.b, label_a=p.label_a, label_b=p.label_b, seeds=p.seeds,
                         tables=[dict(seed=t.seed, folder=t.folder, dir_a=t.comparison.dir_a, dir_b=t.comparison.dir_b,
                                      rows=[{k: _clean(v) for k, v in r.items()} for r in t.rows()])
                                 for t in p.tables],
                         pending=[dict(seed=s, why=why, unevaluated=p.unevaluated.get(s, []))
                                  for s, why in sorted(p.pending.items())],
                         across=[{k: _clean(v) for k, v in r.items()} for r in rows]))
    return dict(combined=COMBINED, holm="over every across-seeds row of every pair (p items, else p exact)",
                settings=settings,
                pairs=docs)


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2e}" if p < 1e-3 else f"{p:.3f}"


def _x2(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def seeds_markdown(doc: dict[str, Any]) -> str:
    """Per pair: a row per seed and task (pending seeds named), then the line across seeds."""
    lines = ["# McNemar per seed", "",
             "b = A right & B wrong, c = A wrong & B right; delta = acc B - acc A with its paired bootstrap interval; "
             "X^2 = (b - c)^2 / (b + c); p exact McNemar. Across seeds: " + doc["combined"] + "; p Holm "
             + doc["holm"] + "."]
    for pair in doc["pairs"]:
        lines += ["", f"## {md_escape(pair['label_a'])} (A) vs {md_escape(pair['label_b'])} (B), "
                      f"seeds {', '.join(map(str, pair['seeds']))}", "",
                  md_row(["seed", "task", "metric", "n", "acc A", "acc B", "delta [95% CI]", "b", "c", "X^2", "p"]),
                  md_rule(11)]
        for t in pair["tables"]:
            for r in t["rows"]:
                lines.append(md_row([str(t["seed"]), md_escape(r["task"]), md_escape(r["metric"]), str(r["n"]),
                                     f"{r['acc_a']:.3f}", f"{r['acc_b']:.3f}",
                                     f"{r['delta']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]", str(r["b"]),
                                     str(r["c"]), _x2(r["statistic"]), _p(r["p_value"])]))
        for p in pair["pending"]:
            lines.append(md_row([str(p["seed"]), f"pending: {md_escape(p['why'])}"] + [""] * 9))
        lines += ["", md_row(["task", "metric", "seeds in", "favour B / A / tie", "pooled delta", "B", "C", "X^2",
                              "p (X^2)", "p exact", "items", "p items", "p Holm"]),
                  md_rule(13)]
        for r in pair["across"]:
            lines.append(md_row([md_escape(r["task"]), md_escape(r["metric"]), ", ".join(map(str, r["seeds"])),
                                 f"{r['favour_b']} / {r['favour_a']} / {r['ties']}", f"{r['delta_pooled']:+.3f}",
                                 str(r["b"]), str(r["c"]), _x2(r["statistic"]), _p(r["p_chi2"]), _p(r["p_exact"]),
                                 "-" if r["items"] is None else str(r["items"]), _p(r["p_items"]),
                                 _p(r["p_holm"]) + ("" if r["p_basis"] == "p_items" else " (of p exact)")]))
        if not pair["across"]:
            lines.append(md_row(["no seed in yet"] + [""] * 12))
    return "\n".join(lines) + "\n"


def write_seeds(pairs: list[PairSeeds], json_path: Path, md_path: Path) -> list[Path]:
    """stats/mcnemar_seeds.json and .md (replaced: the stats stage rewrites them every call)."""
    doc = seeds_document(pairs)
    return [write_text_new(json_path, json.dumps(doc, indent=2) + "\n", overwrite=True),
            write_text_new(md_path, seeds_markdown(doc), overwrite=True)]
