"""Outputs carry the user's umask: a file written through `mhar_probe.atomic` (and so every run
file, checkpoint and figure) is as readable as one made by `open`, a directory as one made by
`mkdir` -- 0644 / 0755 under umask 022, not mkstemp's owner-only 0600 / 0700."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cli_checks import TINY_TRAIN, cli
from mhar_probe import atomic


@pytest.fixture
def umask():
    """Set the process umask for one test and put the old one back."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_atomic_files_and_directories_take_the_umask(tmp_path, umask, mask):
    umask(mask)
    f = atomic.write_text(tmp_path / "a.txt", "x")
    g = atomic.write_with(tmp_path / "b.bin", lambda tmp: tmp.write_bytes(b"y"))
    d = atomic.build_dir(tmp_path / "d", lambda tmp: (tmp / "inner.txt").write_text("z"))
    reference_file = tmp_path / "plain.txt"
    reference_file.write_text("x")  # what open() gives under this umask
    (tmp_path / "plain_dir").mkdir()
    assert mode(f) == mode(g) == mode(reference_file) == 0o666 & ~mask
    assert mode(d) == mode(tmp_path / "plain_dir") == 0o777 & ~mask


def test_replacing_a_directory_keeps_the_umask_mode(tmp_path, umask):
    umask(0o022)
    atomic.build_dir(tmp_path / "d", lambda tmp: (tmp / "a").write_text("1"))
    atomic.build_dir(tmp_path / "d", lambda tmp: (tmp / "b").write_text("2"), replace=True)
    assert mode(tmp_path / "d") == 0o755


def test_a_trained_run_is_readable_by_others_under_umask_022(tmp_path, umask, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    umask(0o022)
    run = tmp_path / "run"
    assert cli("train", "--out", str(run), *TINY_TRAIN, "--steps", "2", "--eval-every", "1",
               "--checkpoint-every", "1") == 0
    for name in ("model.safetensors", "metrics.jsonl", "summary.json", "config.json", "train_config.json"):
        assert mode(run / name) == 0o644, name
    assert mode(run / "checkpoint") == 0o755
    for entry in (run / "checkpoint").rglob("*"):
        assert mode(entry) == (0o755 if entry.is_dir() else 0o644), entry
