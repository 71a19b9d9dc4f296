"""The local folders a setup makes (.venv, the built corpus, the latest-releases venv) are ignored as
paths, whatever they are: a symlink to a shared venv or corpus (what a git worktree gets) must not be
committed. With `.venv/` (directories only) a symlink was committed, and checking that commit out
over the real folder deleted it, since git treats ignored files as expendable (2026-11-27). Git is
needed: the suite runs in a clone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", [".venv", ".venv-latest", ".whl", "corpus", "corpus.work", "corpus.tar.xz"])
def test_local_folders_are_ignored_as_any_kind_of_path(name, tmp_path):
    # the project's .gitignore in an empty repository, where NAME does not exist: git then judges
    # it as a plain path (as it does a symlink), not as the directory this checkout may have
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert subprocess.run(["git", "check-ignore", "-q", name], cwd=tmp_path).returncode == 0
