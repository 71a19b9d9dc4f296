"""Every notebook runs top to bottom on a CPU (nbclient); how long they take is not checked here.

Notebooks are committed without outputs; this test also checks that.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from mhar_probe.runfiles import RunFiles
from results_checks import baseline_only_study, synthetic_paper350_study

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


def test_the_notebooks_extra_brings_what_tqdms_notebook_bars_need():
    """Issue 54: without ipywidgets every progress bar in a notebook warned "TqdmWarning: IProgress not
    found" (tqdm.auto, ours and Hugging Face's); the notebooks extra and the lock carry it."""
    import re
    import tomllib

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[1]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["notebooks"]
    (req,) = [Requirement(r) for r in extra if Requirement(r).name == "ipywidgets"]
    lock = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (root / "requirements-lock-cpu.txt").read_text(), re.M))
    assert req.specifier.contains(lock["ipywidgets"])
    assert {"widgetsnbextension", "jupyterlab-widgets"} <= set(lock)  # its own requirements, pinned too


def test_the_notebooks_are_these():
    assert [p.name[:3] for p in NOTEBOOKS] == ["01_", "02_", "03_", "04_", "05_", "06_", "07_", "08_"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


RECIPE_NOTEBOOK = next(p for p in NOTEBOOKS if p.name.startswith("08_"))  # 08_released_8b_pair
#: ~2.5 min on two loaded cores (the harness evaluates both arms); its offline recipe runs by default in
#: tests/test_authors_recipe.py, and its settings and README references are checked below
SLOW = {RECIPE_NOTEBOOK}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW else p for p in NOTEBOOKS],
                         ids=lambda p: p.stem)
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


STUDY_NOTEBOOK = next(p for p in NOTEBOOKS if p.name.startswith("06_"))  # 06_study100m: opens results/study100m ($MHAR_STUDY_DIR) from its files alone
STUDY_DIR = STUDY_NOTEBOOK.parents[1] / "results" / "study100m"
STUDY350_NOTEBOOK = next(p for p in NOTEBOOKS if p.name.startswith("07_"))  # 07_study350m: opens results/study350m ($MHAR_STUDY_DIR) the same way


