"""Study plans: stages and grids are checked before any work, each grid's runs are named, and an
export copies the report's inputs without weights, merging the manifests of several calls."""

from __future__ import annotations

import json

import pytest

from mhar_probe.demo.export import RUN_FILES, export_study
from mhar_probe.demo.plan import DEMO, LADDER
from mhar_probe.demo.run import check_stages
from mhar_probe.errors import UserError
from mhar_probe.runfiles import METRICS, METRICS_GZ, TRAIN_CONFIG, RunFileError, RunFiles
from mhar_probe.samplestore import expand
from mhar_probe.sweep.manifest import read_manifest, write_manifest


def test_stages_and_grids_are_checked():
    assert check_stages(["report", "sweep"]) == ("sweep", "report")  # their fixed order
    with pytest.raises(UserError, match="unknown stage plot"):
        check_stages(["plot"])
    with pytest.raises(UserError, match="no grid wide"):
        LADDER.grid_names(["kvgrid", "wide"])
    assert LADDER.grid_names(["kvgrid", "widths"]) == ["kvgrid"]


def test_ladder_grids_name_their_runs():
    names = LADDER.run_names(["kvgrid"])
    assert len(names) == 8 and "tiny-mhar-h16-kv2-lr2e-3-s0-n480" in names
    assert len(LADDER.run_names(["main", "hw", "seeds"])) == 12
    assert len(DEMO.run_names(list(DEMO.grids))) == 10  # 6 main (mhar at H = 2, 4, 8), hw, 3 at seed 43


def _run(sweep, name, axes, status="finished"):
    run = sweep / name
    run.mkdir(parents=True)
    for f in RUN_FILES:
        (run / f).write_text("{}")
    (run / "model.safetensors").write_bytes(b"weights")
    (run / "checkpoint").mkdir()
    return dict(name=name, axes=axes, status=status)


def test_export_merges_calls_and_leaves_weights(tmp_path):
    axes = dict(preset="tiny", method="mhar", H=2, kv=2, lr=2e-3, seed=0, steps=5)
    first, second, dest = tmp_path / "a", tmp_path / "b", tmp_path / "dest"
    write_manifest(first / "runs", {}, [_run(first / "runs", "r1", axes)])
    write_manifest(second / "runs", {}, [_run(second / "runs", "r2", dict(axes, H=4)),
                                         _run(second / "runs", "r1", axes, status="running")])
    (second / "runs" / "evals" / "r2").mkdir(parents=True)
    (second / "runs" / "evals" / "r2" / "samples.jsonl").write_text("{}\n")
    export_study(first, dest)
    export_study(second, dest)
    rows = {r["name"]: r["status"] for r in read_manifest(dest / "runs")["runs"]}
    assert rows == {"r1": "running", "r2": "finished"}  # the newer call's row wins
    # the metrics travel gzipped (the committed form) and read back as written
    assert sorted(p.name for p in (dest / "runs" / "r2").iterdir()) == sorted(
        METRICS_GZ if f == METRICS else f for f in RUN_FILES)
    assert RunFiles(dest / "runs" / "r2").metrics_path.name == METRICS_GZ
    assert (dest / "runs" / "evals" / "r2" / "samples.jsonl").exists()  # only harness samples are gzipped
    assert json.loads((dest / "runs" / "manifest.json").read_text())["format"] == 1


def test_exported_metrics_and_samples_read_as_the_originals(tmp_path):
    """Export gzips metrics.jsonl and stores the harness's samples_<task>_<date>.jsonl compactly (its
    prompts once in runs/evals/prompts/); the run reader and the McNemar reader give the same rows
    from either form, and a damaged file is one line naming it."""
    from analysis.run import Run
    from analysis.runs import find_run_dirs
    from analysis.stats.errors import StatsError
    from analysis.stats.lm_eval_io import read_samples

    axes = dict(preset="tiny", method="mhar", H=2, kv=2, lr=2e-3, seed=0, steps=5)
    src, dest = tmp_path / "src", tmp_path / "dest"
    write_manifest(src / "runs", {}, [_run(src / "runs", "r1", axes)])
    rows = [dict(step=0, tokens=0, flops=0.0, lr=0.0, val_loss=5.5),
            dict(step=1, tokens=64, flops=1.0, lr=1e-3, loss=5.4, grad_norm=1.0, tokens_per_s=10.0, val_loss=5.25)]
    (src / "runs" / "r1" / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (src / "runs" / "r1" / TRAIN_CONFIG).write_text(json.dumps(dict(method="mhar", seed=0)))
    samples = src / "runs" / "evals" / "r1" / "r1" / "samples_toy_2026-11-26T01-02-03.123456.jsonl"
    samples.parent.mkdir(parents=True)
    lines = [dict(doc_id=i, doc={"q": i}, target=0, arguments={"gen_args_0": {"arg_0": f"q{i}", "arg_1": " a"}},
                  resps=[], filtered_resps=[], filter="none", metrics=["acc"], acc=i % 2) for i in range(5)]
    samples.write_text("".join(json.dumps(r) + "\n" for r in lines))
    export_study(src, dest)

    run = dest / "runs" / "r1"
    assert not (run / METRICS).exists() and (run / METRICS_GZ).exists()
    assert RunFiles(run).metrics() == RunFiles(src / "runs" / "r1").metrics() == rows
    assert find_run_dirs(dest / "runs") == [run]
    assert [r.get("val_loss") for r in Run.read(run).metrics] == [5.5, 5.25]
    packed = dest / "runs" / "evals" / "r1" / "r1" / "samples_toy_2026-11-26T01-02-03.123456.compact.jsonl.gz"
    assert sorted(p.name for p in packed.parent.iterdir()) == [packed.name]  # no copy of the harness's file
    (shard,) = (dest / "runs" / "evals" / "prompts").iterdir()
    assert shard.name.startswith("toy.") and expand(packed) == samples.read_bytes()
    assert ([(x.doc_id, x.scores, x.hashes, x.item_key) for x in read_samples(packed).samples]
            == [(x.doc_id, x.scores, x.hashes, x.item_key) for x in read_samples(samples).samples])
    packed.write_bytes(packed.read_bytes()[:30])  # cut off mid-stream
    with pytest.raises(StatsError, match="not a readable gzip file") as err:
        read_samples(packed)
    assert "\n" not in str(err.value) and str(packed) in str(err.value)
    (run / METRICS_GZ).write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(RunFileError, match="not a readable gzip file"):
        RunFiles(run).metrics()
