"""benchmarks/train_throughput/train_throughput.py on the CPU: every arm built with the training
step (`mhar_probe.step`), timed round by round; the ratio to baseline is the median of per-round
ratios; bad names are refused with one message before anything runs."""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput" / "train_throughput.py"


@pytest.fixture(scope="module")
def tt():
    spec = importlib.util.spec_from_file_location("train_throughput", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _args(**kw) -> argparse.Namespace:
    base = dict(presets=["tiny"], batch=2, seq=16, vocab=128, backend="eager", step="eager", warmup=1, rounds=3,
                methods=["baseline", "mhar"], profile=False, trace=None, commit=None, loss_kernel="torch",
                compile_sublayers=False, routing_douts="promoted", routing_backward=["fold"], fold_calls=8, hyper_compile=["region"],
                overlap=False, variant=[])
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def step_calls(tt, monkeypatch) -> list:
    """Every eager step taken, in order (the stepper of each call)."""
    calls = []
    real = tt.EagerStep.__call__

    def spy(self, micro_batches, lr):
        calls.append(self)
        return real(self, micro_batches, lr)

    monkeypatch.setattr(tt.EagerStep, "__call__", spy)
    return calls


def test_arms_interleaved_with_the_training_step(tt, step_calls):
    calls = step_calls
    rows = tt.bench_preset("tiny", _args(), torch.device("cpu"))
    assert [r["method"] for r in rows] == ["baseline", "mhar"]
    base, mhar = rows
    steppers = list(dict.fromkeys(calls))
    assert len(steppers) == 2 and calls == steppers * 5  # a first step each, then 1 + 3 rounds arm by arm
    assert len(base["step_s"]) == len(mhar["step_s"]) == 3
    per_round = [b / m for b, m in zip(base["step_s"], mhar["step_s"])]
    assert mhar["vs_baseline"] == pytest.approx(statistics.median(per_round))
    assert mhar["vs_baseline_range"] == [min(per_round), max(per_round)]
    assert base["vs_baseline"] == 1.0
    assert mhar["tokens_per_s"] == pytest.approx(2 * 16 / statistics.median(mhar["step_s"]))
    assert mhar["params"] > base["params"]  # the routing sites' queries and key norms
    assert mhar["routing_heads"] == 2 and base["routing_heads"] is None
    assert "peak_memory_gb" not in mhar and mhar["mfu"] is None  # GPU-only measures


def test_overlapped_timing_runs_steps_back_to_back_beside_one_synced_step(tt, step_calls):
    """--overlap (the default): each round and arm launches OVERLAP_STEPS + 1 steps back to back
    (one lead step, untimed), then one synchronised step; step_s is the overlapped mean, and
    overlap_speedup the median over rounds of synced / overlapped."""
    calls = step_calls
    rows = tt.bench_preset("tiny", _args(overlap=True, rounds=2), torch.device("cpu"))
    base, mhar = rows
    a, b = list(dict.fromkeys(calls))
    per_round = [a] * (tt.OVERLAP_STEPS + 2) + [b] * (tt.OVERLAP_STEPS + 2)
    assert calls == [a, b] + per_round * 3  # first steps, then 1 warm-up round and 2 timed
    for row in rows:
        assert row["overlap"] is True and row["steps_per_round"] == tt.OVERLAP_STEPS
        assert len(row["step_s"]) == len(row["step_s_synced"]) == 2
        assert row["overlap_speedup"] == pytest.approx(
            statistics.median(s / o for s, o in zip(row["step_s_synced"], row["step_s"])))
        assert row["step_s_synced_median"] == pytest.approx(statistics.median(row["step_s_synced"]))


@pytest.fixture
def arm_kernels(tt, monkeypatch) -> list:
    """The KernelConfig each eager stepper's model carries (None: nothing routes), one set of
    configs per stepper in the order the steppers first step: read from the model itself, so a
    process-wide setting left behind would not pass for an arm's own."""
    from mhar_probe.model.routing import routing_kernels_of

    models, seen = {}, {}
    real_set, real = tt.set_routing_backend, tt.EagerStep.__call__

    def set_spy(model, name, kernels=None):
        models[id(next(model.parameters()))] = model
        return real_set(model, name, kernels)

    def spy(self, micro_batches, lr):
        seen.setdefault(id(self), set()).add(routing_kernels_of(models[id(self.params[0])]))
        return real(self, micro_batches, lr)

    monkeypatch.setattr(tt, "set_routing_backend", set_spy)
    monkeypatch.setattr(tt.EagerStep, "__call__", spy)
    return seen


def _fields(seen: dict, *names: str) -> list[set]:
    return [{k and tuple(getattr(k, n) for n in names) for k in configs} for configs in seen.values()]


def test_routed_arms_once_per_stack_backward(tt, arm_kernels):
    """--routing-backward fold gather: the routed methods get one arm per backward (mhar,
    mhar/gather), the others one; every step of an arm runs its own model, which carries that
    arm's KernelConfig (no process-wide setting is left behind)."""
    rows = tt.bench_preset("tiny", _args(routing_backward=["fold", "gather"], fold_calls=3, rounds=1),
                           torch.device("cpu"))
    assert [(r["arm"], r["method"], r["routing_backward"]) for r in rows] == [
        ("baseline", "baseline", "fold"), ("mhar", "mhar", "fold"), ("mhar/gather", "mhar", "gather")]
    assert _fields(arm_kernels, "stack_backward", "fold_calls") == [
        {None}, {("fold", 3)}, {("gather", 3)}]  # baseline: nothing routes


def test_a_variant_is_one_more_arm_per_routed_method_carrying_its_fields(tt, arm_kernels):
    """--variant FIELD=VALUE[,...]: after a routed method's own arm, one arm per variant whose model
    carries the first backward's configuration with those fields (KernelConfig's fields with
    choices), recorded in its row; the baseline gets none. On the CPU the arms step their own models."""
    both = "stack_backward=gather,routing_douts=storage"
    rows = tt.bench_preset("tiny", _args(variant=["stack_backward=gather", both], rounds=1), torch.device("cpu"))
    assert [(r["arm"], r["routing_backward"], r["routing_douts"]) for r in rows] == [
        ("baseline", "fold", "promoted"), ("mhar", "fold", "promoted"),
        ("mhar/stack_backward=gather", "gather", "promoted"), (f"mhar/{both}", "gather", "storage")]
    assert _fields(arm_kernels, "stack_backward", "routing_douts", "fold_calls") == [
        {None}, {("fold", "promoted", 8)}, {("gather", "promoted", 8)}, {("gather", "storage", 8)}]


def test_main_writes_the_results_file(tt, monkeypatch, tmp_path):
    out = tmp_path / "r.json"
    monkeypatch.setattr("sys.argv", ["train_throughput.py", "--presets", "tiny", "--batch", "1", "--seq", "8",
                                     "--vocab", "64", "--backend", "eager", "--rounds", "1", "--warmup", "0",
                                     "--commit", "abc123", "--out", str(out)])
    tt.main()
    doc = json.loads(out.read_text())
    assert doc["meta"]["commit"] == "abc123" and doc["meta"]["args"]["step"] == "eager"
    assert doc["meta"]["torch"] == torch.__version__ and doc["meta"]["python"] == platform.python_version()
    code = doc["meta"]["provenance"]["code"]  # this checkout's commit (git wins over a passed one) and digest
    assert code["source"] in ("git", "stamp") and len(code["commit"]) == 40 and len(code["code_sha256"]) == 64
    assert [r["method"] for r in doc["results"]] == ["baseline", "mhar"]


@pytest.mark.parametrize("argv,message", [
    (["--presets", "7b"], "unknown preset '7b'"),
    (["--presets", "tiny"], "--batch and --seq are needed for 'tiny'"),
    (["--methods", "baseline", "residual"], "unknown method 'residual'"),
    (["--methods", "baseline", "baseline"], "each method once"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--routing-backward", "fold", "fold"], "each routing backward once"),
    (["--fold-calls", "0"], "--fold-calls must be at least 1"),
    (["--variant", "stack_backward=copy"], "--variant 'stack_backward=copy': each item is FIELD=VALUE"),
    (["--variant", "fold_calls=2"], "--variant 'fold_calls=2': each item is FIELD=VALUE"),  # no choices: --fold-calls
    (["--variant", "stack_douts=in_place"], "--variant 'stack_douts=in_place': each item is FIELD=VALUE"),  # deleted
    (["--variant", "stack_backward=gather", "--variant", "stack_backward=gather"], "each --variant once"),
])
def test_cli_refuses_bad_arguments_before_building(tt, monkeypatch, argv, message):
    monkeypatch.setattr("sys.argv", ["train_throughput.py", *argv])
    monkeypatch.setattr(tt, "bench_preset", lambda *a: pytest.fail("an arm was built"))
    with pytest.raises(SystemExit, match=message):
        tt.main()
