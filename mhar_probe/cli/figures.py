"""`mhar figures RUNS_DIR --out DIR`: parser and handler live in `figures.cli`."""

from figures.cli import add_figures_subparser

__all__ = ["add_figures_subparser"]
