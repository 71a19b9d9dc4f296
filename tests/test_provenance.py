"""Where a result came from (`mhar_probe.provenance`): the commit (from the stamp, git or nothing),
the dirty flag, the code digest, the software and the card; every training session of a run in
sessions.json and summary.json, a resume included."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mhar_probe import provenance as prov
from mhar_probe.cli.bench import routing_parser
from mhar_probe.runfiles import RunFileError, read_sessions

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _checkout(root: Path, body: str = "x = 1\n") -> tuple[Path, str]:
    """A git checkout at `root` with a package `mhar_probe/` of two files; (package dir, HEAD)."""
    pkg = root / "mhar_probe"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text(body)
    (pkg / "sub" / "b.json").write_text("{}\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / ".gitignore").write_text(f"/{prov.STAMP}\n__pycache__/\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    return pkg, _git(root, "rev-parse", "HEAD")


@needs_git
def test_git_commit_names_the_checkout_and_none_without_history(tmp_path):
    _, head = _checkout(tmp_path / "repo")
    assert prov.git_commit(tmp_path / "repo" / "mhar_probe" / "sub") == head[:len(prov.git_commit(tmp_path / "repo"))]
    plain = tmp_path / "copied_tree"  # what the GPU machine gets: files, no .git
    plain.mkdir()
    assert prov.git_commit(plain) is None


def test_code_digest_follows_every_byte_and_name_but_not_caches(tmp_path):
    pkg = tmp_path / "mhar_probe"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    first = prov.code_digest(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0junk")
    assert prov.code_digest(pkg) == first
    (pkg / "a.py").write_text("x = 2\n")
    assert prov.code_digest(pkg) != first
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "a.py").rename(pkg / "b.py")  # same bytes, another name
    assert prov.code_digest(pkg) != first


@needs_git
def test_code_record_from_git_clean_then_dirty(tmp_path):
    pkg, head = _checkout(tmp_path / "repo")
    rec = prov.code_record(pkg)
    assert (rec["commit"], rec["dirty"], rec["source"]) == (head, False, "git")
    assert rec["code_sha256"] == prov.code_digest(pkg) and rec["package_version"]
    (tmp_path / "repo" / "notes.txt").write_text("a new results file beside the code\n")
    assert prov.code_record(pkg)["dirty"] is False
    (pkg / "new.py").write_text("y = 2\n")  # code that is not committed
    assert prov.code_record(pkg)["dirty"] is True
    (pkg / "new.py").unlink()
    (pkg / "a.py").write_text("x = 3\n")  # a tracked change
    assert prov.code_record(pkg)["dirty"] is True


def test_code_record_without_a_checkout_names_the_package_only(tmp_path):
    pkg = tmp_path / "site-packages" / "mhar_probe"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    rec = prov.code_record(pkg)
    assert rec["commit"] is None and rec["source"] is None and rec["package_version"]


@needs_git
def test_a_benchmark_record_names_git_over_a_passed_commit_and_the_passed_one_without_history(tmp_path):
    """A device script's `--commit` fills the record only where neither stamp nor git name one."""
    pkg, head = _checkout(tmp_path / "repo")
    rec = prov.benchmark_record("cpu", commit="feedbee", package_dir=pkg)
    assert rec["code"]["commit"] == head and rec["code"]["source"] == "git"
    bare = tmp_path / "copied" / "mhar_probe"
    shutil.copytree(pkg, bare)
    rec = prov.benchmark_record("cpu", commit="feedbee", package_dir=bare)
    assert rec["code"]["commit"] == "feedbee" and rec["code"]["source"] == "argument"
    assert prov.benchmark_record("cpu", package_dir=bare)["code"]["commit"] is None
    assert rec["software"]["torch"] == torch.__version__ and rec["hardware"]["device"].startswith("cpu")
    assert set(rec) == {"time", "code", "software", "hardware"}


@needs_git
def test_the_stamp_names_the_copied_tree_where_its_stale_git_would_not(tmp_path):
    """The device path: the checkout is stamped here, its files are copied to a machine whose git
    metadata is another commit's; the copy reads the stamp's commit. Once its code changes, the stamp
    is stale and is not believed."""
    repo = tmp_path / "repo"
    pkg, head = _checkout(repo)
    assert prov.main(["stamp", str(repo)]) == 0
    stamp = json.loads((repo / prov.STAMP).read_text())
    assert stamp["commit"] == head and stamp["dirty"] is False
    copy = tmp_path / "device_copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    old, old_head = _checkout(tmp_path / "older", body="x = 0\n")  # stale metadata of another commit
    shutil.copytree(tmp_path / "older" / ".git", copy / ".git")
    assert old_head != head
    rec = prov.code_record(copy / "mhar_probe")
    assert (rec["commit"], rec["dirty"], rec["source"]) == (head, False, "stamp")
    (copy / "mhar_probe" / "a.py").write_text("x = 5\n")  # the copy no longer holds the stamped code
    rec = prov.code_record(copy / "mhar_probe")
    assert rec["source"] == "git" and rec["commit"] == old_head and rec["dirty"] is True
    assert rec["stale_stamp"] == head


