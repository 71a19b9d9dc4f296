"""benchmarks/kernels/fold_rows_table.py and ncu_routing.summarise: the fold kernel's profile and row
tables in results.md are the ones the committed Nsight Compute and sweep files render, and the
summary reads Nsight Compute's CSV as it is (the percent, not the byte/s of a same-named metric)."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks" / "kernels"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def frt():
    return _load("fold_rows_table")


def _raw(path: Path) -> dict[str, tuple[str, str]]:
    """metric name -> (unit, value) of a one-kernel ncu CSV, the first of each name."""
    text = path.read_text()
    out: dict[str, tuple[str, str]] = {}
    for r in csv.DictReader(text[text.find('"ID"'):].splitlines()):
        out.setdefault(r["Metric Name"], (r["Metric Unit"], r["Metric Value"]))
    return out


def test_results_page_holds_the_profile_and_row_tables(frt):
    page = (HERE / "results.md").read_text()
    ncu = sorted(HERE.glob("h100_fold_ncu_*_15a4c8d.csv"))
    sweeps = [HERE / "h100_fold_rows_wide_15a4c8d.json", HERE / "h100_fold_rows_pipelined_54fcf46.json"]
    assert len(ncu) == 2 and all(p.exists() for p in sweeps)
    assert frt.render_profile(ncu) in page
    assert frt.render_rows(sweeps) in page


def test_the_summary_reads_each_number_from_the_csv(frt):
    """Each summarised value is the CSV's own (by metric name), and mem_pct is the percent."""
    ncu = _load("ncu_routing")
    for path in sorted(HERE.glob("h100_fold_ncu_*_15a4c8d.csv")):
        raw = _raw(path)
        (rec,) = ncu.summarise([str(path)])
        num = lambda name: float(raw[name][1].replace(",", ""))  # noqa: E731
        assert rec["registers"] == num("Registers Per Thread")
        assert rec["duration"] == num("Duration") and rec["duration_unit"] == "ns"
        assert rec["issue_busy_pct"] == num("Issue Slots Busy")
        assert rec["mem_pct"] == num("Memory Throughput") and raw["Memory Throughput"][0] == "%"
        assert 0 < rec["mem_pct"] <= 100
        stalls = dict(rec["top_stalls"])
        assert stalls["long_scoreboard"] == num(
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio")
        assert max(stalls.values()) == stalls[rec["top_stalls"][0][0]]


def test_every_row_in_the_sweeps_was_checked_against_the_cards_gradients():
    """The rows the tables rank ran with gradients inside the sweep's tolerance of the card's row."""
    for name in ("h100_fold_rows_wide_15a4c8d.json", "h100_fold_rows_pipelined_54fcf46.json"):
        doc = json.loads((HERE / name).read_text())
        errs = [r["grad_rel_err"] for r in doc["rows"] if r["what"] == "sweep:fold"]
        assert errs and max(errs) < doc["meta"]["tol"], name


def test_results_page_holds_the_offline_table_at_the_h100s_rows(frt):
    """The offline table is the committed compile's, read at the H100's own fold rows as
    launch_tables.json holds them."""
    table = json.loads((ROOT / "mhar_probe" / "kernels" / "launch_tables.json").read_text())
    h100 = {tuple(r[:4]): tuple(r[4:]) for r in table["devices"]["NVIDIA H100 80GB HBM3"]["fold"]}
    d = {"1B-train": 1280, "350M-train": 1024, "100M-train": 512}
    for shape, row in frt.H100_ROWS.items():
        assert h100[(d[shape], 8, 8, 4)] == row, shape
    path = HERE / "regs_offline_2026-12-06_fold_wide_triton3.6.json"
    dense = HERE / "regs_offline_2026-12-06_fold_dense_triton3.6.json"
    table = frt.render_offline(path, frt.H100_ROWS, dense)
    assert table in (HERE / "results.md").read_text()
    assert table.count("DENSE loop") == 3  # the dense file holds the card's rows, compiled DENSE


def test_results_page_holds_the_dense_tables(frt):
    page = (HERE / "results.md").read_text()
    masked = sorted(HERE.glob("h100_fold_dense_ab_base_*.json"))
    dense = sorted(HERE.glob("h100_fold_dense_ab_dense_*.json"))
    assert len(masked) == len(dense) == 2
    assert frt.render_dense(masked, dense) in page
    step = ROOT / "benchmarks" / "train_throughput"
    assert frt.render_dense_step(step / "h200_fold_dense_ab_1b_base.json", step / "h200_fold_dense_ab_1b_dense.json") in page


@pytest.mark.parametrize("args,says", [
    (["profile", "no_such.csv"], "no such file"),
    (["dense-step", "benchmarks/kernels/results.md"], "two files"),
    (["dense-step", "benchmarks/kernels/results.md", "benchmarks/kernels/results.md"], "not what this table reads"),
    (["dense", "benchmarks/kernels/h100_fold_rows_wide_15a4c8d.json"], "_ab_base_"),
])
def test_bad_input_is_one_message_and_exit_2(args, says):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(HERE / "fold_rows_table.py"), *args], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr, run.stderr
