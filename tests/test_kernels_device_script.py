"""benchmarks/kernels/device_run.sh's `fwdab` plan, run on the CPU with a `python` that records its
PYTHONPATH and arguments instead of sweeping: which tree each of the four processes imports, and
what it times."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from script_checks import recording_command

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "kernels" / "device_run.sh"


def _run(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[tuple[str, str]]]:
    log = tmp_path / "calls.log"
    run_env = {**recording_command(tmp_path / "bin", "python", log, "$PYTHONPATH|$*"), "OUT": str(tmp_path / "out"), **env}
    proc = subprocess.run(["bash", str(SCRIPT), "fwdab"], cwd=ROOT, env=run_env, capture_output=True, text=True,
                          timeout=60)
    lines = log.read_text().splitlines() if log.exists() else []
    return proc, [tuple(line.split("|", 1)) for line in lines if "launch_sweep.py" in line]


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_fwdab_alternates_the_trees_and_times_the_rows_asked_for(tmp_path, relative):
    """BASE relative to the tree (exp_base, as results.md's commands give it) or absolute."""
    base = tmp_path / "exp_base"
    (base / "mhar_probe").mkdir(parents=True)
    proc, calls = _run(tmp_path, BASE=os.path.relpath(base, ROOT) if relative else str(base),
                       BASE_COMMIT="b0", COMMIT="v1", VARIANT="wrows", ROWS_FWD="[[1,2,0,4]]", BUDGET_S="50")
    assert proc.returncode == 0, proc.stderr
    arms = [args.split("_ab_")[1].split(".json")[0] for _, args in calls]
    assert arms == ["base_1", "wrows_1", "base_2", "wrows_2"]
    for (pythonpath, args), arm in zip(calls, arms):
        first = pythonpath.split(":")[0]
        if arm.startswith("base"):  # the base tree's package is found first, this tree's scripts after it
            assert Path(first).resolve() == base.resolve() and "--commit b0" in args
        else:
            assert Path(first).resolve() == ROOT and "--commit v1" in args
        assert "--kinds fwd --no-probes" in args
    rows = [args.split("--rows-fwd ")[1].split(" --budget-s ")[0] for _, args in calls]
    budgets = [args.split("--budget-s ")[1].split()[0] for _, args in calls]
    assert rows == ["[[1,2,0,4]]", "[[1,2,0,4]]", "[]", "[]"] and budgets == ["50", "50", "30", "30"]


def test_fwdab_without_a_base_tree_is_one_message(tmp_path):
    proc, calls = _run(tmp_path, BASE=str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and calls == []
    assert proc.stderr.strip().splitlines()[-1] == "fwdab: BASE must name a directory holding the base tree's mhar_probe"


def test_a_call_cut_by_its_limit_keeps_the_lines_printed_before_the_cut(tmp_path):
    """`final` (the kernel table) with a `python` that prints a table row and then hangs, the whole
    call killed (its process group, as the device's time limit does): the row is in the call's log.
    With a block-buffered warning filter it sat in grep's buffer and went with it (2026-12-07)."""
    import signal
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text('#!/usr/bin/env bash\n[[ "$*" == *mhar_probe.cli* ]] || exit 0  # fla_setup\'s checks\n'
                    'echo "100M  H=1  triton  fwd+bwd 1.000 ms"\nexec sleep 60\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out), "TABLE_TIMEOUT": "50"}
    proc = subprocess.Popen(["bash", str(SCRIPT), "final"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    log = out / "bench_table.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and log.read_text()):
        time.sleep(0.2)
    time.sleep(0.5)  # long enough for a buffered filter to have passed it on, had it meant to
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert "100M  H=1  triton  fwd+bwd 1.000 ms" in log.read_text()
