"""`methods.run_label` is the one spelling of a run's method and head count: checked over every
method, and through each place that names runs (claim table, probe columns, CEG rows, figure
tables), which before it disagreed on whether mhar_hw, delta and attnres carry an H."""

from __future__ import annotations

import json

import pytest
import xarray as xr

from analysis.probes.provenance import run_label as probe_column
from figures.build import build
from figures.synthetic import write_run
from mhar_probe.cli import main as stats_main
from mhar_probe.demo import claims
from mhar_probe.model.methods import METHODS, run_label

#: a run of each method at H = 8, as plain (claims, statistics), display (figures) and compact (probe
#: columns) labels: H is named where the method lets you choose it, never for attnres (H = 1 by
#: definition) or the methods without routing heads
LABELS = {  # plain, display, compact, and the display name without H
    "baseline": ("baseline", "Baseline", "baseline", "Baseline"),
    "hyper": ("hyper", "Hyper-conn.", "hyper", "Hyper-conn."),
    "attnres": ("attnres", "Single-head", "attnres", "Single-head"),
    "mhar": ("mhar H=8", "MHAR (H=8)", "mhar H8", "MHAR"),
    "mhar_hw": ("mhar_hw H=8", "MHAR (head-wise, H=8)", "mhar_hw H8", "MHAR (head-wise)"),
    "delta": ("delta H=8", "MHAR (delta, H=8)", "delta H8", "MHAR (delta)"),
}


@pytest.mark.parametrize("name", METHODS)
def test_run_label_of_every_method(name):
    assert set(LABELS) == set(METHODS)  # a new method needs its labels here
    plain, display, compact, bare = LABELS[name]
    assert (run_label(name, 8), run_label(name, 8, "display"), run_label(name, 8, "compact")) == (plain, display,
                                                                                                 compact)
    assert run_label(name, None) == name and run_label(name, None, "display") == bare
    assert run_label(name, 0) == name  # H = 0: the H coordinate of a run without routing heads
    assert run_label(name, 8, "display", note="head mean") == (
        f"{display[:-1]}, head mean)" if "H=" in display else display)


def test_run_label_of_an_unknown_method_and_style():
    assert run_label("later", 4) == "later H=4" and run_label("later", None, "display") == "later"
    with pytest.raises(ValueError, match="unknown label style 'fancy'"):
        run_label("mhar", 4, "fancy")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", METHODS)
def test_claims_and_probe_columns_name_runs_by_run_label(name):
    """Before: the claim table named delta runs without H (it tested `startswith('mhar')`), the
    probe columns named H only for mhar and mhar_hw."""
    assert claims.label(name, 4, 2, 1) == f"{run_label(name, 4)} seed 1"
    ds = xr.Dataset(attrs={"method": name, "routing_heads": 4, "preset": "tiny"})
    assert probe_column(ds) == f"tiny {run_label(name, 4, 'compact')}"
    if name == "delta":
        assert (claims.label(name, 4, 2, 1), probe_column(ds)) == ("delta H=4 seed 1", "tiny delta H4")


def test_ceg_rows_name_runs_by_run_label(tmp_path, capsys):
    """Before: a CEG row named attnres 'attnres H=1' (its recorded head count), unlike every other table."""
    runs = [write_run(tmp_path, f"{m}", method=m, H=H, final_loss=loss, flops_per_token=f, steps=60)
            for m, H, loss, f in (("baseline", None, 3.2, 1e6), ("attnres", 1, 3.1, 1.01e6),
                                  ("mhar_hw", 2, 3.05, 1.02e6))]
    out = tmp_path / "ceg.json"
    assert stats_main(["stats", "ceg", *map(str, runs), "--alpha", "0.1", "--json", str(out)]) == 0
    methods = sorted(r["method"] for r in json.loads(out.read_text())["rows"])
    assert methods == [f"{run_label('attnres', 1)} lr=0.0005", f"{run_label('mhar_hw', 2)} lr=0.0005"]
    assert methods == ["attnres lr=0.0005", "mhar_hw H=2 lr=0.0005"]


def test_figure_tables_name_mhar_hw_with_its_h(tmp_path):
    """Before: the LR-sweep table named H for mhar only (the seed table for mhar and mhar_hw)."""
    for seed in (1, 2):
        for lr in (5e-4, 1e-3):
            for m, H, final in (("baseline", None, 3.1), ("mhar", 4, 3.0), ("mhar_hw", 2, 3.02)):
                write_run(tmp_path / "runs", f"{m}-s{seed}-lr{lr:g}", method=m, H=H, seed=seed, lr=lr, steps=80,
                          final_loss=final + (0.05 if lr == 1e-3 else 0) + 0.002 * seed)
    rep = build(tmp_path / "runs", tmp_path / "out", only=["table_lr_sweep", "table_seeds"])
    for name in ("table_lr_sweep", "table_seeds"):
        labels = [r.cells[1].text for r in rep.made[name][0].data["table"].rows if r.source == "yours"]
        assert {"MHAR (H=4)", "MHAR (head-wise, H=2)"} <= set(labels), (name, labels)
