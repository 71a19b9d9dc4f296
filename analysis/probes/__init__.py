"""Forced-compromise probes on routing datasets (paper appendix "Why single-head routing breaks").

Each probe takes routing datasets (`mhar_probe.capture`) and returns an `xarray.Dataset`
carrying its inputs' provenance:

    width_disagreement(ds)            slice-KL (trained, random-query null, learned excess)
    matched_source_count(dss)         KL at equal source counts across runs
    source_collinearity(ds)           mean pairwise cosine per site and over all sources
    per_head_deviation(ds)            w_h - consensus, null, split-half r, cross-head r
    head_alignment(mhar_ds, hw_ds)    mhar vs mhar_hw
    probe_table / perhead_table / headalign_table + write_table   paper-style tables
"""

from .alignment import head_alignment
from .collinearity import source_collinearity
from .deviation import per_head_deviation
from .source_count import matched_source_count
from .tables import headalign_table, perhead_table, probe_table, write_table
from .width import width_disagreement

__all__ = ["head_alignment", "headalign_table", "matched_source_count", "per_head_deviation",
           "perhead_table", "probe_table", "source_collinearity", "width_disagreement", "write_table"]
