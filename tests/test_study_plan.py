"""Study plans: stages and grids are checked before any work, each grid's runs are named, and an
export copies the report's inputs without weights, merging the manifests of several calls."""

from __future__ import annotations

import json

import pytest

from mhar_probe.demo.export import RUN_FILES, export_study
from mhar_probe.demo.plan import DEMO, LADDER
from mhar_probe.demo.run import check_stages
from mhar_probe.errors import UserError
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
    assert sorted(p.name for p in (dest / "runs" / "r2").iterdir()) == sorted(RUN_FILES)
    assert (dest / "runs" / "evals" / "r2" / "samples.jsonl").exists()
    assert json.loads((dest / "runs" / "manifest.json").read_text())["format"] == 1
