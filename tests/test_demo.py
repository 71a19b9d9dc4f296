"""The demo calls the library functions of analysis / figures (no parser objects below the command
line), and runs are found through the sweep manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mhar_probe.demo
from mhar_probe.demo.runs import finished, one, swept_runs
from mhar_probe.errors import UserError
from mhar_probe.sweep.manifest import write_manifest


def test_the_demo_builds_no_parser_objects():
    """Before: the demo mirrored the commands' parsers as dataclasses and handed the handlers fake
    `argparse.Namespace`s; now it calls the functions the commands call."""
    for path in Path(mhar_probe.demo.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert "argparse" not in text and "Namespace" not in text and "cmd_" not in text, path.name


def test_runs_come_from_the_manifest_not_the_folder_names(tmp_path):
    def axes(method: str, H: int | None, seed: int) -> dict:
        return dict(preset="tiny", method=method, H=H, kv=2, lr=2e-3, seed=seed, steps=5)

    # names that a pattern on folder names would misread; the manifest's axes are the truth
    write_manifest(tmp_path, {}, [
        dict(name="zz-a", axes=axes("mhar", 2, 42), status="finished"),
        dict(name="aa-mhar-h2-s42", axes=axes("mhar_hw", 2, 42), status="finished"),
        dict(name="mm-b", axes=axes("baseline", None, 42), status="interrupted"),
    ])
    (tmp_path / "stray-mhar-h2-s42").mkdir()  # a folder no sweep made
    runs = swept_runs(tmp_path)
    assert [r.name for r in runs] == ["aa-mhar-h2-s42", "mm-b", "zz-a"]
    assert one(runs, method="mhar", heads=2, seed=42).path == tmp_path / "zz-a"
    assert [r.name for r in finished(runs)] == ["aa-mhar-h2-s42", "zz-a"]
    with pytest.raises(UserError, match="expected one run"):
        one(runs, method="mhar", heads=4, seed=42)
    with pytest.raises(UserError, match="no manifest.json"):
        swept_runs(tmp_path / "stray-mhar-h2-s42")
    assert json.loads((tmp_path / "manifest.json").read_text())["format"] == 1


def test_a_run_whose_summary_says_finished_is_finished_whatever_the_manifest_says(tmp_path):
    """A device call stopped by its budget after the last step leaves the manifest at
    "interrupted"; the run directory is the truth (sweep.manifest.run_status)."""
    axes = dict(preset="tiny", method="baseline", H=None, kv=2, lr=2e-3, seed=0, steps=5)
    write_manifest(tmp_path, {}, [dict(name="b", axes=axes, status="interrupted"),
                                  dict(name="c", axes={**axes, "seed": 1}, status="interrupted")])
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "summary.json").write_text(json.dumps(dict(finished=True)))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text(json.dumps(dict(finished=False)))
    assert [r.name for r in finished(swept_runs(tmp_path))] == ["b"]
