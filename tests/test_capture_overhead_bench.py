"""benchmarks/capture_overhead: the script writes a record that names where it ran (commit, software,
card), and results.md's rows are the committed records' rows (`capture_overhead.py --table`)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPIC = ROOT / "benchmarks" / "capture_overhead"
SCRIPT = TOPIC / "capture_overhead.py"
RECORDS = sorted(TOPIC.glob("*.json"))


def _script(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def _bench():
    spec = importlib.util.spec_from_file_location("capture_overhead_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(paths: list[Path]) -> list[str]:
    bench = _bench()
    return [bench.table_row(json.loads(p.read_text())) for p in paths]


def test_results_md_holds_every_committed_records_row():
    text = (TOPIC / "results.md").read_text().split("## Superseded")[0]
    assert RECORDS
    missing = [row for row in _rows(RECORDS) if row not in text]
    assert not missing, f"results.md lacks the rows of the committed records: {missing}"


def test_a_run_records_its_commit_software_and_card(tmp_path):
    out = tmp_path / "r.json"
    run = _script("--preset", "tiny", "--batch", "1", "--seq", "16", "--batches", "1", "--repeats", "1",
                  "--draws", "1", "--out", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    prov = doc["provenance"]
    assert prov["code"]["commit"] and prov["code"]["code_sha256"]  # this checkout's, from git or the stamp
    assert prov["software"]["torch"] and prov["hardware"]["device"].startswith("cpu")
    table = _script("--table", str(out))
    assert table.returncode == 0 and table.stdout.splitlines()[2].startswith("| eager | ")


@pytest.mark.parametrize("bad", ["results.md", "missing.json"])
def test_table_of_a_file_that_is_no_record_is_one_message(bad, capsys):
    assert _bench().print_table([str(TOPIC / bad)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "not a capture_overhead results file" in out.err
