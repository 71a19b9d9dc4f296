"""No command deletes or replaces anything before every input is checked (issue 37, item 0).

One table row per data-loss case of the issue (and its neighbours): each runs `mhar` on fresh
copies of a trained tiny run (`RUN`), a converted model or a folder of the user's own files, and
asserts exit status 2, one stderr line without a traceback, every file below the test's folder
byte-for-byte unchanged (SHA-256 before and after) and no output written. Then the guard's
positive side: a killed capture or evaluation does not block its rerun, and --overwrite still
replaces what its own command wrote."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch

from cli_checks import TINY_TRAIN as TINY, cli, train_tiny_run
from mhar_probe.rundir import LOCK_FILE

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return train_tiny_run(tmp_path_factory.mktemp("trained"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    """A tiny random Qwen3 base (ROOT/base) and its conversion (ROOT/conv)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from mhar_probe.convert.convert import convert_checkpoint

    root = tmp_path_factory.mktemp("models")
    Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=8, intermediate_size=64)).save_pretrained(root / "base")
    with pytest.warns(UserWarning, match="no tokenizer"):
        convert_checkpoint(root / "base", root / "conv", heads=2)
    return root


def hashes(root: Path) -> dict[str, str]:
    """Every file below `root` (but run locks) by its SHA-256, and every folder."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*")) if p.name != LOCK_FILE}


def user_folder(t: Path, name: str = "user") -> None:
    """t/NAME: a folder of the user's own files."""
    (t / name / "sub").mkdir(parents=True)
    (t / name / "notes.txt").write_text("my notes")
    (t / name / "sub" / "data.csv").write_text("a,b\n1,2\n")


def sweep_with_foreign_run_dir(t: Path) -> None:
    """TMP/sw: a sweep directory (manifest.json) where its one run's folder holds the user's files."""
    from mhar_probe.sweep.grid import SweepGrid
    from mhar_probe.sweep.manifest import write_manifest

    grid = SweepGrid(methods=["baseline"], presets=["tiny"], steps=[2])
    write_manifest(t / "sw", grid.to_dict(), [])
    user_folder(t / "sw", grid.expand()[0].name)


def grid_file(t: Path) -> None:
    (t / "grid.json").write_text(json.dumps({"methods": ["baseline"], "presets": ["tiny"], "steps": [2]}))


