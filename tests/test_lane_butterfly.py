"""benchmarks/kernels/lane_butterfly.py: the transposed butterfly's per-head sums are the float64
sums (interpreter), and results.md quotes its committed offline counts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from script_checks import load_script

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def test_both_reductions_are_the_float64_sums(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    lb = load_script("benchmarks/kernels/lane_butterfly.py")
    assert lb.check() < 1e-4


def test_results_page_quotes_the_offline_counts():
    rec = json.loads((ROOT / "benchmarks/kernels/lane_butterfly_triton3.6.json").read_text())["kernels"]
    b, t = rec["butterfly"], rec["tl.sum"]
    assert b["SHFL"] < t["SHFL"] and b["LDS"] + b["STS"] <= t["LDS"] + t["STS"] + 1
    page = " ".join((ROOT / "benchmarks/kernels/results.md").read_text().split())
    assert (f"{b['SHFL']} shuffles and {b['FADD']} adds a thread against `tl.sum`'s {t['SHFL']} and {t['FADD']}, "
            f"plus {b['FSEL']} selects") in page


def test_results_page_quotes_the_other_compilers_counts():
    """Triton 3.9 (this machine's) compiles the same butterfly through shared memory: the page says so."""
    rec = json.loads((ROOT / "benchmarks/kernels/lane_butterfly_triton3.9.json").read_text())
    b, t = rec["kernels"]["butterfly"], rec["kernels"]["tl.sum"]
    assert rec["triton"].startswith("3.9") and b["LDS"] > t["LDS"]
    page = " ".join((ROOT / "benchmarks/kernels/results.md").read_text().split())
    assert (f"the butterfly takes {b['instructions']} instructions against `tl.sum`'s {t['instructions']} "
            "and more shared memory") in page


@pytest.mark.parametrize("interpret,says", [(False, "cannot write"), (True, "without TRITON_INTERPRET")])
def test_bad_input_is_one_message(tmp_path, interpret, says):
    """An unwritable --out, or the offline counts asked for under the interpreter: one message and a
    non-zero exit, no traceback."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks/kernels/lane_butterfly.py"), "--out",
                          str(tmp_path / "no_such_dir" / "x.json")], cwd=ROOT, capture_output=True, text=True, env=env)
    assert run.returncode != 0 and says in run.stderr and "Traceback" not in run.stderr, run.stderr
