"""The demo's calls into `analysis` (probes, statistics) and `figures`, with typed options.

Those packages keep their entry points in their command handlers (`cmd_probe(args)`,
`cmd_mcnemar(args)`, ...), which compute, print their tables and write files; the demo calls
them in-process with the option objects below, not through the `mhar` parser. Field names
and defaults are those of the handlers' parsers (tests/test_demo.py holds them equal).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field

from ..tail import TAIL_K


@dataclass
class ProbeOptions:
    """`mhar probe`: forced-compromise probe tables of runs or routing datasets."""

    inputs: list[str]
    out: str = "probes"
    slices: int | None = None
    draws: int | None = None
    tokens: int = 65536
    batch_size: int = 8
    first_sites: int = 10
    overwrite: bool = False
    no_progress: bool = False


@dataclass
class McNemarOptions:
    """`mhar stats mcnemar`: paired exact McNemar on two lm-eval outputs."""

    dir_a: str
    dir_b: str
    task: list[str] | None = None
    filter: list[str] | None = None
    metric: str | None = None
    out: str | None = None
    overwrite: bool = False
    n_boot: int = 10_000
    level: float = 0.95
    seed: int = 0
    allow_unpaired: bool = False
    date_a: str | None = None
    date_b: str | None = None


@dataclass
class TailsOptions:
    """`mhar stats tails`: tail-means and paired per-seed deltas."""

    runs: list[str]
    k: int = TAIL_K
    baseline: str = "baseline"
    level: float = 0.95
    json: str | None = None
    overwrite: bool = False


@dataclass
class CegOptions:
    """`mhar stats ceg`: power-law fit to the baselines and compute-equivalent gain."""

    runs: list[str]
    alpha: list[float] = field(default_factory=list)
    baseline: str = "baseline"
    k: int = TAIL_K
    min_flops: float = 0.0
    divide_routing: bool = False
    json: str | None = None
    overwrite: bool = False


@dataclass
class FiguresOptions:
    """`mhar figures`: every paper figure and table the runs allow."""

    runs: str
    out: str
    only: list[str] | None = None
    benchmarks: list[str] | None = None
    evals: str | None = None
    overwrite: bool = False
    list: bool = False
    mhar_heads: int | None = None  # the MHAR H of the comparison tables (the plan's evaluated H)


def _namespace(options: object) -> argparse.Namespace:
    return argparse.Namespace(**asdict(options))  # type: ignore[call-overload]


def probe(options: ProbeOptions) -> int:
    from analysis.probes.cli import cmd_probe

    return cmd_probe(_namespace(options))


def mcnemar(options: McNemarOptions) -> int:
    from analysis.stats.cli import cmd_mcnemar

    return cmd_mcnemar(_namespace(options))


def tails(options: TailsOptions) -> int:
    from analysis.stats.cli import cmd_tails

    return cmd_tails(_namespace(options))


def ceg(options: CegOptions) -> int:
    from analysis.stats.cli import cmd_ceg

    return cmd_ceg(_namespace(options))


def build_figures(options: FiguresOptions) -> int:
    from figures.cli import cmd_figures

    return cmd_figures(_namespace(options))
