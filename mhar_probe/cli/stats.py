"""`mhar stats mcnemar|ceg|tails`: parser and handlers live in `analysis.stats.cli`."""

from analysis.stats.cli import add_stats_subparser

__all__ = ["add_stats_subparser"]
