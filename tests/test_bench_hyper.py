"""benchmarks/train_throughput: the hyper-connection arms (--hyper-compile) and the op / byte count
of one hyper-connection (hyper_cost.py)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"benchmarks/train_throughput/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _args(**kw) -> argparse.Namespace:
    base = dict(methods=["baseline", "hyper", "mhar"], routing_backward=["fold", "gather"],
                hyper_compile=["region", "sublayers", "region-pointwise"], compile_sublayers=True, routing_douts="promoted",
                fold_calls=8, variant=[])
    return argparse.Namespace(**{**base, **kw})


def test_one_hyper_arm_per_compile_mode_labelled_like_the_routing_backwards():
    tt = _load("train_throughput")
    specs = [(m, label, hyper, k.stack_backward) for m, k, label, hyper in tt.arm_specs(_args())]
    assert specs == [("baseline", "baseline", "region", "fold"),
                     ("hyper", "hyper", "region", "fold"), ("hyper", "hyper/sublayers", "sublayers", "fold"),
                     ("hyper", "hyper/region-pointwise", "region-pointwise", "fold"),
                     ("mhar", "mhar", "region", "fold"), ("mhar", "mhar/gather", "region", "gather")]
    # without compiled sublayers the mode means nothing: one hyper arm
    labels = [label for _, _, label, _ in tt.arm_specs(_args(compile_sublayers=False))]
    assert labels == ["baseline", "hyper", "mhar", "mhar/gather"]


def test_the_op_counter_counts_kernels_and_their_bytes_not_views():
    hc = _load("hyper_cost")
    a, b = torch.ones(4, 8), torch.ones(8, 3)
    with hc.OpCounter() as c:
        (a.t().reshape(8, 4).t() @ b).relu()  # views, one matmul [4, 8] x [8, 3], one relu
    assert dict(c.ops) == {"mm": 1, "relu": 1}
    assert c.bytes["mm"] == 4 * (32 + 24 + 12) and c.bytes["relu"] == 4 * (12 + 12)
