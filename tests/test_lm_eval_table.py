"""Stock `lm_eval` under the lock: its results table (`lm_eval.utils.make_table`, what `lm_eval`
prints after a run) has its named columns. pytablewriter 0.38, which the lock once pinned
(python-dateutil 4 rules out the typepy that newer pytablewriter needs, so a resolver fell back),
prints `| A | B | C | ...` instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

LOCK = Path(__file__).resolve().parents[1] / "requirements-lock-cpu.txt"
COLUMNS = ["Tasks", "Version", "Filter", "n-shot", "Metric", "Value", "Stderr"]


def results() -> dict:
    """The shape of an lm_eval results dict, one task with one metric."""
    return {"results": {"mhar_lastword": {"alias": "mhar_lastword", "acc,none": 0.25, "acc_stderr,none": 0.0433}},
            "versions": {"mhar_lastword": 1.0}, "n-shot": {"mhar_lastword": 0},
            "higher_is_better": {"mhar_lastword": {"acc": True}}}


def test_make_table_prints_named_columns():
    utils = pytest.importorskip("lm_eval.utils")
    table = utils.make_table(results())
    header = [cell.strip() for cell in table.splitlines()[0].strip().strip("|").split("|")]
    assert [c for c in header if c] == COLUMNS, table
    row = next(line for line in table.splitlines() if "mhar_lastword" in line)
    assert "acc" in row and "0.25" in row and "0.0433" in row


def test_the_lock_pins_a_pytablewriter_that_names_the_columns():
    pin = re.search(r"^pytablewriter==(\S+)$", LOCK.read_text(), re.M)
    assert pin is not None and Version(pin.group(1)) >= Version("1.2.1")
