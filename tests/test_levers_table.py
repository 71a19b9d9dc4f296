"""benchmarks/train_throughput/levers_table.py: issue 55's lever table in results.md is the one the
committed `*_levers_*.json` files render, and the renderer reads the arms it names."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks" / "train_throughput"


@pytest.fixture(scope="module")
def lt():
    spec = importlib.util.spec_from_file_location("levers_table", HERE / "levers_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_results_page_holds_the_table_the_files_render(lt):
    files = sorted(HERE.glob("h200_levers_*.json"))
    assert files, "no levers results files"
    assert lt.render(files) in (HERE / "results.md").read_text()


def test_a_row_is_its_files_numbers(lt, tmp_path):
    """A hand-built file: the baseline's tokens/s and peak GB, each arm's ratio and range, in order."""
    arms = ["baseline", *lt.ARMS]
    results = [dict(arm=a, tokens_per_s=1000.0 + i, vs_baseline=1 - i / 10, vs_baseline_range=[0.5, 1.0],
                    memory_vs_baseline=1 + i / 100, peak_memory_gb=2.0) for i, a in enumerate(arms)]
    doc = dict(meta=dict(args=dict(presets=["350m"], vocab=151936)), results=results)
    path = tmp_path / "x_levers_350m.json"
    path.write_text(json.dumps(doc))
    last = lt.render([path]).splitlines()[-1]
    assert last == ("| 350M | 1,000 | 0.900 (0.500-1.000) | 0.800 (0.500-1.000) | 0.700 (0.500-1.000) | "
                    "0.600 (0.500-1.000) | 0.500 (0.500-1.000) | 2.00 | 1.010 / 1.020 / 1.030 / 1.040 / 1.050 |")
    doc["results"] = results[:3]
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="lack the arms"):
        lt.render([path])