def _executed_text(path: Path, study: Path, tmp_path: Path, monkeypatch) -> str:
    """Run the notebook on the study folder `study`; every printed line and displayed text, joined.
    No cell may raise."""
    monkeypatch.setenv("MHAR_STUDY_DIR", str(study))
    monkeypatch.setenv("MHAR_NOTEBOOK_DIR", str(tmp_path / "work"))
    nb = nbformat.read(path, as_version=4)
    # a hang guard per cell, not a speed test: two parts regenerate in one cell (~1 min on two loaded cores)
    NotebookClient(nb, timeout=3 * BUDGET_S, kernel_name=venv_kernel(tmp_path, monkeypatch),
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return "\n".join(o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/markdown", "")
                     for o in outputs)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # ~90 s on two cores; the demo-level check (test_study_results) runs by default
def test_the_study_notebook_on_a_study_before_its_first_routed_run(tmp_path, monkeypatch):
    """The 100M study as it stood with the baseline alone (no MHAR run, no capture, no evaluation):
    the notebook runs through, draws the loss curve, says in one line each what waits for runs,
    and writes nothing into the study folder. Its middle/ folder holds a copy of the committed runs,
    standing in for the middle rung's export (read under its own plan, MIDDLE), so that every
    section goes over two parts: one whose routed run is in and one whose is not."""
    study = tmp_path / "study100m"
    baselines = baseline_only_study(STUDY_DIR, study)
    shutil.copytree(STUDY_DIR / "runs", study / "middle" / "runs")
    before = _files(study)
    text = _executed_text(STUDY_NOTEBOOK, study, tmp_path, monkeypatch)
    assert "middle rung: 9 of 9 planned runs of plan 'middle'" in text
    assert "middle rung mhar H=8 seed 0: spread 0.105 vs random queries 0.031" in text
    assert "middle rung: No captured" not in text
    assert f"{len(baselines)} of 13 planned runs of plan 'study100m'" in text  # the baselines alone
    baseline = RunFiles(STUDY_DIR / "runs" / "100m-baseline-kv4-lr5e-4-s0-n3815").summary()
    assert f"tail-mean {baseline['tail_mean_val_loss']:.4f}" in text  # the baseline's curve and its tail-mean
    assert "No captured routed run yet: no depth maps." in text
    assert "Routed runs of the main seed not in yet: attnres seed 0, mhar H=8 seed 0" in text
    assert "No captured multi-head MHAR run yet: no per-head deviations (waiting for mhar H=8 seed 0)." in text
    assert "skipped probe tables: no captured routed run" in text
    assert "perhead: skipped, no captured multi-head (mhar, H > 1) run with probes" in text
    assert "The committed claims.md differs from the table regenerated from the runs present" in text
    # every claim of the 100M part waits: 6 core rows, 4 paper deltas, 5 spreads, width, scale, best-vs-best
    assert "100M (study100m): pending: runs missing: 18\n" in text
    assert "No 350M pair yet (" in text  # baseline_only_study copies runs/ alone
    assert _files(study) == before


def test_the_study_notebook_on_a_study_with_no_runs_yet(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    text = _executed_text(STUDY_NOTEBOOK, tmp_path / "empty", tmp_path, monkeypatch)
    assert "No study runs yet (" in text and "middle rung: No study runs yet (" in text
    assert "No runs with metrics yet: no loss curves." in text
    assert "No claim table: no runs yet." in text
    assert "No 350M pair yet (" in text  # no scale350m/ either: one line, no figure
    assert "Traceback" not in text


def test_the_study_notebook_on_a_350m_pair_with_only_its_baseline(tmp_path, monkeypatch):
    """scale350m/ holding the baseline alone (the manifest listing it only, no MHAR folder), with no 100M
    runs: the 350M section says in one line that the pair is not complete, draws no pair figure and
    still shows the pair's claim rows, every one pending; nothing is written into the study folder."""
    study = tmp_path / "study100m"
    pair = study / "scale350m" / "runs"
    shutil.copytree(STUDY_DIR / "scale350m" / "runs", pair, ignore=shutil.ignore_patterns("350m-mhar-*"))
    manifest = json.loads((pair / "manifest.json").read_text())
    manifest["runs"] = [r for r in manifest["runs"] if r["axes"]["method"] == "baseline"]
    (pair / "manifest.json").write_text(json.dumps(manifest))
    before = _files(study)
    text = _executed_text(STUDY_NOTEBOOK, study, tmp_path, monkeypatch)
    baseline = RunFiles(pair / "350m-baseline-kv8-lr5e-4-s0-n3052").summary()
    assert f"350M baseline seed 0: finished, tail-mean {baseline['tail_mean_val_loss']:.4f}\n" in text
    assert "350M mhar H=8 seed 0: not in scale350m/runs\n" in text
    assert f"The 350M pair is not complete in {study / 'scale350m'}: no curves or gain to compare yet." in text
    assert not list((tmp_path / "work").rglob("val_loss_350m_pair.png"))
    assert "350M pair (study350m): pending: runs missing: 6\n" in text
    assert "No committed scale350m/claims.md to compare with." in text
    assert _files(study) == before


# ---------------------------------------------------------------------------- the recipe notebook and the README
README = RECIPE_NOTEBOOK.parents[1] / "README.md"
RECIPE_SECTION = "Probe the paper's released 8B pair"


def _recipe_section() -> str:
    text = README.read_text()
    assert f"## {RECIPE_SECTION}\n" in text
    return text.split(f"## {RECIPE_SECTION}\n", 1)[1].split("\n## ", 1)[0]


def _readme_commands() -> list[list[str]]:
    """The section's bash block, one argv per command (continuations joined, comments dropped)."""
    import shlex

    block = _recipe_section().split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _flags(argv: list[str]) -> dict[str, str | bool]:
    """--name value pairs of `argv`; a flag followed by another flag (or nothing) is True."""
    out: dict[str, str | bool] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[arg] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def _notebook_constant(name: str):
    """The literal assigned to `name` in the recipe notebook's code."""
    import ast

    nb = nbformat.read(RECIPE_NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                    return ast.literal_eval(node.value)
    raise AssertionError(f"{RECIPE_NOTEBOOK.name} assigns no {name}")


def test_the_recipe_notebook_runs_the_readmes_commands_for_the_8b_pair():
    """The notebook's settings for the Hub pair (EIGHT_B) are the README's commands, flag for flag,
    and its default models are the README's Hub ids."""
    eight_b = _notebook_constant("EIGHT_B")
    commands = _readme_commands()
    imports = [c for c in commands if c[:2] == ["mhar", "import"]]
    assert [c[2] for c in imports] == [_notebook_constant("MHAR_MODEL"), _notebook_constant("PLAIN_MODEL")]
    assert all(_flags(c) == {"--dtype": eight_b["import"]["dtype"]} for c in imports)
    (capture,) = [c for c in commands if c[:2] == ["mhar", "capture"]]
    assert _flags(capture) == {f"--{k.replace('_', '-')}": str(v) for k, v in eight_b["capture"].items()}
    lm_evals = [c for c in commands if c[0] == "lm_eval"]
    assert len(lm_evals) == 2
    for command in lm_evals:
        flags = _flags(command)
        assert {k: flags[f"--{k}"] for k in eight_b["lm_eval"]} == {k: str(v) for k, v in eight_b["lm_eval"].items()}
        assert flags["--log_samples"] is True and f"dtype={eight_b['import']['dtype']}" in flags["--model_args"]
    (mcnemar,) = [c for c in commands if c[:3] == ["mhar", "stats", "mcnemar"]]
    assert _flags(mcnemar)["--task"] == eight_b["lm_eval"]["tasks"]
    assert f"`{RECIPE_NOTEBOOK.relative_to(README.parent)}`" in _recipe_section()  # the README points to it


def test_the_recipe_notebook_reads_each_steps_needs_from_the_readme_and_repeats_none():
    """Every `needs(STEP)` of the notebook finds its row in the README's table (the one source of the
    disk, memory and time figures), and no cell states such a figure itself."""
    import re

    nb = nbformat.read(RECIPE_NOTEBOOK, as_version=4)
    source = "\n".join(c.source for c in nb.cells)
    steps = re.findall(r'needs\("([^"]+)"\)', source)
    assert steps == ["1.", "2.", "probe", "3.", "4."]
    rows = [line for line in _recipe_section().splitlines() if line.startswith("| ")]
    for step in steps:
        assert len([r for r in rows if r.startswith(f"| {step}")]) == 1, step
    assert _notebook_constant("SECTION") == RECIPE_SECTION
    assert not re.search(r"\d\s*(GB|GiB|MB|min\b|minutes|hours?\b)", source)


def test_the_350m_notebook_with_no_run_in(tmp_path, monkeypatch):
    """Before the study's first run: one line says so, the claim table shows every row pending, the
    corpus section reads the committed lock, and no cell raises."""
    study = tmp_path / "study350m"
    shutil.copytree(STUDY350_NOTEBOOK.parents[1] / "results" / "study350m" / "corpus", study / "corpus")
    text = _executed_text(STUDY350_NOTEBOOK, study, tmp_path, monkeypatch)
    assert "No run is in yet (" in text and "baseline seed 2, attnres seed 0" in text
    assert "No gain over training yet: no finished run pairs with the baseline." in text
    assert "paper350m: pending: runs missing: 16\n" in text
    assert "| 2 | pending: no evaluation of baseline seed 2 (run not finished), mhar H=8 seed 2 (run not finished) |" in text
    lock = json.loads((study / "corpus" / "lock.json").read_text())
    assert f"distinct training tokens {lock['train_tokens']:,}" in text
    assert "Traceback" not in text


@pytest.mark.slow  # ~60 s on two cores: every figure generator runs over eleven runs
def test_the_350m_notebook_on_a_filled_study(tmp_path, monkeypatch):
    """The main grid and MHAR H=16 in (synthetic losses): the runs table, the gain figure with its
    one-seed note and the gain table, the claim rows read."""
    study = tmp_path / "study350m"
    synthetic_paper350_study(study, [(m, h, s) for m, h in (("baseline", None), ("attnres", None), ("mhar", 8))
                                     for s in (0, 1, 2)] + [("mhar", 16, 0)])
    text = _executed_text(STUDY350_NOTEBOOK, study, tmp_path, monkeypatch)
    assert "10 of 11 planned runs of plan 'paper350m' are in." in text
    assert "one seed, drawn dashed with no band: mhar H=16 - attnres (seed 0), mhar H=16 - baseline (seed 0)" in text
    assert "| 5,000 | 163.8 |" in text and "No corpus lock in" in text
    assert "| mhar_lastword | acc | 0, 1, 2 |" in text  # McNemar per seed: the line across the three seeds
    assert list((tmp_path / "work").rglob("gain_curve_350m.png"))
