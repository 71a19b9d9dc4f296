"""benchmarks/kernels/fold_split.py: the per-kernel split of the stack backward's time, bytes and pairs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from mhar_probe.kernels.route.bwd_fold import backward_plan, model_layout, plan_bytes

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("fold_split", ROOT / "benchmarks/kernels/fold_split.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fold_split"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("calls,cb", [(25, 0), (25, 8), (49, 8), (73, 12), (7, 3)])
def test_every_pair_is_summed_once_by_one_kernel(calls, cb):
    """The model's stack of S calls has S (S + 1) / 2 (call, source) pairs; the gather and fold
    launches of a plan split them with no pair twice (the gather backward: all in gathers)."""
    fs = _load()
    layout = model_layout(calls)
    plan = backward_plan(layout, calls - 1, cb)
    gathers = fs.pairs_of([la for la in plan if la.kind == "gather"], layout)
    folds = fs.pairs_of([la for la in plan if la.kind == "fold"], layout)
    assert gathers + folds == calls * (calls + 1) // 2
    assert (folds == 0) == (cb == 0)
    if cb:  # each gather sums at most the Cb readers since the last fold: pairs <= S * Cb
        assert gathers <= calls * cb


def test_split_row_adds_up_to_the_whole_plan_and_divides_by_the_row_times():
    """At 100M-train (d 512, 25 calls, P 16384) the two kernels' modelled bytes add up to the
    whole plan's; GB/s and ns per pair and position are the row's times divided out."""
    fs = _load()
    row = dict(shape="100M-train", H=8, backend="triton", kernel_config={},
               kernels_ms={"stack_gather_kernel": 2.0, "stack_fold_kernel": 4.0})
    parts = {s.kernel: s for s in fs.split_row(row, copy_gbps=4000.0, dout_bytes=4)}
    layout = model_layout(25)
    whole = plan_bytes(backward_plan(layout, 24, 8), layout, [8] * 25, 512, 2, 4) * 325 * 512 * 16384 / 1e9
    assert parts["gather"].gbytes + parts["fold"].gbytes == pytest.approx(whole, rel=1e-12)
    for s, ms in ((parts["gather"], 2.0), (parts["fold"], 4.0)):
        assert s.gbps == pytest.approx(s.gbytes / (ms * 1e-3))
        assert s.of_copy == pytest.approx(s.gbps / 4000.0)
        assert s.ns_per_pair_position == pytest.approx(ms * 1e6 / (s.pairs * 16384))
    assert parts["fold"].launches == 3 and parts["gather"].launches == 25  # folds at calls 17, 9, 1


def test_the_gather_backward_row_is_one_kernel_reading_every_pair():
    fs = _load()
    row = dict(shape="1B-train", H=8, backend="triton-gather", kernel_config={"stack_backward": "gather"},
               kernels_ms={"stack_gather_kernel": 12.0})
    (only,) = fs.split_row(row, copy_gbps=4000.0, dout_bytes=4)
    assert (only.kernel, only.pairs, only.launches) == ("gather", 73 * 74 // 2, 73)
    assert fs.fold_calls_of(dict(kernel_config={"fold_calls": 16})) == 16
    assert fs.fold_calls_of(dict(kernel_config=None)) == 8


def test_main_reads_a_bench_file_and_writes_the_split(tmp_path):
    fs = _load()
    doc = dict(meta=dict(device="cpu", commit="x", copy_gbps=1000.0, dtype="bfloat16"),
               rows=[dict(shape="350M", H=1, backend="triton", kernel_config={},
                          kernels_ms={"stack_gather_kernel": 0.5, "stack_fold_kernel": 1.0, "route_fwd_kernel": 1.2}),
                     dict(shape="350M", H=1, backend="eager", kernels_ms={})])
    src, out = tmp_path / "bench.json", tmp_path / "split.json"
    src.write_text(json.dumps(doc))
    fs.main([str(src), "--out", str(out)])
    rows = json.loads(out.read_text())
    assert [(r["kernel"], r["backend"]) for r in rows] == [("gather", "triton"), ("fold", "triton")]
    assert sum(r["pairs"] for r in rows) == 49 * 50 // 2
