"""The committed 100M study (results/study100m) regenerates on a CPU from its committed files alone,
while it is still partial (issue 33: the main grid, hyper, MHAR H=4, H=16, head-wise and the best-vs-best
rate's seed 0 are in; their further seeds are not): the
report stages, run on a copy that holds only the exported runs and evaluations, give the committed
claim table, probe and figure tables and statistics; the analyses whose runs are missing are skipped
with a note, and every claim whose runs are missing is pending and names them."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
from scipy import stats

from mhar_probe.demo import run_demo
from mhar_probe.demo.claims import PENDING_RUNS, REPLICATED, VERDICTS
from mhar_probe.demo.plan import STUDY
from mhar_probe.runfiles import RunFiles
from mhar_probe.tail import full_tail_mean
from results_checks import baseline_only_study, without_paths

STUDY_DIR = Path(__file__).resolve().parents[1] / "results" / "study100m"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results") / "study100m"
    shutil.copytree(STUDY_DIR / "runs", out / "runs")  # the exported inputs only
    shutil.copytree(STUDY_DIR / "middle" / "runs", out / "middle" / "runs")  # the width row's rungs
    shutil.copytree(STUDY_DIR / "bestvsbest" / "runs", out / "bestvsbest" / "runs")  # the second rate's runs
    shutil.copytree(STUDY_DIR / "scale350m" / "runs", out / "scale350m" / "runs")  # the scale row's 350M pair
    shutil.copytree(STUDY_DIR / "prompts", out / "prompts")  # the evaluations' prompt sets, shared by every part
    shutil.copytree(STUDY_DIR.parent / "ladder" / "runs", out.parent / "ladder" / "runs")
    run_demo(out, plan=STUDY, stages=["probe", "stats", "claims", "figures", "report"])
    return out


def _claims(folder: Path) -> dict[str, dict]:
    return {c["key"]: c for c in json.loads((folder / "claims.json").read_text())}


def test_claims_figures_and_tables_regenerate_as_committed(regenerated):
    committed = sorted(p.relative_to(STUDY_DIR) for d in ("probes", "figures", "stats")
                       for p in (STUDY_DIR / d).rglob("*") if p.suffix in (".md", ".csv") and p.name != "index.md")
    assert len(committed) > 8
    for rel in [Path("claims.md"), Path("claims.json"), *committed]:
        assert (regenerated / rel).read_text() == (STUDY_DIR / rel).read_text(), rel
    for rel in ("stats/tails.json", "stats/ceg.json"):  # equal up to where the runs lay
        new, old = (json.loads((d / rel).read_text()) for d in (regenerated, STUDY_DIR))
        assert without_paths(new) == without_paths(old, approx=True), rel
    pngs = {p.name for p in (STUDY_DIR / "figures").glob("*.png")}
    assert pngs and pngs == {p.name for p in (regenerated / "figures").glob("*.png")}


def test_missing_runs_are_skipped_with_a_note_and_their_claims_pending(regenerated):
    report = (regenerated / "report.md").read_text()
    # seed 0's baseline, attnres and MHAR H=8 are evaluated: both McNemar pairs are tested
    assert "skipped McNemar" not in report
    assert (regenerated / "stats" / "mcnemar" / "mcnemar.json").exists()
    assert (regenerated / "stats" / "mcnemar_attnres_mhar" / "mcnemar.json").exists()
    claims = _claims(regenerated)
    assert {c["verdict"] for c in claims.values()} <= set(VERDICTS)
    # the main grid is complete (three seeds of baseline, attnres, MHAR H=8): its claims are read
    for key in ("order", "excess", "deviation", "replication", "ceg", "delta_attnres", "delta_mhar"):
        assert claims[key]["verdict"] != PENDING_RUNS, key
    assert "(3 seeds, tail-mean loss)" in claims["order"]["ours"]
    # MHAR H=4 and H=16 are in: the KV=4 grid (H = 1, 4, 8, 16) is read; hyper is in at one seed
    assert claims["optimum"]["verdict"] != PENDING_RUNS and "KV=4: best H=" in claims["optimum"]["ours"]
    assert claims["delta_hyper"]["verdict"] != PENDING_RUNS and "(seed 0; 1 seed" in claims["delta_hyper"]["ours"]
    # the width row reads all three rungs (16, 32 and 64 channels), each with three seeds
    width = claims["width"]
    assert width["verdict"] != PENDING_RUNS
    assert all(w in width["ours"] for w in ("16-ch ladder", "32-ch middle", "64-ch study100m"))
    assert width["ours"].count("(3 seeds)") == 3 and "step by step 16->32" in width["ours"]
    # the scale row reads the 100M gain over three seeds against the 350M pair (scale350m/, both runs
    # finished): one 350M seed gives a step with an interval from the 100M seeds' spread
    scale = claims["scale"]
    assert scale["verdict"] != PENDING_RUNS and "runs missing" not in scale["note"]
    assert "100M (study100m: 64-ch routing heads" in scale["ours"] and "(3 seeds)" in scale["ours"]
    assert "350M (study350m: 128-ch routing heads at KV 8" in scale["ours"] and "(one seed: no interval)" in scale["ours"]
    assert "100M -> 350M" in scale["ours"] and "same seed 0:" in scale["ours"]
    # best-vs-best: baseline, attnres and MHAR H=8 at 1e-3 are in, at one seed (values, no interval)
    second = claims["second_rate"]
    assert second["verdict"] != PENDING_RUNS and "(seed 0)" in second["ours"]
    assert all(f"{m} seed 0: 5e-4" in second["ours"] for m in ("baseline", "attnres", "mhar H=8"))


def _tail(run: Path) -> float:
    """The run's tail-mean validation loss, read from its metrics file (the last 11 evaluations)."""
    return full_tail_mean([(row["step"], row["val_loss"]) for row in RunFiles(run).metrics() if "val_loss" in row])


