"""A sweep passes every `mhar train` option to its runs (issue 34), and takes the locks before it
trains, restarts or overwrites anything (issue 37, item 4)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from cli_checks import TINY_TRAIN as TINY, cli
from mhar_probe.cli.args import add_train_arguments
from mhar_probe.cli.flags import field_of_dest
from mhar_probe.cli.sweep import _defaults, add_sweep_subparser, grid_from_args
from mhar_probe.rundir import LOCK_FILE, RunLock
from mhar_probe.train import TrainConfig

#: the axes a sweep spells as lists; every other train option is shared by its runs
AXIS_DESTS = {"preset", "method", "heads", "kv_heads", "lr", "seed", "steps"}

#: for every option a sweep shares: command-line words that set it to something other than its
#: default, and the value train_config.json then records. The test below fails when a new
#: `mhar train` flag is missing here, so each one is checked to reach the swept runs.
NON_DEFAULT = {
    "corpus": (["--corpus", "installed"], "installed"),
    "corpus_max_bytes": (["--corpus-max-bytes", "12345"], 12345),
    "seq_len": (["--seq-len", "16"], 16),
    "warmup": (["--warmup", "1"], 1),
    "weight_decay": (["--weight-decay", "0.125"], 0.125),
    "grad_clip": (["--grad-clip", "0.5"], 0.5),
    "batch_size": (["--batch-size", "2"], 2),
    "micro_batch": (["--micro-batch", "1"], 1),
    "eval_every": (["--eval-every", "1"], 1),
    "eval_batches": (["--eval-batches", "1"], 1),
    "checkpoint_every": (["--checkpoint-every", "1"], 1),
    "device": (["--device", "cpu"], "cpu"),
    "threads": (["--threads", "1"], 1),
    "routing_backend": (["--routing-backend", "eager"], "eager"),
    "fsdp": (["--fsdp"], True),
    "routing_douts": (["--routing-douts", "storage"], "storage"),
    "routing_forward": (["--routing-forward", "plain"], "plain"),
    "routing_backward": (["--routing-backward", "gather"], "gather"),
    "cuda_graphs": (["--no-cuda-graphs"], False),
    "overlap_steps": (["--overlap-steps"], True),
    "loss_kernel": (["--loss-kernel", "torch"], "torch"),
    "compile_sublayers": (["--no-compile-sublayers"], False),
    "progress": (["--no-progress"], False),
    "extra": (["--layers", "1", "--hidden-size", "32", "--attn-heads", "2", "--ffn", "64"],
              dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)),
    "tokenizer": (["--tokenizer", "TOKENIZER"], "TOKENIZER"),
    "vocab_size": (["--vocab-size", "300"], 300),
}
#: what a CPU process cannot train with (FSDP2 needs torchrun): checked at the config only
NOT_ON_ONE_CPU = {"fsdp"}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_every_train_option_is_shared_by_a_sweep():
    """By construction: the options a sweep passes on are every `mhar train` flag's field but the
    axes, the run directory's and the time limit (the sweep's own), and this test has a value for each."""
    from mhar_probe.cli.sweep import common_options

    train = argparse.ArgumentParser(add_help=False)
    add_train_arguments(train)
    # --time-limit is the sweep's own (one deadline for all its runs), not an option each run gets
    shared = {field_of_dest(TrainConfig).get(a.dest, a.dest) for a in train._actions
              if a.dest not in AXIS_DESTS | {"time_limit"} and a.option_strings}
    assert shared == set(common_options()) == set(NON_DEFAULT)
    assert all(_defaults()[name] != value for name, (_, value) in NON_DEFAULT.items() if name != "tokenizer")


def _sweep_args(out: Path, *words: str) -> argparse.Namespace:
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    add_sweep_subparser(sub)
    return sub.choices["sweep"].parse_args(["--out", str(out), "--methods", "baseline", "mhar", *words])


def test_every_train_option_reaches_each_swept_runs_config(tmp_path):
    """Each option of `mhar train` but the axes, given to `mhar sweep` with a value other than its
    default, is in the TrainConfig of every run of the grid (the CUDA-only ones too)."""
    words = [w for name, (argv, _) in NON_DEFAULT.items() for w in argv]
    args = _sweep_args(tmp_path / "s", "--seeds", "1", "2", *words)
    grid = grid_from_args(args, _defaults())
    specs = grid.expand()
    assert len(specs) == 4
    for spec in specs:
        cfg = spec.train_config(str(tmp_path / "s" / spec.name), grid.common)
        for name, (_, value) in NON_DEFAULT.items():
            assert getattr(cfg, name) == value, name


def test_every_train_option_reaches_each_runs_train_config(tmp_path):
    """On a real tiny sweep: every option a CPU can train with (the step flags issue 34 found
    dropped among them: --routing-douts, --no-cuda-graphs, --loss-kernel, --no-compile-sublayers)
    is in each run's train_config.json."""
    out = tmp_path / "sweep"
    tokenizer = tmp_path / "tokenizer"
    assert cli("train", "--out", str(tmp_path / "first"), *TINY, "--steps", "1") == 0  # a tokenizer to pass on
    shutil.copytree(tmp_path / "first", tokenizer, ignore=shutil.ignore_patterns("*.safetensors", "*.pt"))
    words = [str(tokenizer) if w == "TOKENIZER" else w for name, (argv, _) in NON_DEFAULT.items()
             if name not in NOT_ON_ONE_CPU for w in argv]
    # the corpus: a small file, so the run stays fast (--corpus-max-bytes 0 takes all of it)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i}: the quick brown fox jumps over the lazy dog "
                                                  f"{i * i} times. " * 8}) + "\n" for i in range(200)))
    words[words.index("installed")] = str(corpus)
    assert cli("sweep", "--out", str(out), *words, "--methods", "baseline", "mhar", "--steps", "2") == 0
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 2
    for run in runs:
        saved = json.loads((run / "train_config.json").read_text())
        for name, (_, value) in NON_DEFAULT.items():
            if name in NOT_ON_ONE_CPU:
                continue
            want = {"corpus": str(corpus), "tokenizer": str(tokenizer)}.get(name, value)
            assert saved[name] == want, (run.name, name, saved[name])


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
