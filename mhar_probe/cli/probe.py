"""`mhar probe`: the forced-compromise probes; parser and handler live in `analysis.probes.cli`."""

from analysis.probes.cli import add_probe_subparser

__all__ = ["add_probe_subparser"]
