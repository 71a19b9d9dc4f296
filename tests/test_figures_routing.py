"""Routing figures and tables from captured datasets: depth-read matrices (rank 1 for a single
head, H blocks for MHAR), depth maps and per-head deviation maps with the unreachable cells
masked exactly, and probe / head-alignment tables equal to the probe functions' numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from analysis.probes import probe_table
from analysis.probes.deviation import per_head_deviation
from figures.build import build
from mhar_probe.capture import capture_routing
from mhar_probe.model import MHARConfig, MHARForCausalLM

DIMS = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, vocab_size=97)
RUNS = {"single": ("attnres", 1, 3.10), "multi": ("mhar", 2, 3.00), "aligned": ("mhar_hw", 2, 3.02)}


def routing_run(root, name: str, method: str, H: int, val_loss: float, seed: int) -> None:
    """A run directory with a captured routing dataset of a model with non-trivial queries."""
    torch.manual_seed(seed)
    model = MHARForCausalLM(MHARConfig.from_preset("tiny", residual_method=method, routing_heads=H, **DIMS)).eval()
    with torch.no_grad():
        for site in model.sites:
            site.query.normal_(0, 2.0)
    run = root / name
    run.mkdir(parents=True)
    batches = [torch.randint(0, 97, (4, 16), generator=torch.Generator().manual_seed(seed + i)) for i in range(4)]
    capture_routing(model, batches, draws=4, out=run / "routing.nc", run_path=run, progress=False,
                    attrs={"preset": "tiny"})
    (run / "train_config.json").write_text(json.dumps(dict(method=method, heads=H, seed=0, preset="tiny")))
    rows = [dict(step=0, val_loss=8.0), dict(step=10, loss=val_loss, val_loss=val_loss)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("routing_runs")
    for i, (name, (method, H, loss)) in enumerate(RUNS.items()):
        routing_run(root, name, method, H, loss, seed=i)
    out = tmp_path_factory.mktemp("routing_figs")
    rep = build(root, out, only=["depth_read", "depth_map", "perhead", "table_probe", "table_headalign"])
    return root, rep


def test_all_routing_generators_render(report):
    _, rep = report
    assert not rep.failed and not rep.skipped, (rep.failed, {k: s.reason for k, s in rep.skipped.items()})
    for outputs in rep.made.values():
        for o in outputs:
            assert all(p.exists() and p.stat().st_size > 0 for p in o.paths)


def test_depth_read_ranks(report):
    _, rep = report
    panels = rep.made["depth_read"][0].data["panels"]
    pre, single, multi = (panels[k] for k in panels)
    assert pre["rank"] == 1 and set(np.unique(pre["matrix"])) <= {0.0, 1.0}  # one-hot read
    assert single["rank"] == 1 and single["heads"] == 1  # every channel reads through one softmax
    assert multi["rank"] == multi["heads"] == 2  # two blocks of identical columns
    m = multi["matrix"]
    block = m.shape[1] // 2
    for b in range(2):
        cols = m[:, b * block:(b + 1) * block]
        assert np.allclose(cols, cols[:, :1])
    assert np.allclose(single["matrix"].sum(0), 1) and np.allclose(m.sum(0), 1)


def test_depth_map_masks_exactly_the_unreachable_cells(report):
    _, rep = report
    for name, m in rep.made["depth_map"][0].data["maps"].items():
        S, N = m.shape
        reachable = np.arange(N)[None, :] < np.arange(1, S + 1)[:, None]  # site s reads sources [0, s]
        assert np.array_equal(np.isfinite(m), reachable), name
        assert np.allclose(np.nansum(m, axis=1), 1)


def test_perhead_matches_probe_and_masks_cells(report):
    root, rep = report
    out = rep.made["perhead"][0]
    from mhar_probe.capture import open_routing_dataset

    ds = open_routing_dataset(root / "multi" / "routing.nc", load=True)
    stats = per_head_deviation(ds, 10)
    D = out.data["deviation"]
    S, N, H = D.shape
    assert H == 2 and np.allclose(np.nansum(D, axis=-1), 0, atol=1e-6)  # deviations sum to zero over heads
    reachable = np.arange(N)[None, :] < np.arange(1, S + 1)[:, None]
    assert np.array_equal(np.isfinite(D[..., 0]), reachable)
    assert float(out.data["stats"].max_abs) == pytest.approx(float(stats.max_abs))


def test_probe_and_headalign_tables_equal_the_probe_functions(report):
    root, rep = report
    from mhar_probe.capture import open_routing_dataset

    values = rep.made["table_probe"][0].data["values"]["single"]
    col = probe_table([open_routing_dataset(root / "single" / "routing.nc", load=True)]).iloc[:, 0]
    assert values["kl"] == pytest.approx(float(col["Width-disagreement KL (trained)"]))
    assert values["excess"] == pytest.approx(float(col["learned excess (trained - null)"]))
    md = (rep.out / "table_headalign.md").read_text()
    assert "3.000" in md and "3.020" in md and "+0.020" in md  # our val losses and hw - mh


def test_routing_generators_skip_without_captures(tmp_path):
    rep = build(tmp_path, tmp_path / "out", only=["depth_read", "perhead", "table_probe"])
    assert set(rep.skipped) == {"depth_read", "perhead", "table_probe"} and not rep.made
    assert all("routing.nc" in s.reason for s in rep.skipped.values())