NO_CUDA = "no-cuda"  # the case runs with torch.cuda.is_available() patched to False
SUBPROCESS = "subprocess"  # the case runs `python -m mhar_probe.cli` without TRITON_INTERPRET
Case = tuple[str, Callable[[Path, Path], None] | None, list[str], str, str]
CASES: list[Case] = [
    # (id, prepare(run, tmp), argv with RUN / TMP, a piece of the one stderr line, how to run)
    ("train-overwrite-batch-larger-than-the-corpus", None,
     ["train", "--out", "RUN", "--overwrite", *TINY, "--steps", "2", "--batch-size", "100000"],
     "fewer than one global batch of 100000", ""),
    ("train-overwrite-triton-on-a-cpu", None,
     ["train", "--out", "RUN", "--overwrite", *TINY, "--steps", "2", "--routing-backend", "triton"],
     "--routing-backend triton needs a CUDA device", SUBPROCESS),
    ("train-overwrite-with-resume", None, ["train", "--out", "RUN", "--overwrite", "--resume", "--steps", "3"],
     "--resume and --overwrite contradict each other", ""),
    ("train-device-cuda-without-cuda", None, ["train", "--out", "TMP/new", *TINY, "--steps", "2", "--device", "cuda"],
     "--device cuda: CUDA is not available", NO_CUDA),
    ("train-overwrite-device-cuda-without-cuda", None,
     ["train", "--out", "RUN", "--overwrite", *TINY, "--steps", "2", "--device", "cuda"],
     "--device cuda: CUDA is not available", NO_CUDA),
    ("train-overwrite-a-run-that-holds-the-corpus",
     lambda r, t: (r / "corpus.txt").write_text("def f():\n    return 1\n" * 3000),
     ["train", "--out", "RUN", "--overwrite", *TINY, "--steps", "2", "--corpus", "RUN/corpus.txt"],
     "contains the input corpus", ""),
    ("train-overwrite-a-user-folder", lambda r, t: user_folder(t),
     ["train", "--out", "TMP/user", "--overwrite", *TINY, "--steps", "2"], "not a run directory", ""),
    ("eval-out-is-the-run", None,
     ["eval", "RUN", "--overwrite", "--out", "RUN", "--tasks", "mhar_lastword", "--limit", "2"],
     "is the input run", ""),
    ("eval-out-holds-the-run", None,
     ["eval", "RUN", "--overwrite", "--out", "RUN/..", "--tasks", "mhar_lastword", "--limit", "2"],
     "contains the input run", ""),
    ("eval-out-is-the-runs-checkpoint", None,
     ["eval", "RUN", "--overwrite", "--out", "RUN/checkpoint", "--tasks", "mhar_lastword", "--limit", "2"],
     "would write into checkpoint/ of the input run", ""),
    ("eval-overwrite-a-user-folder", lambda r, t: user_folder(t),
     ["eval", "RUN", "--overwrite", "--out", "TMP/user", "--tasks", "mhar_lastword", "--limit", "2"],
     "not an evaluation directory", ""),
    ("eval-device-cuda-without-cuda", None,
     ["eval", "RUN", "--out", "TMP/ev", "--tasks", "mhar_lastword", "--limit", "2", "--device", "cuda"],
     "--device cuda: CUDA is not available", NO_CUDA),
    ("capture-overwrite-the-runs-weights", None,
     ["capture", "RUN", "--overwrite", "--out", "RUN/model.safetensors", "--tokens", "64"],
     "would write into model.safetensors of the input run", ""),
    ("capture-overwrite-the-runs-config", None, ["capture", "RUN", "--overwrite", "--out", "RUN/config.json"],
     "would write into config.json of the input run", ""),
    ("capture-out-inside-the-checkpoint", None, ["capture", "RUN", "--out", "RUN/checkpoint/r.nc"],
     "would write into checkpoint/ of the input run", ""),
    ("capture-overwrite-a-user-file", lambda r, t: user_folder(t),
     ["capture", "RUN", "--overwrite", "--out", "TMP/user/notes.txt"], "not a routing dataset", ""),
    ("capture-device-cuda-without-cuda", None, ["capture", "RUN", "--out", "TMP/r.nc", "--device", "cuda"],
     "--device cuda: CUDA is not available", NO_CUDA),
    ("convert-overwrite-a-user-folder", "BASE+USER", ["convert", "TMP/base", "TMP/user", "--overwrite"],
     "not a converted model", ""),
    ("convert-dst-is-src", "BASE", ["convert", "TMP/base", "TMP/base", "--overwrite"], "is the input model", ""),
    ("convert-dst-holds-src", "BASE", ["convert", "TMP/base", "TMP", "--overwrite"], "contains the input model", ""),
    ("cpt-out-is-the-source", "CONV", ["cpt", "TMP/conv", "--out", "TMP/conv", "--overwrite", "--steps", "2"],
     "is the input source model", ""),
    ("cpt-overwrite-with-resume", "CONV", ["cpt", "TMP/conv", "--out", "TMP/c", "--overwrite", "--resume"],
     "--resume and --overwrite contradict each other", ""),
    ("cpt-device-cuda-without-cuda", "CONV", ["cpt", "TMP/conv", "--out", "TMP/c", "--device", "cuda"],
     "--device cuda: CUDA is not available", NO_CUDA),
    ("sweep-overwrite-a-user-folder", lambda r, t: (user_folder(t), grid_file(t)),
     ["sweep", "--out", "TMP/user", "--grid", "TMP/grid.json", "--overwrite", "--no-progress"],
     "not a sweep directory", ""),
    ("sweep-into-a-user-folder", lambda r, t: (user_folder(t), grid_file(t)),
     ["sweep", "--out", "TMP/user", "--grid", "TMP/grid.json", "--no-progress"], "not a sweep directory", ""),
    ("sweep-overwrite-a-run-folder-of-user-files", lambda r, t: (sweep_with_foreign_run_dir(t), grid_file(t)),
     ["sweep", "--out", "TMP/sw", "--grid", "TMP/grid.json", "--overwrite", "--no-progress"],
     "not a run directory", ""),
    ("sweep-device-cuda-without-cuda", lambda r, t: grid_file(t),
     ["sweep", "--out", "TMP/sw", "--grid", "TMP/grid.json", "--device", "cuda", "--no-progress"],
     "--device cuda: CUDA is not available", NO_CUDA),
    ("demo-overwrite-runs-of-user-files", lambda r, t: user_folder(t / "d", "runs"),
     ["demo", "--out", "TMP/d", "--overwrite", "--stages", "sweep"], "not a sweep directory", ""),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_nothing_is_lost(case: Case, trained, converted, tmp_path, capsys, monkeypatch):
    name, prepare, argv, needle, how = case
    monkeypatch.setenv("MHAR_CACHE_DIR", str(trained.parent / "cache"))
    run, tmp = tmp_path / "run", tmp_path / "tmp"
    shutil.copytree(trained, run)
    tmp.mkdir()
    if isinstance(prepare, str):
        for part in prepare.split("+"):
            if part == "USER":
                user_folder(tmp)
            else:
                shutil.copytree(converted / part.lower(), tmp / part.lower())
    elif prepare is not None:
        prepare(run, tmp)
    words = [w.replace("RUN", str(run)).replace("TMP", str(tmp)) for w in argv]
    before = hashes(tmp_path)
    capsys.readouterr()
    if how == SUBPROCESS:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, "-m", "mhar_probe.cli", *words], capture_output=True, text=True,
                              env=env, timeout=300)
        rc, err_text = proc.returncode, proc.stderr
    else:
        if how == NO_CUDA:
            monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        rc, err_text = cli(*words), capsys.readouterr().err
    err = [ln for ln in err_text.splitlines() if ln.strip() and not _noise(ln)]
    assert rc == 2, err_text[-3000:]
    assert len(err) == 1 and "Traceback" not in err_text, err
    assert needle in err[0], err[0]
    assert hashes(tmp_path) == before  # nothing deleted, replaced or added


