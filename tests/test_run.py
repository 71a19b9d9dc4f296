"""analysis.run.Run: one run directory read once; the xarray long form (analysis.runs) and the
statistics' run records (analysis.stats.curves) are both views of it."""

from __future__ import annotations

import json
import math

import pytest

from analysis.run import Run
from analysis.runs import load_runs, select
from analysis.stats.curves import load_run
from analysis.stats.errors import StatsError
from figures.context import Context
from figures.synthetic import tail_mean_of, write_run
from mhar_probe.errors import UserError


@pytest.fixture()
def runs(tmp_path):
    root = tmp_path / "runs"
    for seed in (1, 2):
        write_run(root, f"base-s{seed}", method="baseline", seed=seed, steps=60, eval_every=5)
        write_run(root, f"mhar-s{seed}", method="mhar", H=4, kv=2, seed=seed, steps=60, eval_every=5)
    write_run(root, "attnres", method="attnres", seed=1, steps=60, eval_every=5)
    write_run(root, "short", method="mhar", H=None, kv=2, seed=3, steps=10, eval_every=5, finished=False)
    return root


def test_read_gives_the_documents_and_the_axes(runs):
    run = Run.read(runs / "mhar-s1")
    assert run.path == runs / "mhar-s1" and run.metrics_path == runs / "mhar-s1" / "metrics.jsonl"
    assert run.summary["finished"] is True and run.train_config["heads"] == 4 and run.config == {}
    assert (run.method, run.heads, run.kv, run.lr, run.seed, run.preset, run.steps) == ("mhar", 4, 2, 5e-4, 1, "tiny", 60)
    assert run.corpus == "embedded" and run.finished and run.scale == "tiny"
    assert [p["step"] for p in run.evals] == list(range(0, 61, 5))
    assert run.tail().mean == pytest.approx(tail_mean_of(runs / "mhar-s1")) and run.tail().k == 11
    assert Run.read(runs / "mhar-s1" / "metrics.jsonl") == run  # the metrics file names its run


def test_heads_by_method():
    def heads(method, summary=None, tc=None, config=None):
        return Run(path=None, config=config or {}, train_config={"method": method, "kv_heads": 2, **(tc or {})},
                   summary=summary or {}, corpus_info={}, metrics=[], metrics_path=None).heads

    assert heads("baseline", tc={"heads": 4}) is None and heads("hyper") is None
    assert heads("attnres", summary={"routing_heads": 8}) == 1
    assert heads("mhar") == 2  # none recorded: H = KV
    assert heads("mhar", tc={"heads": 4}, config={"routing_heads": 8}) == 4


def test_the_long_form_and_the_records_are_views_of_the_same_runs(runs):
    ds = load_runs(runs)
    assert ds.sizes["run"] == 6
    for name in ("base-s1", "mhar-s2", "attnres"):
        row = select(ds, path=str(runs / name))
        rec = load_run(runs / name)  # the statistics' record: the full 11-evaluation window
        run = Run.read(runs / name)
        assert rec["tail_mean"] == pytest.approx(float(row["tail_mean"].item()))
        assert (rec["method"], rec["kv"], rec["lr"], rec["seed"]) == (
            row["method"].item(), int(row["kv"].item()), float(row["lr"].item()), int(row["seed"].item()))
        assert int(row["H"].item()) == (rec["H"] or 0) == (run.heads or 0)  # H = 0: no routing heads
    assert select(ds, method="baseline")["H"].values.tolist() == [0, 0]


def test_figures_read_records_of_their_selection_from_the_runs(runs, tmp_path):
    ctx = Context(runs_dir=runs, out=tmp_path / "fig")
    assert [r.path.name for r in ctx.run_list] == ["attnres", "base-s1", "base-s2", "mhar-s1", "mhar-s2"]
    recs = ctx.records(select(ctx.runs, method="mhar"))
    assert [r["path"] for r in recs] == [str(runs / "mhar-s1"), str(runs / "mhar-s2")]
    assert recs[0] == load_run(runs / "mhar-s1")


def test_a_short_run_has_no_tail_mean(runs):
    run = Run.read(runs / "short")
    assert run.tail().mean is None and run.tail().evaluations == 2 and not run.finished and run.heads == 2
    assert math.isnan(run.record(full=False)["tail_mean"])
    with pytest.raises(StatsError, match="has 2 evaluations after step 0"):
        load_run(runs / "short")


def test_unreadable_runs_raise_the_callers_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        Run.read(tmp_path / "nope")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "val_loss": 1.0}) + "\n")
    with pytest.raises(UserError, match="no method recorded"):
        Run.read(run)
    (run / "summary.json").write_text("{oops")
    with pytest.raises(StatsError, match=r"summary.json:1: not valid JSON"):
        load_run(run)
    (run / "summary.json").write_text(json.dumps({"method": "baseline"}))
    (run / "metrics.jsonl").write_text("")
    assert Run.read(run).metrics == []  # a run that has not logged yet
    with pytest.raises(StatsError, match="empty file"):
        load_run(run)
    assert math.isnan(Run.read(run).scalar("flops"))


def test_a_run_cut_after_its_last_step_reached_it(runs, tmp_path):
    """reached_last_step: an evaluation at the planned last step, summary or not (the 350M pair's MHAR
    run was cut while writing its final weights); a run stopped earlier, or with no planned length, did not."""
    cut = write_run(tmp_path / "cut", "mhar", method="mhar", H=4, steps=60, eval_every=5, finished=False)
    assert Run.read(runs / "mhar-s1").reached_last_step and Run.read(runs / "mhar-s1").finished
    assert Run.read(cut).reached_last_step and not Run.read(cut).finished
    lines = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # stopped one step short of 60
    assert not Run.read(cut).reached_last_step
    (cut / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert Run.read(cut).reached_last_step
    options = json.loads((cut / "train_config.json").read_text())
    (cut / "train_config.json").write_text(json.dumps({k: v for k, v in options.items() if k != "steps"}))
    assert not Run.read(cut).reached_last_step  # no planned length: the last logged step proves nothing
