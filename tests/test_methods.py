"""`mhar_probe.model.methods` is the one definition of the residual methods: the models it
builds, the FLOP count and the sweep grid follow its properties, and `routing_heads_of` reads the
routing head count from records old and new."""

from __future__ import annotations

import pytest
import torch

from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.methods import (FREE_HEAD_METHODS, METHODS, REPLACEMENT_METHODS, ROUTED_METHODS, method,
                                      routing_heads_of)
from mhar_probe.model.residual import DeltaSite, DeltaSources, RoutingSite
from mhar_probe.model.siteplan import delta_block_of_layer, site_plan_of
from mhar_probe.sweep.grid import SweepGrid

SMALL = dict(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, routing_heads=4, delta_num_blocks=2)


def test_the_derived_lists():
    assert METHODS == ("baseline", "hyper", "attnres", "mhar", "mhar_hw", "delta")
    assert ROUTED_METHODS == ("attnres", "mhar", "mhar_hw", "delta")
    assert REPLACEMENT_METHODS == ("attnres", "mhar", "mhar_hw")
    assert FREE_HEAD_METHODS == ("mhar", "mhar_hw", "delta")
    with pytest.raises(ValueError, match="unknown residual method 'bogus'; choose one of baseline, hyper"):
        method("bogus")


@pytest.mark.parametrize("name", METHODS)
def test_the_model_has_the_sites_its_method_says(name):
    props = method(name)
    model = MHARForCausalLM(MHARConfig(residual_method=name, **SMALL)).model
    L, G = SMALL["num_hidden_layers"], SMALL["num_key_value_heads"]
    assert len(model.sites) == (2 * L + 1 if props.routes else 0)
    assert all(isinstance(s, RoutingSite) for s in model.sites) == props.replaces or not props.routes
    assert all(isinstance(s, DeltaSite) for s in model.sites) == props.delta or not props.routes
    assert hasattr(model, "hyper") == props.hyper_streams
    assert model.config.routing_heads == {"one": 1, "free": 4, None: 4}[props.head_count]
    if props.replaces:
        assert [s.num_sources for s in model.sites] == list(range(1, 2 * L + 2))
        attn_queries = {tuple(s.query.shape) for s in model.sites if s.kind == "attn"}
        assert attn_queries == ({(G, SMALL["hidden_size"])} if props.head_wise else {(SMALL["hidden_size"],)})


@pytest.mark.parametrize("L,blocks", [(1, 1), (3, 2), (4, 2), (5, 3), (8, 8), (12, 3)])
def test_flops_count_the_delta_sources_the_model_reads(L, blocks):
    config = MHARConfig(**{**SMALL, "num_hidden_layers": L, "delta_num_blocks": blocks}, residual_method="delta")
    sources = DeltaSources(delta_block_of_layer(L, blocks), torch.zeros(SMALL["hidden_size"]))
    assert [s.num_sources for s in site_plan_of(config).sites] == [sources.num_sources(s) for s in range(2 * L + 1)]


def test_routing_heads_of_reads_every_name_it_was_recorded_under():
    summary, train_config, config_json = {"routing_heads": 4}, {"heads": 8}, {"routing_heads": 2}
    assert routing_heads_of("mhar", summary, train_config, config_json) == 4  # the first record wins
    assert routing_heads_of("mhar", {"routing_heads": None}, train_config) == 8  # train_config.json: heads
    assert routing_heads_of("mhar", {"method": "mhar", "H": 2}) == 2  # a routing dataset written before
    assert routing_heads_of("mhar_hw", {}, {}, default=2) == 2  # nothing recorded: H = KV
    assert routing_heads_of("attnres", {"routing_heads": 4}) == 1  # MHAR at H = 1 by definition
    assert routing_heads_of("baseline", {"routing_heads": 2}, default=2) is None  # no routing heads
    assert routing_heads_of("later_method", {"heads": 3}) == 3


def test_the_sweep_grid_resolves_heads_by_the_method():
    grid = SweepGrid(methods=["baseline", "attnres", "mhar", "delta"], heads=[None, 8], presets=["tiny"], steps=[2])
    heads = {(s.method, s.H) for s in grid.expand()}
    assert heads == {("baseline", None), ("attnres", 1), ("mhar", 2), ("mhar", 8), ("delta", 2), ("delta", 8)}


def test_a_routing_dataset_records_routing_heads_and_an_old_one_still_reads():
    from mhar_probe.capture import capture_routing

    model = MHARForCausalLM(MHARConfig(residual_method="mhar", **{**SMALL, "routing_heads": 2})).eval()
    ds = capture_routing(model, [torch.randint(0, 97, (2, 6))], progress=False, draws=1)
    assert ds.attrs["routing_heads"] == 2 and "H" not in ds.attrs
    old = {k: v for k, v in ds.attrs.items() if k != "routing_heads"} | {"H": 2}  # as capture wrote it before
    assert routing_heads_of(old["method"], old) == routing_heads_of(ds.attrs["method"], ds.attrs) == 2

