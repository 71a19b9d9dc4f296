"""figures/tab_cost.py on a file that timed both stack backwards in one run
(`train_throughput.py --routing-backward fold gather`): its MHAR rows share the method's name and
must be told apart by the backward they ran. The file is a committed step record (the fold's) with
a gather arm added as `--routing-backward fold gather` writes it: the MHAR row again, its backward
and its ratio changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from figures.build import build

FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput" / "h200_fold_100m.json"


def test_fold_and_gather_rows_are_labelled_by_backward(tmp_path):
    bench = tmp_path / "bench" / "train_throughput"
    bench.mkdir(parents=True)
    doc = json.loads(FILE.read_text())
    fold = next(r for r in doc["results"] if r["method"] == "mhar")
    assert fold["routing_backward"] == "fold"
    doc["results"].append(dict(fold, arm="mhar/gather", routing_backward="gather",
                               vs_baseline=fold["vs_baseline"] * 0.97))
    (bench / FILE.name).write_text(json.dumps(doc))
    mhar = [r for r in doc["results"] if r["method"] == "mhar"]
    assert [r["routing_backward"] for r in mhar] == ["fold", "gather"]
    report = build(None, tmp_path / "figs", only=["table_cost"], benchmarks=[tmp_path / "bench"])
    assert not report.failed and not report.skipped
    data = report.made["table_cost"][0].data
    rows = [row for row in data["table"].rows if row.source == "yours" and row.cells[1].value.startswith("mhar")]
    labels = [row.cells[1].text for row in rows]
    assert labels == ["MHAR (fold backward, Cb 8)", "MHAR (gather backward)"]
    assert [row.cells[1].value for row in rows] == ["mhar", "mhar/gather"]
    base = next(r for r in doc["results"] if r["method"] == "baseline")
    assert data["ratios"][(FILE.name, "mhar/gather")] == pytest.approx(mhar[1]["vs_baseline"])
    assert data["ratios"][(FILE.name, "mhar")] == pytest.approx(mhar[0]["vs_baseline"])
    assert base["routing_backward"] == "fold"  # recorded for every arm, labelled only where it routes
    text = (tmp_path / "figs" / "table_cost.md").read_text()
    assert "| Baseline |" in text and "Baseline (fold" not in text
