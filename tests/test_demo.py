"""The demo's typed calls into analysis / figures carry exactly the options (names and
defaults) of the commands they stand for, and runs are found through the sweep manifest."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import pytest

from mhar_probe.demo.analysis_steps import CegOptions, FiguresOptions, McNemarOptions, ProbeOptions, TailsOptions
from mhar_probe.demo.runs import finished, one, swept_runs
from mhar_probe.errors import UserError
from mhar_probe.sweep.manifest import write_manifest


def _parsed(register, argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = vars(parser.parse_args(argv))
    return {k: v for k, v in args.items() if k not in ("command", "stats_command", "func")}


@pytest.mark.parametrize("options,argv", [
    (ProbeOptions(inputs=["a.nc"]), ["probe", "a.nc"]),
    (McNemarOptions(dir_a="a", dir_b="b"), ["stats", "mcnemar", "a", "b"]),
    (TailsOptions(runs=["r"]), ["stats", "tails", "r"]),
    (CegOptions(runs=["r"]), ["stats", "ceg", "r"]),
    (FiguresOptions(runs="r", out="o"), ["figures", "r", "--out", "o"]),
])
def test_options_match_the_commands_defaults(options, argv):
    from analysis.probes.cli import add_probe_subparser
    from analysis.stats.cli import add_stats_subparser
    from figures.cli import add_figures_subparser

    register = {"probe": add_probe_subparser, "stats": add_stats_subparser,
                "figures": add_figures_subparser}[argv[0]]
    assert asdict(options) == _parsed(register, argv)


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
