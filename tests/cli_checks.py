"""Shared by the command-line tests: the smallest training flags and an in-process `mhar`."""

from __future__ import annotations

from pathlib import Path

from mhar_probe.cli import main

#: `mhar train` flags for a model that trains a step in well under a second on one CPU core
TINY_TRAIN = ["--preset", "tiny", "--layers", "1", "--hidden-size", "32", "--attn-heads", "2", "--kv-heads", "1",
              "--ffn", "64", "--seq-len", "16", "--batch-size", "2", "--vocab-size", "300",
              "--corpus-max-bytes", "60000", "--eval-batches", "1", "--no-progress"]


def cli(*argv: str) -> int:
    """`mhar ARGV` in-process; its exit status (argparse's refusals exit, the others return)."""
    try:
        return main(list(argv))
    except SystemExit as exc:
        return int(exc.code)


def train_tiny_run(root: Path, *extra: str) -> Path:
    """A 2-step TINY_TRAIN run at ROOT/run (checkpoint and evaluation at every step), with its
    tokenizer cache under ROOT/cache; `extra`: more `mhar train` flags."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        assert cli("train", "--out", str(root / "run"), *TINY_TRAIN, *extra, "--steps", "2", "--eval-every", "1",
                   "--checkpoint-every", "1") == 0
    return root / "run"