def test_the_best_vs_best_table_reads_both_rates_and_only_it_does(regenerated):
    index = json.loads((regenerated / "figures" / "index.json").read_text())
    assert "table_lr_sweep" in index["made"] and "table_lr_sweep" not in index["skipped"]
    assert (regenerated / "figures" / "index.md").read_text().count("## table_lr_sweep (") == 1
    with open(regenerated / "figures" / "table_lr_sweep.csv") as f:
        rows = {r["Method"]: r for r in csv.DictReader(f) if r["source"] == "yours"}
    assert set(rows) == {"baseline", "attnres", "mhar"}  # hyper and mhar_hw: one rate only, left out
    name = {"baseline": "100m-baseline-kv4", "attnres": "100m-attnres-h1-kv4", "mhar": "100m-mhar-h8-kv4"}
    tails = {(m, lr): _tail(regenerated / folder / f"{name[m]}-lr{lr}-s0-n3815") for m in name
             for folder, lr in (("runs", "5e-4"), ("bestvsbest/runs", "1e-3"))}
    for m, r in rows.items():  # seed 0 at each rate (the seed both rates share); every method best at 1e-3
        assert r["Tail-mean by LR"] == f"0.0005: {tails[(m, '5e-4')]:.3f}, 0.001: {tails[(m, '1e-3')]:.3f}"
        assert float(r["Best LR"]) == 1e-3 and float(r["Tail-mean at best"]) == pytest.approx(tails[(m, "1e-3")])
    for m in ("attnres", "mhar"):
        assert float(rows[m]["Delta vs best baseline"]) == pytest.approx(tails[(m, "1e-3")] - tails[("baseline", "1e-3")])
    # the other tables stay at the study's shared rate: the main table's runs are the 5e-4 ones
    assert "lr 0.0005, 3815 steps" in (regenerated / "figures" / "table_main.md").read_text()
    assert "lr1e-3" not in (regenerated / "figures" / "table_corpus.md").read_text()


def test_the_paper_deltas_stand_beside_ours(regenerated):
    """Ours: the tail-mean of MHAR H=8 minus the same-seed baseline, read here from the runs' own
    metrics; one seed gives its value and says there is no interval."""
    claims = _claims(regenerated)
    paper = {key: claims[f"delta_{key}"]["claim"] for key in ("hyper", "attnres", "mhar", "mhar_over")}
    assert "-0.032" in paper["hyper"] and "-0.060" in paper["attnres"]
    assert "-0.061" in paper["mhar"] and "H=8" in paper["mhar"]
    assert "-0.035" in paper["mhar_over"] and "H=16" in paper["mhar_over"]

    def tail(run: str) -> float:  # the last 11 evaluations, read here from the committed metrics
        vals = [row["val_loss"] for row in RunFiles(STUDY_DIR / "runs" / run).metrics() if "val_loss" in row]
        return sum(vals[-11:]) / 11

    for method in ("mhar-h8", "attnres-h1"):
        deltas = [tail(f"100m-{method}-kv4-lr5e-4-s{s}-n3815") - tail(f"100m-baseline-kv4-lr5e-4-s{s}-n3815")
                  for s in (0, 1, 2)]  # the seeds both arms have
        mean = sum(deltas) / 3
        low, high = stats.t.interval(0.95, 2, loc=mean, scale=stats.sem(deltas))
        key = "delta_" + method.split("-")[0]
        assert claims[key]["ours"].startswith(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] over 3 seeds"), key


