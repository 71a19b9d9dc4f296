"""`mhar stats mcnemar` reports how many of the paired items are distinct, and the test on one
pair per distinct item (issue 32, item 3: 801 distinct items of 1,000 turned p = 0.45 into 0.039).
Checked on hand-made samples files with duplicates, counted here by hand."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from scipy.stats import binomtest

from mhar_probe.cli.stats import add_stats_subparser
from analysis.stats.compare import compare_eval_dirs
from analysis.stats.lm_eval_io import item_key
from analysis.stats.report import to_csv, to_json, to_latex

DATE = "2026-01-01T00-00-00.000000"


def mc_line(doc_id: int, context: str, choices: list[str], label: int, acc: int) -> dict:
    """A multiple-choice sample line as lm-eval 0.4.x writes it (target as a decimal string)."""
    args = {f"gen_args_{k}": {"arg_0": context, "arg_1": c} for k, c in enumerate(choices)}
    return {"doc_id": doc_id, "doc": {"context": context, "choices": choices, "label": label},
            "target": str(label), "arguments": args, "resps": [], "filtered_resps": [], "filter": "none",
            "metrics": ["acc"], "doc_hash": f"d{doc_id}", "prompt_hash": f"p{doc_id}", "target_hash": f"t{doc_id}",
            "acc": acc}


def lw_line(doc_id: int, context: str, target: str, acc: int) -> dict:
    return {"doc_id": doc_id, "doc": {"context": context, "target": target}, "target": target,
            "arguments": {"gen_args_0": {"arg_0": context, "arg_1": target}}, "filter": "none",
            "metrics": ["acc"], "doc_hash": f"d{doc_id}", "prompt_hash": f"p{doc_id}", "target_hash": f"t{doc_id}",
            "acc": acc}


# (context, target) of each doc_id and the two arms' scores: docs 0-5 are one passage six
# times, where A is right and B wrong (b = 6 counted, 1 distinct); 6-9 four distinct items
# where B is right and A wrong (c = 4); 10-11 a passage twice, both right.
LW = [("ctx shared", " word")] * 6 + [(f"ctx {k}", " other") for k in range(4)] + [("ctx both", " x")] * 2
LW_A = [1] * 6 + [0] * 4 + [1, 1]
LW_B = [0] * 6 + [1] * 4 + [1, 1]
# multiple choice: 0 and 1 are one question with its choices in another order (the same item);
# 2 is the same choices with the other answer (a different item); 3 and 4 repeat 3
MC = [("q", ["yes", "no"], 0), ("q", ["no", "yes"], 1), ("q", ["yes", "no"], 1), ("r", ["a", "b"], 0),
      ("r", ["a", "b"], 0), ("s", ["a", "b"], 1)]
MC_A = [1, 1, 0, 1, 1, 0]
MC_B = [0, 0, 1, 0, 0, 1]


def write_arm(root: Path, lw_scores: list[int], mc_scores: list[int]) -> Path:
    root.mkdir(parents=True)
    lw = [lw_line(i, c, t, s) for i, ((c, t), s) in enumerate(zip(LW, lw_scores))]
    mc = [mc_line(i, c, ch, lab, s) for i, ((c, ch, lab), s) in enumerate(zip(MC, mc_scores))]
    for task, rows in (("toy_lw", lw), ("toy_mc", mc)):
        (root / f"samples_{task}_{DATE}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture
def arms(tmp_path):
    return write_arm(tmp_path / "a", LW_A, MC_A), write_arm(tmp_path / "b", LW_B, MC_B)


def test_distinct_counts_and_test_on_one_pair_per_item(arms):
    cmp = compare_eval_dirs(*arms, n_boot=100)
    rows = {r.task: r for r in cmp.rows}
    lw, mc = rows["toy_lw"], rows["toy_mc"]
    assert (lw.n, lw.b, lw.c) == (12, 6, 4)
    assert (lw.n_distinct, lw.b_distinct, lw.c_distinct) == (6, 1, 4)  # shared, 4 others, both
    assert lw.p_value == pytest.approx(binomtest(6, 10).pvalue)
    assert lw.p_distinct == pytest.approx(binomtest(1, 5).pvalue)
    # q/yes (docs 0, 1), q/no (doc 2), r/a (3, 4), s/b (5)
    assert (mc.n, mc.b, mc.c) == (6, 4, 2)
    assert (mc.n_distinct, mc.b_distinct, mc.c_distinct) == (4, 2, 2)
    assert mc.p_distinct == pytest.approx(1.0)
    assert any("only 6 of the 12 paired items are distinct" in n for n in cmp.notes)


def test_distinct_count_in_every_output(arms, capsys):
    parser = argparse.ArgumentParser(prog="mhar")
    add_stats_subparser(parser.add_subparsers(dest="command", required=True))
    out = arms[0].parent / "out"
    args = parser.parse_args(["stats", "mcnemar", str(arms[0]), str(arms[1]), "--n-boot", "50", "--out", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out.splitlines()
    head = next(ln for ln in printed if ln.startswith("task "))
    cols = head.split()
    row = next(ln for ln in printed if ln.startswith("toy_lw ")).split()
    assert row[cols.index("distinct")] == "6" and row[cols.index("n")] == "12"
    doc = json.loads((out / "mcnemar.json").read_text())
    assert {r["task"]: r["n_distinct"] for r in doc["rows"]} == {"toy_lw": 6, "toy_mc": 4}
    assert "n_distinct" in (out / "mcnemar.csv").read_text().splitlines()[0]
    cmp = compare_eval_dirs(*arms, n_boot=50)
    tex = to_latex(cmp)
    assert "distinct" in tex and "toy\\_lw & none & 12 & 6 &" in tex
    assert "p_distinct" in to_csv(cmp) and '"b_distinct": 1' in to_json(cmp)


def test_item_key_reads_what_the_model_was_asked():
    a = mc_line(0, "q", ["yes", "no"], 0, 1)
    assert item_key(a) == item_key(mc_line(7, "q", ["no", "yes"], 1, 0))  # order of the choices
    assert item_key(a) != item_key(mc_line(0, "q", ["yes", "no"], 1, 1))  # another answer
    assert item_key(a) != item_key(mc_line(0, "q2", ["yes", "no"], 0, 1))
    assert item_key(lw_line(0, "c", " w", 1)) == item_key(lw_line(5, "c", " w", 0))
    assert item_key({"doc_id": 0, "doc": {"q": 1}, "target": "x"}) == item_key({"doc_id": 1, "doc": {"q": 1},
                                                                                "target": "x"})
    assert item_key({"doc_id": 0, "acc": 1}) is None


def test_unknown_items_are_not_counted(tmp_path):
    for arm, scores in (("a", [1, 0]), ("b", [0, 1])):
        (tmp_path / arm).mkdir()
        rows = [{"doc_id": i, "filter": "none", "metrics": ["acc"], "acc": s} for i, s in enumerate(scores)]
        (tmp_path / arm / f"samples_t_{DATE}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmp = compare_eval_dirs(tmp_path / "a", tmp_path / "b", n_boot=20)
    (row,) = cmp.rows
    assert row.n == 2 and row.n_distinct is None
    assert any("distinct items not counted" in n for n in cmp.notes)
