"""benchmarks/train_throughput.py --interleave on the CPU: every arm timed round by round, the
ratio to baseline the median of per-round ratios, and bad arms refused before anything runs."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput.py"


@pytest.fixture(scope="module")
def tt():
    spec = importlib.util.spec_from_file_location("train_throughput", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _args(**kw) -> argparse.Namespace:
    base = dict(preset="tiny", batch=1, seq=16, vocab=128, backend="eager", warmup=1, steps=3,
                methods=["baseline", "mhar", "baseline"])
    return argparse.Namespace(**{**base, **kw})


def test_interleaved_rounds_and_ratio(tt):
    rows = tt.interleaved(_args(), torch.device("cpu"))
    assert [r["method"] for r in rows] == ["baseline", "mhar"]  # each arm once, in order
    base, mhar = rows
    assert len(base["step_s"]) == len(mhar["step_s"]) == 3
    per_round = [b / m for b, m in zip(base["step_s"], mhar["step_s"])]
    assert mhar["vs_baseline_round_median"] == pytest.approx(statistics.median(per_round))
    assert base["vs_baseline_round_median"] == 1.0
    assert mhar["tokens_per_s"] == pytest.approx(16 / statistics.median(mhar["step_s"]))
    assert mhar["params"] > base["params"]  # the routing sites' queries and key norms
    assert mhar["peak_memory_gb"] is None  # not separable per arm on the CPU


def test_interleaved_refuses_bad_arms_before_building(tt):
    with pytest.raises(SystemExit, match="unknown kernel variant 'nope'"):
        tt.interleaved(_args(methods=["baseline", "mhar/nope"]), torch.device("cpu"))
    with pytest.raises(SystemExit, match="need --backend triton"):
        tt.interleaved(_args(methods=["baseline", "mhar/bf16dout"]), torch.device("cpu"))


def test_cli_refuses_zero_steps(tt, monkeypatch):
    monkeypatch.setattr("sys.argv", ["train_throughput.py", "--steps", "0", "--interleave"])
    with pytest.raises(SystemExit, match="--steps must be at least 1"):
        tt.main()


@pytest.mark.parametrize("argv,message", [
    (["--preset", "7b"], "unknown preset '7b'"),
    (["--methods", "baseline", "residual"], "unknown method 'residual'"),
    (["--methods", "baseline", "mhar/nope", "--backend", "triton"], "unknown kernel variant 'nope'"),
])
def test_cli_refuses_bad_names_before_running(tt, monkeypatch, argv, message):
    """One message (SystemExit), not a traceback from deep in model construction, and before any
    arm runs: the non-interleaved mode would otherwise time the arms before the bad one."""
    monkeypatch.setattr("sys.argv", ["train_throughput.py", *argv])
    monkeypatch.setattr(tt, "bench_method", lambda *a: pytest.fail("an arm ran"))
    with pytest.raises(SystemExit, match=message):
        tt.main()


def test_variants_are_the_routing_benchmarks(tt):
    """One list of kernel variants: the routing benchmark's, without the 'triton-' prefix."""
    from mhar_probe.bench.routing import VARIANTS

    assert set(tt.VARIANTS) == {""} | {v.removeprefix("triton-") for v in VARIANTS}
    assert "bf16dout" in tt.VARIANTS  # the opt-in dout dtype (KernelConfig.dout_dtype)


@pytest.mark.parametrize("argv,message", [
    (["--presets", "7b"], "unknown preset '7b'"),
    (["--methods", "baseline", "residual"], "unknown method 'residual'"),
    (["--methods", "mhar/nope"], "unknown kernel variant 'nope'"),
])
def test_profile_script_refuses_bad_names_before_building(monkeypatch, argv, message):
    """benchmarks/profile_train_step.py: one message for a bad preset, method or variant (checked
    as if a GPU were there), and for a machine without one."""
    spec = importlib.util.spec_from_file_location("profile_train_step", SCRIPT.parent / "profile_train_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "profile_one", lambda *a: pytest.fail("a model was profiled"))
    monkeypatch.setattr("sys.argv", ["profile_train_step.py", *argv])
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="on a CUDA GPU"):
            mod.main()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit, match=message):
        mod.main()