@needs_git
def test_a_dirty_checkout_is_stamped_dirty(tmp_path):
    repo = tmp_path / "repo"
    pkg, head = _checkout(repo)
    (pkg / "a.py").write_text("x = 9\n")
    stamp = prov.write_stamp(repo)
    assert stamp["dirty"] is True
    assert prov.code_record(pkg)["dirty"] is True and prov.code_record(pkg)["source"] == "stamp"


def test_stamp_refuses_a_folder_that_is_no_checkout(tmp_path, capsys):
    (tmp_path / "mhar_probe").mkdir()
    assert prov.main(["stamp", str(tmp_path)]) == 2
    assert "not a git checkout" in capsys.readouterr().err
    assert not (tmp_path / prov.STAMP).exists()
    assert prov.main(["nonsense"]) == 2


def test_software_names_this_interpreter_torch_and_transformers():
    import transformers

    got = prov.software()
    assert got["python"] == platform.python_version() and got["torch"] == torch.__version__
    assert got["cuda"] == torch.version.cuda and got["transformers"] == transformers.__version__
    assert set(got) == {"python", "torch", "cuda", "triton", "transformers"}


def test_hardware_on_the_cpu_counts_the_cores_this_process_may_use():
    import os

    hw = prov.hardware_record("cpu", world_size=2)
    assert hw["device"].startswith("cpu") and hw["world_size"] == 2
    assert hw["device_count"] == len(os.sched_getaffinity(0))


def test_cards_and_commits_read_sessions_back():
    s = lambda commit, dirty, dev, ws: dict(step=0, time="t", code=dict(commit=commit, dirty=dirty),  # noqa: E731
                                            hardware=dict(device=dev, world_size=ws))
    sessions = [s("a" * 40, False, "NVIDIA H100 80GB HBM3", 4), s("a" * 40, False, "NVIDIA H200", 4),
                s("b" * 40, True, "NVIDIA H200", 4), s(None, None, "cpu (x86_64)", 1)]
    assert prov.cards(sessions) == ["4 x NVIDIA H100 80GB HBM3", "4 x NVIDIA H200", "1 x cpu (x86_64)"]
    assert prov.commits(sessions) == ["aaaaaaa", "bbbbbbb+dirty", "unknown"]


def test_read_sessions_refuses_what_a_run_never_writes(tmp_path):
    path = tmp_path / "sessions.json"
    assert read_sessions(path) == []
    for bad in ({"step": 0}, [{"step": "0", "time": "t"}], [{"step": 5, "time": "t"}, {"step": 3, "time": "t"}],
                [{"step": 0}]):
        path.write_text(json.dumps(bad))
        with pytest.raises(RunFileError, match="sessions"):
            read_sessions(path)


def test_bench_routing_takes_the_commit_to_record():
    assert routing_parser().parse_args(["--commit", "94d8616"]).commit == "94d8616"
    assert routing_parser().parse_args([]).commit is None


# ----------------------------------------------------------------------------- a run's sessions
@pytest.fixture
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


def test_every_session_of_a_run_is_recorded_a_resume_included(tmp_path, _cache):
    """A run stopped after step 4 and resumed to 6 has two sessions, at steps 0 and 4, each naming the
    code this process ran (this checkout's commit or the package's digest), the software and the
    card; summary.json carries them."""
    from mhar_probe.cli import main
    from mhar_probe.runoptions import TrainConfig
    from mhar_probe.train import train

    run = tmp_path / "run"

    cfg = TrainConfig(out=str(run), preset="tiny", seq_len=32, batch_size=4, eval_every=2, eval_batches=1,
                      vocab_size=512, corpus_max_bytes=150_000, progress=False, checkpoint_every=2, steps=6,
                      stop_after=4, extra=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128))
    assert train(cfg)["stopped_at"] == 4
    first = read_sessions(run / "sessions.json")
    assert [s["step"] for s in first] == [0] and not (run / "summary.json").exists()
    assert main(["train", "--out", str(run), "--resume"]) == 0
    sessions = read_sessions(run / "sessions.json")
    assert [s["step"] for s in sessions] == [0, 4] and sessions[0] == first[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["provenance"]["sessions"] == sessions
    here = prov.code_record()
    for s in sessions:
        assert s["code"]["code_sha256"] == here["code_sha256"] and s["code"]["commit"] == here["commit"]
        assert s["software"] == prov.software()
        assert s["hardware"]["device"].startswith("cpu") and s["hardware"]["world_size"] == 1
        assert s["time"].endswith("+00:00")
