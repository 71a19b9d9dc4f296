"""The catalogue of figure and table generators.

A generator is a function `make(ctx: Context) -> list[Output]` registered with
`@generator(name, kind, paper_ref, needs)`. It reads what it needs from the context (the runs
dataset, benchmark files, eval outputs, captures, the paper's values), draws or tabulates, writes
through `ctx.save_figure` / `ctx.write_table`, and returns one Output per file group. When the
inputs are not there it raises `Skip(reason, needs=[...])`; the build lists the skip and what
runs or files would make it possible.

Adding one: drop a module `figures/fig_<name>.py` or `figures/tab_<name>.py` holding a decorated
function; `load_generators()` imports every such module, so nothing else needs editing.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

KINDS = ("figure", "table")


class Skip(Exception):
    """A generator cannot run on these inputs; `needs` says what would make it possible."""

    def __init__(self, reason: str, needs: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.needs = list(needs or [])


@dataclass
class Output:
    """One written artefact: its name, files, and the numbers it shows (for checks and reports)."""

    name: str
    paths: list[Path]
    data: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Generator:
    name: str
    kind: str
    paper_ref: str
    needs: str
    make: Callable[..., list[Output]]


GENERATORS: dict[str, Generator] = {}


def generator(name: str, *, kind: str, paper_ref: str, needs: str) -> Callable:
    """Register `make(ctx) -> list[Output]` under `name` (unique)."""
    if kind not in KINDS:
        raise ValueError(f"generator kind must be one of {KINDS}, got {kind!r}")

    def register(make: Callable[..., list[Output]]) -> Callable[..., list[Output]]:
        if name in GENERATORS and GENERATORS[name].make is not make:
            raise ValueError(f"two generators named {name!r}")
        GENERATORS[name] = Generator(name, kind, paper_ref, needs, make)
        return make

    return register


def load_generators() -> dict[str, Generator]:
    """Import every figures/fig_*.py and figures/tab_*.py module; returns the registry by name."""
    package = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(package)]), key=lambda m: m.name):
        if info.name.startswith(("fig_", "tab_")):
            importlib.import_module(f"figures.{info.name}")
    return dict(sorted(GENERATORS.items()))


def generator_lines() -> list[str]:
    """One line per generator: name, kind, paper reference and what it needs (`mhar figures --list`)."""
    return [f"{name:22s} {gen.kind:6s} {gen.paper_ref:24s} needs: {gen.needs}"
            for name, gen in load_generators().items()]