def test_the_depth_read_spread_of_each_routed_method(regenerated):
    """Every routed arm of the plan is captured (attnres, MHAR H=4, 8, 16, MHAR head-wise) and read."""
    claims = _claims(regenerated)
    spread = {k: c for k, c in claims.items() if k.startswith("spread_")}
    assert set(spread) == {"spread_attnres", "spread_mhar H=4", "spread_mhar H=8", "spread_mhar H=16",
                           "spread_mhar_hw H=4"}
    for key, read in spread.items():
        assert read["verdict"] == REPLICATED and "total-variation distance" in read["note"], key
        assert "against uniform 0.040" in read["ours"], key  # the final site reads 25 sources


def test_one_seed_has_no_interval_two_seeds_a_student_t_one():
    """The delta claim's interval is scipy's Student t over paired seed deltas."""
    from mhar_probe.demo import claims as C

    study = C.Study(STUDY, planned=[(m, h, 4, s) for m, h in (("baseline", None), ("mhar", 16)) for s in (0, 1)],
                    present={})
    tails = {"runs": [dict(method="baseline", H=None, kv=4, seed=0, tail_mean=2.20),
                      dict(method="baseline", H=None, kv=4, seed=1, tail_mean=2.21),
                      dict(method="mhar", H=16, kv=4, seed=0, tail_mean=2.15),
                      dict(method="mhar", H=16, kv=4, seed=1, tail_mean=2.17)]}
    study.present = {a: Path("/nonexistent") for a in study.planned}
    c = C.delta_claim(STUDY, study, tails, "mhar", 16, "mhar_over")
    d = [2.15 - 2.20, 2.17 - 2.21]
    mean, sem = sum(d) / 2, stats.sem(d)
    low, high = stats.t.interval(0.95, 1, loc=mean, scale=sem)
    assert c.ours.startswith(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}] over 2 seeds")
    assert c.verdict == C.side(low, high, 0.0) and not math.isnan(low)
    study.present.pop(("mhar", 16, 4, 1))
    held = C.delta_claim(STUDY, study, tails, "mhar", 16, "mhar_over")
    assert held.verdict == PENDING_RUNS and "mhar H=16 seed 1" in held.note


@pytest.mark.slow
def test_a_partial_study_on_the_tiny_preset_holds_back_the_claims_of_its_missing_seed(tmp_path, monkeypatch):
    """Train only the main grid of a two-grid plan (seed 42; the seeds grid, seed 43, not yet): the
    report stages run, the seed-paired claims are pending and name seed 43's runs, and the claims
    that read the main seed alone keep a verdict (~80 s on two busy cores)."""
    import dataclasses

    from mhar_probe.demo.plan import DEMO, Plan

    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    fields = {f.name: getattr(DEMO, f.name) for f in dataclasses.fields(Plan)}
    plan = Plan(**{**fields, **dict(
        name="partial", title="partial study", preset="tiny", steps=40,
        recipe=dict(lr=2e-3, batch_size=2, seq_len=16, eval_every=1, eval_batches=1, checkpoint_every=100,
                    corpus_max_bytes=60000, vocab_size=300),
        model=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64),
        grids=dict(main=dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[42]),
                   seeds=dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[43])),
        ladder_widths=(), eval_tasks=("mhar_lastword",), eval_limit=16, eval_batch_size=8, capture_tokens=256,
        mcnemar_bootstrap=50)})
    out = tmp_path / "study"
    run_demo(out, plan=plan, grids=["main"], stages=["sweep", "capture", "eval"])
    assert run_demo(out, plan=plan, stages=["probe", "stats", "claims", "figures", "report"]) == 0
    claims = _claims(out)
    for key in ("order", "ceg"):
        assert claims[key]["verdict"] == PENDING_RUNS, key
        assert "mhar H=2 seed 43" in claims[key]["note"] and "baseline seed 43" in claims[key]["note"]
    assert "seed 42" not in claims["order"]["note"]
    # the probes read the main seed only (DEMO captures no other): nothing of theirs is missing
    assert all(claims[k]["verdict"] != PENDING_RUNS for k in ("excess", "deviation", "replication"))


def test_a_study_with_no_captured_routed_run_regenerates_with_a_note(tmp_path, capsys):
    """The study as it stood before its first MHAR run (the baseline alone): the report stages run,
    the probe stage says in one line that nothing is captured (it raised a pandas KeyError on an
    empty site table), and the routing claims are pending."""
    out = tmp_path / "study"
    baseline_only_study(STUDY_DIR, out)
    assert run_demo(out, plan=STUDY, stages=["probe", "stats", "claims", "figures", "report"]) == 0
    printed = capsys.readouterr().out
    assert "skipped probe tables: no captured routed run (attnres, mhar, mhar_hw) at seed 0" in printed
    assert "skipped McNemar baseline vs mhar: no evaluation of" in printed  # said, not raised
    assert not (out / "probes").exists()
    claims = _claims(out)
    assert claims["spread_mhar H=8"]["verdict"] == PENDING_RUNS and "mhar H=8 seed 0" in claims["spread_mhar H=8"]["note"]
    assert claims["deviation"]["verdict"] == PENDING_RUNS
