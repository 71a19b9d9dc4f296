"""benchmarks/train_throughput/run_on_device.sh's `fold` plan, run on the CPU with a `python3` that
records its arguments instead of training: which configurations one call runs."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from script_checks import recording_command

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "train_throughput" / "run_on_device.sh"


def _fold_configs(tmp_path: Path, *args: str, **env: str) -> list[str]:
    """The --presets value of every train_throughput.py process `fold` starts."""
    log = tmp_path / "calls.log"
    run_env = {**recording_command(tmp_path / "bin", "python3", log), "OUT": str(tmp_path / "out"), **env}
    subprocess.run(["bash", str(SCRIPT), "fold", "abc1234", *args], cwd=ROOT, env=run_env, check=True,
                   capture_output=True, text=True, timeout=60)
    calls = [line for line in log.read_text().splitlines() if "train_throughput.py" in line]
    return [c.split("--presets ")[1].split(" --methods")[0] for c in calls]


@pytest.mark.parametrize("args,env,expect", [
    ((), {}, ["100m --vocab 8192", "100m", "350m", "1b"]),
    (("1b 350m",), {}, ["100m --vocab 8192", "1b", "350m"]),
    (("1b 350m",), {"WITH_8K": "0"}, ["1b", "350m"]),
    (("",), {}, ["100m --vocab 8192"]),  # an empty PRESETS: the 8k configuration alone
])
def test_fold_runs_the_configurations_asked_for(tmp_path, args, env, expect):
    assert _fold_configs(tmp_path, *args, **env) == expect


def test_fold_passes_the_variant_arm(tmp_path):
    bin_dir = tmp_path / "v"
    bin_dir.mkdir()
    _fold_configs(bin_dir, "1b", WITH_8K="0", VARIANTS="forward=plain")
    call = next(line for line in (bin_dir / "calls.log").read_text().splitlines() if "train_throughput.py" in line)
    assert "--variant forward=plain" in call and "--commit abc1234" in call
