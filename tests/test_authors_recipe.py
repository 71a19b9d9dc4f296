"""The offline part of the README recipe "Probe the paper's released 8B pair", end to end on a
tiny pair in the authors' format: `mhar import` of a delta_mh model and of its plain control,
`mhar capture` with the random-query null and the probes, `mhar probe`, `mhar figures` (the
per-head deviation map), `mhar eval` of both arms
on a local task (samples logged), and `mhar stats mcnemar` between them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import xarray as xr

from mhar_probe.cli import main
from mhar_probe.convert.tiny_authors import write_tiny_pair
from mhar_probe.evaluate.nextline_task import write_nextline_task


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(root, delta_mh source, plain control source): one Llama base, the control without routing."""
    root = tmp_path_factory.mktemp("recipe")
    os.environ["MHAR_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "mhar-cache")
    return (root, *write_tiny_pair(root))


def mhar(*argv) -> int:
    return main([str(a) for a in argv])


def test_recipe_runs_offline_end_to_end(pair, capsys, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    root, src_mhar, src_plain = pair
    arms = {"mhar": root / "models" / "mhar", "plain": root / "models" / "plain"}
    assert mhar("import", src_mhar, arms["mhar"]) == 0
    assert mhar("import", src_plain, arms["plain"]) == 0
    assert json.loads((arms["plain"] / "import.json").read_text())["imported_as"]["method"] == "baseline"

    routing = arms["mhar"] / "routing.nc"  # the default output
    assert mhar("capture", arms["mhar"], "--tokens", 256, "--seq-len", 32, "--batch-size", 4,
                "--draws", 2, "--device", "cpu", "--no-progress") == 0
    ds = xr.open_dataset(routing)
    L = 6
    assert ds.sizes["site"] == 2 * L + 1 and ds.attrs["method"] == "delta" and ds.attrs["routing_heads"] == 4
    assert list(ds["source_label"].values) == ["null", "emb", "C1", "C2"]  # p = ceil(6 / 4) = 2
    assert ds.sizes["draw"] == 2 and ds.attrs["recompute_max_abs_err"] < 1e-4  # probes saw the model's weights
    w = ds["weight_mean"].values  # [site, source, head]
    assert abs(float(w[0, 0, 0]) - 1.0) < 1e-6  # layer 0's attention site reads its null alone
    ds.close()
    assert mhar("probe", routing, "--out", root / "probes", "--no-progress") == 0
    assert any((root / "probes").iterdir())
    assert mhar("figures", root / "models", "--out", root / "figures", "--only", "perhead") == 0
    assert (root / "figures" / "perhead.png").is_file()  # the per-head deviation map of the imported model

    tasks = write_nextline_task(root / "tasks")
    evals = {}
    for name, model_dir in arms.items():
        evals[name] = root / f"eval-{name}"
        assert mhar("eval", model_dir, "--tasks", "toy_nextline", "--tasks-dir", tasks, "--limit", 12,
                    "--max-length", 64, "--batch-size", 4, "--device", "cpu", "--out", evals[name]) == 0
        assert list(evals[name].rglob("samples_toy_nextline_*.jsonl"))
    capsys.readouterr()
    assert mhar("stats", "mcnemar", evals["plain"], evals["mhar"], "--task", "toy_nextline",
                "--out", root / "mcnemar", "--n-boot", 100) == 0
    row = json.loads((root / "mcnemar" / "mcnemar.json").read_text())["rows"][0]
    assert row["task"] == "toy_nextline" and row["n"] == 12 and row["only_a"] == row["only_b"] == 0
