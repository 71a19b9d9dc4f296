"""The commit and versions a benchmark result records (`mhar_probe.bench.provenance`)."""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest
import torch

from mhar_probe.bench.provenance import git_commit, software
from mhar_probe.cli.bench import routing_parser


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_names_the_checkout_and_none_without_history(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("x\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    want = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    sub = repo / "deeper"
    sub.mkdir()
    assert git_commit(sub) == want
    plain = tmp_path / "copied_tree"  # what the GPU machine gets: files, no .git
    plain.mkdir()
    assert git_commit(plain) is None


def test_software_names_this_interpreter_and_torch():
    got = software()
    assert got["python"] == platform.python_version() and got["torch"] == torch.__version__
    assert got["cuda"] == torch.version.cuda
    assert set(got) == {"python", "torch", "cuda", "triton"}


def test_bench_routing_takes_the_commit_to_record():
    assert routing_parser().parse_args(["--commit", "94d8616"]).commit == "94d8616"
    assert routing_parser().parse_args([]).commit is None