def _noise(line: str) -> bool:
    """Progress bars, logging and the demo's stage banner: not the error."""
    return "it/s]" in line or "%|" in line or line.startswith(("INFO", "WARNING", "=="))


# A command in a subprocess that kills itself (SIGKILL) just before it renames its finished
# output into place: what it leaves must not block the same command run again.
KILLER = r"""
import os, signal, sys
from pathlib import Path
from mhar_probe.cli import main

target, real_replace = sys.argv[1], os.replace

def replace(src, dst):
    if Path(dst).name == target:
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)

os.replace = replace
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("argv,target", [
    (["capture", "RUN", "--tokens", "64", "--no-progress"], "routing.nc"),
    (["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2"], "eval"),
])
def test_a_killed_command_does_not_block_its_rerun(trained, tmp_path, argv, target):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    words = [w.replace("RUN", str(run)) for w in argv]
    env = {**os.environ, "MHAR_CACHE_DIR": str(trained.parent / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", KILLER, target, *words], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not (run / target).exists()
    assert cli(*words) == 0  # the same command again, no --overwrite
    assert (run / target).exists()


@pytest.mark.filterwarnings("ignore:.*has no tokenizer:UserWarning")
def test_overwrite_replaces_what_the_command_wrote(trained, converted, tmp_path):
    """The guard's other side: --overwrite still replaces an earlier output of the same command."""
    from mhar_probe.capture.io import open_routing_dataset

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    assert cli("capture", str(run), "--tokens", "32", "--no-progress") == 0
    assert cli("capture", str(run), "--tokens", "64", "--no-progress") == 2  # exists: needs --overwrite
    assert cli("capture", str(run), "--tokens", "64", "--no-progress", "--overwrite") == 0
    assert open_routing_dataset(run / "routing.nc").attrs["tokens_seen"] == 64
    assert cli("convert", str(converted / "base"), str(tmp_path / "conv"), "--heads", "2") == 0
    assert cli("convert", str(converted / "base"), str(tmp_path / "conv"), "--heads", "4", "--overwrite") == 0
    assert json.loads((tmp_path / "conv" / "config.json").read_text())["routing_heads"] == 4


def test_a_run_killed_before_its_first_checkpoint_reruns_with_resume(trained, tmp_path):
    """Killed after train_config.json, before any checkpoint: nothing to resume, nothing to lose;
    `--resume` starts it again with its saved settings instead of asking for --overwrite."""
    run = tmp_path / "run"
    argv = ["train", "--out", str(run), *TINY, "--steps", "3", "--eval-every", "1", "--checkpoint-every", "100"]
    env = {**os.environ, "MHAR_CACHE_DIR": str(trained.parent / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", KILLER, "metrics.jsonl", *argv], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert (run / "train_config.json").exists() and not (run / "checkpoint").exists()
    assert cli("train", "--out", str(run), "--resume") == 0
    assert json.loads((run / "summary.json").read_text())["finished"] is True
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
