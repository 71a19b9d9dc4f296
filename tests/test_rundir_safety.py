"""Nothing lost, nothing mixed: `mhar train` on existing run directories.

Bad input with --overwrite leaves the old run untouched; --overwrite removes only run
directories; --resume takes the run's saved settings; one writer per run directory; a kill -9
at any rename of the checkpoint swap leaves a run that resumes exactly."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cli_checks import TINY_TRAIN as TINY, cli
from mhar_probe.rundir import LOCK_FILE, RunLock


def train(out: Path, *flags: str) -> int:
    return cli("train", "--out", str(out), *TINY, *flags)


def snapshot(root: Path) -> dict[str, str]:
    """Every file below `root` (but the lock) by its SHA-256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


def one_line_refusal(capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        assert train(root / "run", "--steps", "4", "--eval-every", "2", "--checkpoint-every", "2") == 0
    return root / "run"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("flags,needle", [
    (["--batch-size", "0"], "--batch-size: 0 is too small"),
    (["--eval-every", "0"], "--eval-every: 0 is too small"),
    (["--checkpoint-every", "0"], "--checkpoint-every: 0 is too small"),
    (["--layers", "0"], "--layers: 0 is too small"),
    (["--steps", "-5"], "--steps: -5 is too small"),
    (["--micro-batch", "0"], "--micro-batch: 0 is too small"),
    (["--seq-len", "0"], "--seq-len: 0 is too small"),
    (["--lr", "nan"], "--lr: nan must be a finite number above 0"),
    (["--lr", "inf"], "--lr: inf must be a finite number above 0"),
    (["--lr", "-1"], "--lr: -1 must be a finite number above 0"),
    (["--corpus", "EMPTY"], "empty"),
    (["--heads", "3"], "not divisible"),
])
def test_overwrite_with_bad_input_keeps_the_old_run(finished_run, tmp_path, capsys, flags, needle):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = snapshot(run)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    flags = [str(empty) if f == "EMPTY" else f for f in flags]
    assert train(run, "--overwrite", *flags) == 2
    one_line_refusal(capsys, needle)
    assert snapshot(run) == before


def test_overwrite_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    folder = tmp_path / "thesis"
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.tex").write_text("\\documentclass{article}")
    (folder / "sub" / "fig.png").write_bytes(b"png")
    before = snapshot(folder)
    assert train(folder, "--overwrite", "--steps", "2") == 2
    one_line_refusal(capsys, "not a run directory")
    assert snapshot(folder) == before and not (folder / "config.json").exists()


def test_overwrite_replaces_a_run(finished_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / ".metrics.jsonl.abc.tmp").write_text("left by a killed writer")
    assert train(run, "--overwrite", "--steps", "2", "--eval-every", "1") == 0
    assert json.loads((run / "train_config.json").read_text())["steps"] == 2
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert not (run / ".metrics.jsonl.abc.tmp").exists()


def test_resume_takes_the_saved_settings(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli("train", "--out", str(run), *TINY, "--steps", "6", "--lr", "0.002", "--seed", "7",
                 "--eval-every", "2", "--checkpoint-every", "2", "--warmup", "1") == 0
    saved = json.loads((run / "train_config.json").read_text())
    (run / "summary.json").unlink()
    before = snapshot(run)
    capsys.readouterr()
    for flags, needle in [(["--lr", "0.001"], "--lr 0.001 (the run has 0.002)"),
                          (["--seed", "8"], "--seed 8 (the run has 7)"),
                          (["--batch-size", "4"], "--batch-size 4 (the run has 2)"),
                          (["--layers", "2"], "--extra"),
                          (["--steps", "3"], "can only be extended")]:
        assert cli("train", "--out", str(run), "--resume", *flags) == 2
        one_line_refusal(capsys, needle)
        assert snapshot(run) == before
    # the README's form: --resume alone continues with the run's own settings, and more steps are recorded
    assert cli("train", "--out", str(run), "--resume", "--steps", "8", "--no-progress") == 0
    now = json.loads((run / "train_config.json").read_text())
    assert now == {**saved, "steps": 8, "resume": True, "progress": False}
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()][-1] == 8


def test_a_second_writer_is_refused_with_the_holder_named(finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = snapshot(run)
    capsys.readouterr()
    with RunLock(run):
        assert train(run, "--overwrite", "--steps", "2") == 2
        one_line_refusal(capsys, f"in use by pid {os.getpid()}")
        assert cli("train", "--out", str(run), "--resume") == 2
        one_line_refusal(capsys, "in use by pid")
    assert snapshot(run) == before


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom mhar_probe.rundir import RunLock\n"
                               f"RunLock({str(run)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(Exception, match="in use by pid"):
        RunLock(run).acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = RunLock(run).acquire()  # the kernel dropped the dead holder's lock
    assert f"pid {os.getpid()}" in (run / LOCK_FILE).read_text()
    lock.release()


# A training run in a subprocess that kills itself (SIGKILL) at one rename of the checkpoint
# swap: the renames are numbered over the run, and `when` says before or after rename `nth`.
KILLER = r"""
import os, signal, sys
from pathlib import Path
import mhar_probe.rundir as rundir
from mhar_probe.cli import main

nth, when = int(sys.argv[1]), sys.argv[2]
real_replace, count = os.replace, [0]

def replace(src, dst):
    swap = Path(dst).name in (rundir.CHECKPOINT, f".{rundir.CHECKPOINT}.old")
    if swap:
        count[0] += 1
    if swap and count[0] == nth and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)
    if swap and count[0] == nth and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)

os.replace = replace
sys.exit(main(sys.argv[3:]))
"""
KILL_RUN = ["--steps", "6", "--eval-every", "2", "--checkpoint-every", "2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("whole") / "run"
    assert train(run, *KILL_RUN) == 0
    return run


@pytest.mark.parametrize("nth,when", [(1, "before"), (1, "after"), (2, "before"), (2, "after"), (3, "after")])
def test_kill_during_the_checkpoint_swap_resumes_exactly(uninterrupted, tmp_path, nth, when):
    """Rename 1 moves the first checkpoint into place (before it, only its staged copy exists).
    Renames 2 and 3 are the second checkpoint's: checkpoint -> .checkpoint.old, then the new one
    -> checkpoint. After 2 no checkpoint/ exists, only its two complete copies beside it."""
    run = tmp_path / "run"
    argv = ["train", "--out", str(run), *TINY, *KILL_RUN]
    proc = subprocess.run([sys.executable, "-c", KILLER, str(nth), when, *argv], capture_output=True, text=True,
                          timeout=300, env={**os.environ})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert cli("train", "--out", str(run), "--resume") == 0
    assert not [p.name for p in run.iterdir() if p.name.startswith(".checkpoint.") or p.name.endswith(".tmp")]
    want, got = load_file(uninterrupted / "model.safetensors"), load_file(run / "model.safetensors")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    rows = lambda r: [json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    strip = lambda m: {k: v for k, v in m.items() if k not in ("tokens_per_s", "step_time")}  # noqa: E731
    assert [strip(m) for m in rows(run)] == [strip(m) for m in rows(uninterrupted)]


def test_a_diverged_run_stops_and_is_marked_failed(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli("train", "--out", str(run), *TINY, "--steps", "8", "--lr", "1e30", "--warmup", "0",
               "--eval-every", "4", "--corpus-max-bytes", "0") == 2  # (no cap: no note of what a cap drops)
    one_line_refusal(capsys, "diverged")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] is False and any(w in summary["failed"] for w in ("nan", "inf"))
    assert not (run / "model.safetensors").exists()
