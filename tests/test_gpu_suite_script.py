"""tests/gpu/run_gpu_suite.sh on a CPU: its dry run names the card (none here), the software and the
commit this tree's code record gives, plans every gpu-marked test file (found here independently,
with ast) on one visible GPU and the multi-GPU file on two, and prints its summary last; --collect
also runs pytest's collection of each part; a bad argument is one line and exit 2."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhar_probe.provenance import code_record

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "gpu" / "run_gpu_suite.sh"


def _marks_gpu(path: Path) -> bool:
    """Whether a test module marks any test (or itself) with the gpu marker."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "gpu" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "mark" and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest":
            return True
    return False


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=tmp_path, env=env)


def _plan(stdout: str) -> dict[str, list[str]]:
    parts = {}
    for line in stdout.splitlines():
        if line.startswith("## part ") and ": env " in line:
            part, cmd = line.removeprefix("## part ").split(": env ", 1)
            words = cmd.split()
            assert words[1] == sys.executable and words[2:6] == ["-m", "pytest", "-m", "gpu"]
            parts[part] = (words[0], [w for w in words if w.startswith("tests/")])
    return parts


def test_dry_run_plans_every_gpu_test_file_and_names_card_software_and_commit(tmp_path):
    proc = _run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    gpu_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py") if _marks_gpu(p))
    assert "tests/test_kernels_model.py" in gpu_files and "tests/gpu/test_fused_step.py" in gpu_files
    plan = _plan(proc.stdout)
    multi = "tests/gpu/test_distributed_gpu.py"
    assert plan["1gpu"] == ("CUDA_VISIBLE_DEVICES=0", [f for f in gpu_files if f != multi])
    assert plan["2gpu"] == ("CUDA_VISIBLE_DEVICES=0,1", [multi])
    log = (tmp_path / "out" / "gpu_suite.log").read_text()
    assert "## card: none" in log
    software = json.loads(log.split("## software: ", 1)[1].split(" devices:", 1)[0])
    assert software["torch"] and "triton" in software
    recorded = json.loads(log.split("## code: ", 1)[1].splitlines()[0])
    assert recorded["commit"] == code_record()["commit"] and recorded["code_sha256"] == code_record()["code_sha256"]
    # the packages the GPU tests import beyond the GPU image, with the versions this interpreter has
    from importlib.metadata import version
    assert (f"## wheels: hyper_connections {version('hyper-connections')}, h5netcdf {version('h5netcdf')}\n" in log
            and "MISSING" not in log)
    lines = proc.stdout.strip().splitlines()
    assert lines[-4] == "## summary" and lines[-1].startswith("## dry run: ")


@pytest.mark.parametrize("args", [["--bogus"], ["--only", "3gpu"]])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("usage:")


@pytest.mark.slow
def test_collect_runs_pytest_collection_of_each_part(tmp_path):
    proc = _run(tmp_path, "--collect", "--only", "1gpu")
    assert proc.returncode == 0, proc.stdout
    part = (tmp_path / "out" / "gpu_suite_1gpu.log").read_text()
    assert "tests/test_kernels_model.py::" in part  # its gpu tests are collected on a CPU too
    assert proc.stdout.strip().splitlines()[-2].startswith("## 1gpu: exit 0: ")


def test_readme_table_matches_the_committed_suite_logs():
    """tests/gpu/README.md's rows for the suite's own logs (suite_*.log) state the card, the commit and
    the pass count and seconds that the log's header and summary hold."""
    import re

    readme = (ROOT / "tests" / "gpu" / "README.md").read_text()
    rows = re.findall(r"^\| \[(suite_[\w.]+_(\dgpu)\.log)\]\(\1\) \| (\d)x (\w+) \| ([\d-]+) \| (\w+) \| "
                      r".*?(\d+) passed in (\d+) s\b.*\|$", readme, flags=re.M)
    logs = {p.name for p in (ROOT / "tests" / "gpu").glob("suite_*.log")}
    assert len(rows) == len(logs) and {r[0] for r in rows} == logs, \
        "tests/gpu/README.md: a row for each committed log (one per card and part)"
    for name, part, count, card, date, commit, passed, secs in rows:
        log = (ROOT / "tests" / "gpu" / name).read_text()
        assert len(re.findall(rf"^## card: \d, NVIDIA {card}\b", log, flags=re.M)) == int(count), name
        assert f"## gpu suite {date}T" in log, name
        assert re.search(rf'^## code: .*"commit": "{commit}', log, flags=re.M), name
        summary = re.search(rf"^## {part}: exit 0: =+ (\d+) passed.* in ([\d.]+)s", log, flags=re.M)
        assert summary and summary.group(1) == passed and round(float(summary.group(2))) == int(secs), name
        assert "## GPU suite: ALL PASSED" in log, name


def test_the_gpu_readmes_latest_logs_are_what_the_suite_logs_say():
    """tests/gpu/README.md's "Latest logs" rows for the suite's own logs (suite_*.log): the date, the
    commit and the result's counts and seconds are the log's header and summary, not typed by hand."""
    import re

    readme = (ROOT / "tests" / "gpu" / "README.md").read_text()
    rows = re.findall(r"^\| \[(suite_\w+\.log)\]\(\1\) \| [^|]+ \| (\S+) \| (\w+) \| ([^|]+) \|$", readme, re.M)
    assert {name for name, *_ in rows} == {p.name for p in (ROOT / "tests" / "gpu").glob("suite_*.log")}
    for name, date, commit, result in rows:
        log = (ROOT / "tests" / "gpu" / name).read_text()
        assert re.search(rf"^## gpu suite {date}T", log, re.M), name
        assert json.loads(re.search(r"^## code: (\{.*\})$", log, re.M).group(1))["commit"].startswith(commit), name
        summary = re.search(r"^## [12]gpu: exit 0: =+ (.*) in ([\d.]+)s", log, re.M)
        counts = dict((kind, int(n)) for n, kind in re.findall(r"(\d+) (passed|skipped|failed)", summary.group(1)))
        assert "failed" not in counts and f"{counts['passed']} passed in {float(summary.group(2)):.0f} s" in result, name
        if "skipped" in counts:
            assert f"{counts['skipped']} skipped" in result, name


def test_the_h100_log_names_its_wheels_and_held_fold_cases_as_the_readme_says():
    """tests/gpu/README.md's account of suite_h100_1gpu.log: the wheels its header names (the hyper-mode
    tests import hyper_connections: the e035df5 run without them failed those four), and the held-fold
    cases at model depth that passed (two of them the rows deleted after the call)."""
    import re

    readme = " ".join((ROOT / "tests" / "gpu" / "README.md").read_text().split())
    log = (ROOT / "tests" / "gpu" / "suite_h100_1gpu.log").read_text()
    wheels = re.search(r"^## wheels: (.*)$", log, re.M).group(1)
    assert "MISSING" not in wheels and f"its header names {wheels.replace(', ', ' and ')}" in readme
    held = set(re.findall(r"PASSED tests/gpu/test_kernels_gpu.py::test_held_fold_at_model_depth\[(\S+)\]", log))
    words = {5: "five", 6: "six", 7: "seven"}
    assert f"({words[len(held)]} held-fold cases at model depth in all)" in readme
    hyper = set(re.findall(r"PASSED (tests/gpu/test_fused_step.py::\S*hyper\S*)", log))
    assert not re.search(r"^FAILED", log, re.M) and len(hyper) >= 4, hyper  # the four the e035df5 run failed
