"""mhar_probe.atomic: the one implementation of "temporary beside the target, then rename"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mhar_probe import atomic


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_text_bytes_json_replace_and_leave_nothing_beside(tmp_path):
    target = tmp_path / "sub" / "a.txt"  # the folder is made
    assert atomic.write_text(target, "one\r\nü\n") == target
    assert target.read_bytes() == "one\r\nü\n".encode()  # UTF-8, newlines untranslated
    atomic.write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    atomic.write_json(tmp_path / "sub" / "d.json", {"b": 1, "a": [1]})
    assert (tmp_path / "sub" / "d.json").read_text() == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'
    assert names(tmp_path / "sub") == ["a.txt", "d.json"]


def test_a_failing_writer_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text("half")
        raise KeyboardInterrupt  # BaseException too: an interrupted write cleans up

    with pytest.raises(KeyboardInterrupt):
        atomic.write_with(target, half_then_fail)
    assert target.read_text() == "old"
    assert names(tmp_path) == ["a.txt"]


def test_a_failing_rename_keeps_the_old_file_and_removes_its_temporary(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def refuse(src, dst):
        raise PermissionError(13, "refused", str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        atomic.write_text(target, "new")
    assert target.read_text() == "old" and names(tmp_path) == ["a.txt"]


def test_the_temporary_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    atomic.write_text(tmp_path / "a.txt", "x")
    assert events == ["fsync", "replace"]


KILLED_WRITER = r"""
import os, signal, sys
from mhar_probe import atomic

def write(tmp):
    tmp.write_text("half of the new")
    os.kill(os.getpid(), signal.SIGKILL)

atomic.write_with(sys.argv[1], write)
"""


def test_a_killed_writer_leaves_the_old_file_whole(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)],
                          env={**os.environ, "PYTHONPATH": str(Path(atomic.__file__).parents[1])})
    assert proc.returncode == -signal.SIGKILL
    assert target.read_text() == "old"
    left = [n for n in names(tmp_path) if n != "a.txt"]
    assert len(left) == 1 and left[0].startswith(".a.txt.") and left[0].endswith(".tmp")


def test_write_with_into_renames_a_temporary_that_already_holds_data(tmp_path):
    target = tmp_path / "a.txt"
    tmp = atomic.temp_file(target)
    tmp.write_text("streamed ")
    atomic.write_with(target, lambda t: t.open("a").write("and finished"), into=tmp)
    assert target.read_text() == "streamed and finished" and names(tmp_path) == ["a.txt"]


def test_build_dir_first_writer_wins(tmp_path):
    final = tmp_path / "tok"

    def fill_and_lose_race(tmp: Path) -> None:
        (tmp / "mine.txt").write_text("loser")
        final.mkdir()  # another process renames its copy in first
        (final / "theirs.txt").write_text("winner")

    assert atomic.build_dir(final, fill_and_lose_race) == final
    assert names(tmp_path) == ["tok"]
    assert names(final) == ["theirs.txt"]


def test_build_dir_replace_swaps_the_whole_directory(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "stale.txt").write_text("old")
    atomic.build_dir(final, lambda tmp: (tmp / "new.txt").write_text("new"), replace=True, mode=0o755)
    assert names(final) == ["new.txt"] and names(tmp_path) == ["out"]
    assert final.stat().st_mode & 0o777 == 0o755


def test_build_dir_failing_fill_keeps_the_old_directory(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")

    def fail(tmp: Path) -> None:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("cut short")

    with pytest.raises(RuntimeError):
        atomic.build_dir(final, fail, replace=True)
    assert names(final) == ["old.txt"] and names(tmp_path) == ["out"]


def test_replace_dir_moves_the_old_copy_aside_until_the_new_one_is_in(tmp_path, monkeypatch):
    dst, aside = tmp_path / "ckpt", tmp_path / ".ckpt.old"
    dst.mkdir()
    (dst / "state.json").write_text(json.dumps({"step": 1}))
    aside.mkdir()  # a stale copy from an earlier kill is cleared first
    new = atomic.staging_dir(dst)
    (new / "state.json").write_text(json.dumps({"step": 2}))
    seen = []
    real_replace = os.replace

    def replace(src, dst_):
        seen.append((Path(src).name, Path(dst_).name, sorted(p.name for p in tmp_path.iterdir())))
        real_replace(src, dst_)

    monkeypatch.setattr(os, "replace", replace)
    atomic.replace_dir(new, dst, aside=aside)
    assert [(s, d) for s, d, _ in seen] == [("ckpt", ".ckpt.old"), (new.name, "ckpt")]
    assert ".ckpt.old" not in seen[0][2]  # the stale one was removed before the move
    assert json.loads((dst / "state.json").read_text()) == {"step": 2}
    assert names(tmp_path) == ["ckpt"]


def test_move_entries_replaces_files_one_by_one_and_keeps_the_rest(tmp_path):
    dst = tmp_path / "model"
    dst.mkdir()
    (dst / "config.json").write_text("old")
    (dst / "keep.txt").write_text("kept")
    tmp = atomic.staging_dir(dst / ".hf-tmp", prefix=".hf-tmp-")
    assert tmp.parent == dst and tmp.name.startswith(".hf-tmp-")
    (tmp / "config.json").write_text("new")
    (tmp / "model.safetensors").write_bytes(b"w")
    assert [p.name for p in atomic.move_entries(tmp, dst)] == ["config.json", "model.safetensors"]
    assert (dst / "config.json").read_text() == "new" and (dst / "keep.txt").read_text() == "kept"
    assert names(tmp) == []
