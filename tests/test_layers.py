"""The house's floors only point down (issue 24): the import-linter contract in pyproject.toml
holds, places every module of mhar_probe on a floor, and breaks on a back-import."""

from __future__ import annotations

import copy
import pkgutil
import re
from pathlib import Path

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.application.use_cases import lint_imports
from importlinter.contracts.layers import LayersContract

import mhar_probe

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _config() -> dict:
    return read_configuration(str(PYPROJECT))


def _layers_contract() -> LayersContract:
    config = _config()
    options = next(c for c in config["contracts_options"] if c["id"] == "layers")
    return LayersContract(name=options["name"], session_options=config["session_options"],
                          contract_options=options)


def _layered_modules() -> set[str]:
    options = next(c for c in _config()["contracts_options"] if c["id"] == "layers")
    return {name.strip() for layer in options["layers"] for name in re.split(r"[|:]", layer)}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*_config()["session_options"]["root_packages"], cache_dir=None)


def test_lint_imports_keeps_every_contract(capsys):
    """What `lint-imports` runs, from the same configuration."""
    ok = lint_imports(config_filename=str(PYPROJECT), cache_dir=None, no_logo=True)
    assert ok, capsys.readouterr().out


def test_the_contract_ignores_no_import():
    """No entry point below the CLI is excused: `python -m mhar_probe.cli CMD` is the one (issue 34)."""
    options = next(c for c in _config()["contracts_options"] if c["id"] == "layers")
    assert not options.get("ignore_imports")


def test_no_two_packages_import_each_other(graph):
    """The floors as packages (mhar_probe.X, analysis, figures): their import graph has no circle."""
    def top(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2]) if parts[0] == "mhar_probe" and len(parts) > 1 else parts[0]

    edges = {(top(m), top(i)) for m in graph.modules for i in graph.find_modules_directly_imported_by(m)
             if top(m) != top(i) and top(i) != "mhar_probe"}  # the package's __init__ registers classes only
    reach = {a: {b for x, b in edges if x == a} for a, _ in edges}
    changed = True
    while changed:  # transitive closure
        changed = False
        for a in reach:
            more = set().union(*(reach.get(b, set()) for b in reach[a])) - reach[a]
            if more:
                reach[a] |= more
                changed = True
    circles = sorted(a for a in reach if a in reach[a])
    assert not circles, f"packages on an import circle: {circles}"


def test_every_module_of_the_package_sits_on_a_floor():
    """A new module of mhar_probe must be placed in the contract, or nothing checks it."""
    modules = {f"mhar_probe.{m.name}" for m in pkgutil.iter_modules(mhar_probe.__path__)}
    missing = sorted(modules - _layered_modules())
    assert not missing, f"add these to a layer of [tool.importlinter] in pyproject.toml: {missing}"
    assert {"analysis", "figures"} <= _layered_modules()


@pytest.mark.parametrize("importer,imported", [
    ("mhar_probe.model.config", "mhar_probe.train"),  # the model reaching up to the trainer
    ("mhar_probe.sweep.runner", "mhar_probe.cli.args"),  # a library module reaching into the CLI
    ("mhar_probe.capture.capture", "analysis.probes.width"),  # the library reaching into analysis
    ("analysis.stats.curves", "figures.style"),  # analysis reaching into figures
    ("mhar_probe.bench.routing", "mhar_probe.cli"),  # a benchmark as its own entry point (issue 34's circle)
    ("mhar_probe.cpt.trainer", "mhar_probe.cli.cpt"),  # mid-training reaching into its command
    ("analysis.stats.curves", "mhar_probe.sweep.grid"),  # analysis sits no higher than the runs it reads
    ("mhar_probe.sweep.runner", "analysis.stats.curves"),  # ... and the grids do not read it either
])
def test_a_back_import_breaks_the_contract(graph, importer, imported):
    contract = _layers_contract()
    assert contract.check(copy.deepcopy(graph), verbose=False).kept
    sabotaged = copy.deepcopy(graph)  # check() drops the ignored imports in place
    sabotaged.add_import(importer=importer, imported=imported)
    assert not contract.check(sabotaged, verbose=False).kept


def test_no_two_modules_import_each_other(graph):
    """No import circle between modules either, function-level imports included (issue 51: data/built.py
    and data/corpus.py imported each other; the loader now lives in data/load.py above both)."""
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in graph.modules} for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(m: str) -> None:  # Tarjan's strongly connected components, recursively
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for i in edges[m]:
            if i not in index:
                visit(i)
                low[m] = min(low[m], low[i])
            elif i in on_stack:
                low[m] = min(low[m], index[i])
        if low[m] == index[m]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == m:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in sorted(edges):
        if m not in index:
            visit(m)
    # a package's __init__ re-exports its modules, which import siblings through it: not a circle of code
    circles = [c for c in circles if not any(m.rsplit(".", 1)[-1] != "__init__" and any(
        o == m.rsplit(".", 1)[0] for o in c) for m in c)]
    assert not circles, f"modules on an import circle: {circles}"
