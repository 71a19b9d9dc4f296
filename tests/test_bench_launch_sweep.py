"""benchmarks/kernels/launch_sweep.py: the candidate rows, the choice, and one sweep on the interpreter."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("launch_sweep", ROOT / "benchmarks/kernels/launch_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["launch_sweep"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_candidates_start_at_the_builtin_row_without_repeats_and_refuse_short_rows():
    ls = _load()
    rows = ls.candidates("gather", (1, 2, 0, 0, 1), None)
    assert rows[0] == (1, 2, 0, 0, 1) and len(rows) == len(set(rows))
    assert set(rows) == {(1, 2, 0, 0, 1), *ls.GATHER_ORDER}
    first = sum(1 for r in rows if r[4])
    assert all(r[4] == 1 for r in rows[:first])  # loads-first rows first
    assert ls.candidates("fwd", (1, 1, 0, 3), "[[1, 1, 0, 3], [2, 1, 0, 4]]") == [(1, 1, 0, 3), (2, 1, 0, 4)]
    with pytest.raises(SystemExit, match="expected"):
        ls.candidates("gather", (1, 1, 0, 0, 1), "[[1, 1, 0]]")


def test_builtin_row_is_the_launch_tables_row():
    """At 1B-train (d 1280, H 8, fp32 douts) the built-in gather row is (1, 2, 0, 0, 1) and the
    forward's (1, 1, 0, 3) (mhar_probe/kernels/launch_tables.json)."""
    ls = _load()
    assert ls.builtin_row("gather", 1280, 8, 4) == (1, 2, 0, 0, 1)
    assert ls.builtin_row("fwd", 1280, 8, 4) == (1, 1, 0, 3)
    assert ls.table_key("gather", 1280, 8, 4) == (1280, 8, 8, 4) and ls.table_key("fwd", 512, 8, 2) == (512, 8, 2)


def test_choose_takes_the_fastest_row_with_the_reference_gradients():
    ls = _load()
    rows = [dict(cfg=[1], judged_ms=3.0, grad_rel_err=0.0), dict(cfg=[2], judged_ms=1.0, grad_rel_err=0.5),
            dict(cfg=[3], judged_ms=2.0, grad_rel_err=1e-3)]
    assert ls.choose(rows, 2e-2)["cfg"] == [3]  # the 1.0 ms row gives wrong gradients
    assert ls.choose(rows[1:2], 2e-2) is None
    assert ls.parse_shape("1B-train") == (1280, 36, 2, 1024) and ls.parse_shape("16x1x1x4") == (16, 1, 1, 4)
    with pytest.raises(SystemExit, match="DxLxBxT"):
        ls.parse_shape("big")


@pytest.mark.slow
def test_sweep_on_the_interpreter_writes_a_launch_table_the_kernels_take(tmp_path):
    """A tiny chain (d 16, 3 calls, 4 positions, H 2) on the CPU interpreter: the probes run, each
    kind tries the built-in row and the given one, the chosen rows are the fastest with the
    reference gradients, and the table file loads and drives the kernels to the same gradients."""
    import torch

    from mhar_probe.kernels import KernelConfig
    from mhar_probe.kernels.launch_tables import load_tables

    ls = _load()
    out, table = tmp_path / "sweep.json", tmp_path / "table.json"
    ls.main(["--device", "cpu", "--shapes", "16x1x1x4", "--heads", "2", "--repeat", "1", "--dtype", "float32",
             "--rows-gather", "[[2, 1, 1, 0, 0]]", "--rows-fwd", "[[2, 1, 0, 3]]", "--out", str(out),
             "--table-out", str(table)])
    doc = json.loads(out.read_text())
    assert doc["meta"]["dtype"] == "float32" and doc["meta"]["copy_gbps"] is None
    what = [r["what"] for r in doc["rows"]]
    assert what == ["probe:fold", "probe:fold-storage-douts", "probe:gather-backward", *["sweep:gather"] * 2,
                    *["sweep:fwd"] * 2]
    probes = {r["what"]: r for r in doc["rows"] if r["what"].startswith("probe")}
    assert probes["probe:fold"]["grad_rel_err"] == 0.0  # the reference itself
    assert probes["probe:gather-backward"]["grad_rel_err"] < 1e-5  # fp32: the same sums in another order
    tables = load_tables(table)
    for kind, key in (("gather", (16, 2, 2, 4)), ("fwd", (16, 2, 4))):
        tried = [r for r in doc["rows"] if r["what"] == f"sweep:{kind}"]
        assert all(r["grad_rel_err"] < 1e-5 for r in tried)
        assert list(getattr(tables, kind)[key]) == min(tried, key=lambda r: r["judged_ms"])["cfg"]
    runner = ls.Runner((16, 1, 1, 4), 2, "float32", "cpu", 1)
    ref = runner.grads()
    runner.backend = ls.get_backend("triton", KernelConfig(launch_table=str(table)))
    got = runner.grads()
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, ref))
