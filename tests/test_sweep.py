"""Sweeps: grid expansion and names, manifest, skip finished / resume interrupted runs, CLI;
and one tiny real sweep (2 runs, a few steps) feeding the runs dataset and the figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from analysis.runs import load_runs
from figures.build import build
from mhar_probe.errors import UserError
from mhar_probe.runfiles import read_metrics
from mhar_probe.sweep import SweepGrid, run_sweep
from mhar_probe.cli.sweep import add_sweep_subparser

COMMON = dict(seq_len=32, batch_size=4, eval_every=2, eval_batches=1, vocab_size=512, corpus_max_bytes=150_000,
              checkpoint_every=2, extra=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


def test_grid_expansion_names_and_rules():
    g = SweepGrid(methods=["baseline", "attnres", "mhar"], heads=[2, 4, None], kv_heads=[None, 1],
                  lrs=[5e-4, 2.5e-4], seeds=[1], presets=["tiny"], steps=[10])
    names = [s.name for s in g.expand()]
    assert names[:5] == ["tiny-baseline-kv2-lr5e-4-s1-n10", "tiny-attnres-h1-kv2-lr5e-4-s1-n10",
                         "tiny-mhar-h2-kv2-lr5e-4-s1-n10", "tiny-mhar-h4-kv2-lr5e-4-s1-n10",
                         "tiny-baseline-kv1-lr5e-4-s1-n10"]
    assert "tiny-mhar-h1-kv1-lr2.5e-4-s1-n10" in names  # H = None takes the KV heads
    assert len(names) == len(set(names)) == 2 * (1 + 1 + 2 + 1 + 1 + 3)
    with pytest.raises(UserError, match="d % H|divide|H="):
        SweepGrid(methods=["mhar"], heads=[3]).expand()
    with pytest.raises(UserError, match="unknown method"):
        SweepGrid(methods=["nope"]).expand()
    with pytest.raises(UserError, match="sweep axes"):
        SweepGrid(common=dict(lr=1e-3)).expand()


def test_sweep_resumes_skips_and_feeds_figures(tmp_path, capfd):
    out = tmp_path / "sweep"
    # 12 steps evaluated at every one: 12 evaluations after step 0, enough for the tail-mean (the last 11)
    grid = dict(methods=["baseline", "mhar"], heads=[2], presets=["tiny"], steps=[12], seeds=[0], lrs=[3e-3],
                common={**COMMON, "eval_every": 1, "progress": False})
    # 1) interrupted: every run stops after 2 of its 12 steps
    r1 = run_sweep({**grid, "common": {**grid["common"], "stop_after": 2}}, out, progress=False)
    names = [s.name for s in r1.runs]
    assert names == ["tiny-baseline-kv2-lr3e-3-s0-n12", "tiny-mhar-h2-kv2-lr3e-3-s0-n12"]
    assert set(r1.after.values()) == {"interrupted"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["name"] for r in manifest["runs"]] == names
    assert {r["status"] for r in manifest["runs"]} == {"interrupted"}
    # 2) resumed: both continue from step 2 and finish
    actions = []
    r2 = run_sweep(grid, out, progress=False, on_run=lambda s, a: actions.append(a))
    assert actions == ["resume", "resume"] and r2.trained == names
    assert "Writing model shards" not in capfd.readouterr().err  # no library bar inside the sweep's (issue 54)
    from transformers.utils import logging as hf_logging
    assert hf_logging.is_progress_bar_enabled()  # and put back afterwards
    assert [m["step"] for m in read_metrics(out / names[1] / "metrics.jsonl")] == list(range(13))
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(r["status"] == "finished" and r["tail_mean_val_loss"] > 0 for r in manifest["runs"])
    assert manifest["runs"][1]["axes"] == dict(preset="tiny", method="mhar", H=2, kv=2, lr=3e-3, seed=0, steps=12)
    # 3) finished runs are skipped
    actions.clear()
    r3 = run_sweep(grid, out, progress=False, on_run=lambda s, a: actions.append(a))
    assert actions == ["skip", "skip"] and r3.skipped == names and not r3.trained
    # other shared options into the same directory need --overwrite
    with pytest.raises(UserError, match="different shared training options"):
        run_sweep({**grid, "common": {**grid["common"], "batch_size": 8}}, out, progress=False)
    # the dataset and the figures read the sweep
    ds = load_runs(out)
    assert sorted(ds["run"].values.tolist()) == names
    summary = json.loads((out / names[1] / "summary.json").read_text())
    assert float(ds["tail_mean"].sel(run=names[1])) == pytest.approx(summary["tail_mean_val_loss"])
    assert int(ds["H"].sel(run=names[1])) == 2 and int(ds["H"].sel(run=names[0])) == 0
    rep = build(out, tmp_path / "figs", benchmarks=[])
    assert {"training_curves", "table_main", "table_corpus"} <= set(rep.made) and not rep.failed
    assert rep.made["table_main"][0].data["table"].values()[0][2] == pytest.approx(
        json.loads((out / names[0] / "summary.json").read_text())["tail_mean_val_loss"])


def test_time_limit_stops_the_sweep_in_its_run_and_a_rerun_finishes(tmp_path, monkeypatch):
    """Two runs of 4 steps, one deadline of 25 s on a fake clock that advances 10 s per training
    step: the first run stops cleanly after its step 3 (checkpointed there), the second is not
    started; the same call without a limit resumes the first and trains the second."""
    from mhar_probe.train import Trainer

    now = [0.0]
    real_step = Trainer.train_step

    def ten_seconds_a_step(self):
        now[0] += 10.0
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", ten_seconds_a_step)
    out = tmp_path / "sweep"
    grid = dict(methods=["baseline", "mhar"], heads=[2], presets=["tiny"], steps=[4], seeds=[0], lrs=[3e-3],
                common={**COMMON, "progress": False, "checkpoint_every": 100})
    r1 = run_sweep(grid, out, progress=False, time_limit=25, clock=lambda: now[0])
    first, second = [s.name for s in r1.runs]
    assert r1.time_limited and r1.after == {first: "interrupted", second: "pending"} and not r1.trained
    assert json.loads((out / first / "checkpoint" / "state.json").read_text())["step"] == 3
    assert not (out / first / "summary.json").exists() and not (out / second).exists()
    assert [r["status"] for r in json.loads((out / "manifest.json").read_text())["runs"]] == \
        ["interrupted", "pending"]
    actions = []
    r2 = run_sweep(grid, out, progress=False, on_run=lambda s, a: actions.append(a))
    assert actions == ["resume", "train"] and r2.trained == [first, second] and not r2.time_limited
    assert [m["step"] for m in read_metrics(out / first / "metrics.jsonl")] == list(range(5))


def test_cli_time_limit_stops_before_the_next_run_and_says_how_to_continue(tmp_path, capsys):
    """A deadline already past when the sweep would start its (first) run: no run starts, exit 0,
    and one line says how to continue; a time limit of 0 or below is refused by argparse (exit 2)."""
    p = argparse.ArgumentParser(prog="mhar")
    add_sweep_subparser(p.add_subparsers(dest="command"))
    argv = ["sweep", "--out", str(tmp_path / "s"), "--methods", "baseline", "--steps", "2", "--layers", "2",
            "--no-progress", "--corpus-max-bytes", "150000", "--seq-len", "32", "--batch-size", "4"]
    args = p.parse_args([*argv, "--time-limit", "1e-9"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "stopped at the time limit (1e-09 s) with 1 runs unfinished (from tiny-baseline-kv2-lr5e-4-s42-n2)" in out
    assert "run the same command again to continue" in out
    assert not (tmp_path / "s" / "tiny-baseline-kv2-lr5e-4-s42-n2").exists()
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["runs"][0]["status"] == "pending"
    for bad in ("0", "-5", "nan"):
        with pytest.raises(SystemExit) as exc:
            p.parse_args([*argv, "--time-limit", bad])
        assert exc.value.code == 2
        assert f"--time-limit: {bad} must be a finite number above 0" in capsys.readouterr().err
    for bad in (0, -5.0, float("inf"), "30"):  # the Python API checks what the flag's parser checks
        with pytest.raises(UserError, match="--time-limit .* must be a"):
            run_sweep(SweepGrid(steps=[2]), tmp_path / "t", time_limit=bad)
    assert not (tmp_path / "t").exists()


def test_cli_dry_run_and_refuses_foreign_directory(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_sweep_subparser(p.add_subparsers(dest="command"))
    args = p.parse_args(["sweep", "--out", str(tmp_path / "s"), "--methods", "baseline", "mhar", "--heads", "1", "kv",
                         "--kv-heads", "1", "preset", "--lrs", "1e-3", "--steps", "5", "--layers", "2", "--dry-run"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "pending      tiny-mhar-h1-kv1-lr1e-3-s42-n5" in out and "5 runs" in out
    assert not (tmp_path / "s").exists()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x.txt").write_text("x")
    with pytest.raises(UserError, match="no manifest"):
        run_sweep(SweepGrid(steps=[2]), tmp_path / "foreign")
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(dict(methods=["hyper"], seeds=[1, 2], common=dict(batch_size=8))))
    args = p.parse_args(["sweep", "--out", str(tmp_path / "g"), "--grid", str(grid_file), "--dry-run"])
    assert args.func(args) == 0
    assert "tiny-hyper-kv2-lr5e-4-s2-n300" in capsys.readouterr().out


def test_only_rank_zero_judges_the_sweep_directory(tmp_path, monkeypatch):
    """Under torchrun rank 0 creates OUT, locks it and writes the manifest through a temporary file
    before the ranks meet; another rank that read OUT in that window saw a half-written sweep
    (the temporary, no manifest yet) and refused it, which stopped a 4-GPU launch. Only rank 0
    judges OUT; the others read their runs' own folders."""
    out = tmp_path / "s"
    out.mkdir()
    (out / ".manifest.json.k3x9.tmp").write_text("{")  # rank 0's manifest, half written
    grid = SweepGrid(steps=[2], common=COMMON)
    monkeypatch.setenv("RANK", "1")
    result = run_sweep(grid, out, dry_run=True)
    assert result.before == {s.name: "pending" for s in grid.expand()}
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(UserError, match="no manifest"):
        run_sweep(grid, out, dry_run=True)
