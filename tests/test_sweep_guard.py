"""A sweep passes every `mhar train` option to its runs (issue 34), and takes the locks before it
trains, restarts or overwrites anything (issue 37, item 4)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from cli_checks import TINY_TRAIN as TINY, cli
from mhar_probe.cli.args import _FIELD_OF_DEST, add_train_arguments
from mhar_probe.cli.sweep import _defaults, add_sweep_subparser, grid_from_args
from mhar_probe.rundir import LOCK_FILE, RunLock
from mhar_probe.train import TrainConfig

#: the axes a sweep spells as lists; every other train option is shared by its runs
AXIS_DESTS = {"preset", "method", "heads", "kv_heads", "lr", "seed", "steps"}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _non_default(action: argparse.Action) -> list[str]:
    """Command-line words that set `action` to something other than its default."""
    flag = action.option_strings[0]
    if action.nargs == 0:  # store_true, or --x / --no-x
        return [flag] if action.default in (None, False) else [f"--no-{flag[2:]}"]
    if action.choices:
        return [flag, next(str(c) for c in action.choices if c != action.default)]
    if action.type is not None and getattr(action.type, "__name__", "").startswith(("integer", "int")):
        return [flag, str((action.default or 0) + 3 if action.dest != "vocab_size" else 300)]
    if action.type is float or getattr(action.type, "__name__", "") == "positive_float":
        return [flag, "0.125"]
    return [flag, "cpu" if action.dest == "device" else f"some-{action.dest}"]


def test_every_train_option_reaches_each_swept_run(tmp_path):
    """By construction: each option of `mhar train` but the axes, given to `mhar sweep` with a
    value other than its default, is in the TrainConfig of every run of the grid."""
    from mhar_probe.cli.sweep import common_options

    train = argparse.ArgumentParser(add_help=False)
    add_train_arguments(train)
    shared = [a for a in train._actions if a.dest not in AXIS_DESTS and a.option_strings]
    assert {a.dest for a in shared} - set(_FIELD_OF_DEST) == set(common_options())
    assert set(common_options()) <= {f.name for f in fields(TrainConfig)}
    words = [w for a in shared if a.dest not in _FIELD_OF_DEST for w in _non_default(a)]
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    add_sweep_subparser(sub)
    args = sub.choices["sweep"].parse_args(["--out", str(tmp_path / "s"), "--methods", "baseline", "mhar",
                                            "--seeds", "1", "2", *words])
    grid = grid_from_args(args, _defaults())
    specs = grid.expand()
    assert len(specs) == 4
    for spec in specs:
        cfg = spec.train_config(str(tmp_path / "s" / spec.name), grid.common)
        for name in common_options():
            given = getattr(args, name)
            assert getattr(cfg, name) == given and given != train.get_default(name), name


STEP_FLAGS = ["--routing-douts", "storage", "--no-cuda-graphs", "--loss-kernel", "torch", "--no-compile-sublayers"]


def test_the_step_flags_reach_every_runs_train_config(tmp_path):
    """The four flags issue 34 found dropped, on a real tiny sweep (values a CPU can train with;
    their CUDA-only values are refused on a CPU, so the test above checks those at the config)."""
    out = tmp_path / "sweep"
    assert cli("sweep", "--out", str(out), *TINY, "--methods", "baseline", "mhar", "--steps", "2",
               "--eval-every", "1", *STEP_FLAGS) == 0
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 2
    for run in runs:
        saved = json.loads((run / "train_config.json").read_text())
        assert (saved["routing_douts"], saved["cuda_graphs"], saved["loss_kernel"], saved["compile_sublayers"]) == (
            "storage", False, "torch", False), run.name


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


def one_line(capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweeps") / "sweep"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(out.parent / "cache"))
        assert cli("sweep", "--out", str(out), *TINY, "--methods", "baseline", "--steps", "2", "--eval-every", "1",
                   "--checkpoint-every", "1") == 0
    return out


SWEEP = ["--methods", "baseline", "--steps", "2", "--eval-every", "1", "--checkpoint-every", "1"]


def test_a_second_sweep_over_a_running_one_is_refused(finished_sweep, tmp_path, capsys):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    run = next(p for p in out.iterdir() if p.is_dir())
    (run / "summary.json").unlink()  # interrupted: a sweep would resume it
    before = snapshot(out)
    capsys.readouterr()
    with RunLock(out):  # the first sweep, still running
        for extra in ([], ["--overwrite"]):
            assert cli("sweep", "--out", str(out), *TINY, *SWEEP, *extra) == 2
            one_line(capsys, f"is in use by pid {os.getpid()}")
            assert snapshot(out) == before


def test_sweep_overwrite_of_a_run_in_training_is_refused(finished_sweep, tmp_path, capsys):
    """`mhar train` (or another sweep's trainer) holds the run's lock: --overwrite leaves it alone."""
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    run = next(p for p in out.iterdir() if p.is_dir())
    before = {k: v for k, v in snapshot(out).items() if k.startswith(run.name)}
    capsys.readouterr()
    with RunLock(run):
        assert cli("sweep", "--out", str(out), *TINY, *SWEEP, "--overwrite") == 2
        one_line(capsys, f"{run} is in use by pid {os.getpid()}")
    assert {k: v for k, v in snapshot(out).items() if k.startswith(run.name)} == before
    # free again: --overwrite retrains it
    assert cli("sweep", "--out", str(out), *TINY, *SWEEP, "--overwrite") == 0
    assert json.loads((run / "summary.json").read_text())["finished"] is True
