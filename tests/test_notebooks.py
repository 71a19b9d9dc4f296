"""Every notebook runs top to bottom on a CPU (nbclient); how long they take is not checked here.

Notebooks are committed without outputs; this test also checks that.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
BUDGET_S = 600  # per cell: catches a hung kernel only, not a slow machine (no wall-clock budget in tests)


def venv_kernel(tmp_path: Path, monkeypatch) -> str:
    """A kernelspec that starts this interpreter (the project's venv), whatever kernels the
    machine has installed; JUPYTER_PATH makes it visible to nbclient."""
    import json
    import os

    spec = tmp_path / "kernels" / "mhar-venv"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "mhar-probe venv", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path) + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
    return "mhar-venv"


def test_there_are_five_notebooks():
    assert [p.name[:3] for p in NOTEBOOKS] == ["01_", "02_", "03_", "04_", "05_"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MHAR_NOTEBOOK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path.parent / "mhar-nb-cache"))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=BUDGET_S, kernel_name=venv_kernel(tmp_path, monkeypatch),
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    if os.environ.get("MHAR_KEEP_EXECUTED_NOTEBOOKS"):  # for reading the outputs by eye
        nbformat.write(nb, Path(os.environ["MHAR_KEEP_EXECUTED_NOTEBOOKS"]) / path.name)
