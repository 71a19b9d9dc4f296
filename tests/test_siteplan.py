"""`mhar_probe.model.siteplan` is the one site plan: checked against an analytic count (2L+1 sites,
site s of a replacement form reads s+1 sources), against an independent count of the delta
form's blocks, and against what the models actually build and route (hook shapes in a forward
pass); the capture layout and the FLOP count read the same plan."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config

from mhar_probe.capture import layout_of
from mhar_probe.capture.errors import CaptureError
from mhar_probe.convert import MHARDeltaConfig, MHARDeltaForCausalLM
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.methods import METHODS, method
from mhar_probe.model.siteplan import SitePlan, site_plan, site_plan_of

SMALL = dict(vocab_size=97, hidden_size=48, intermediate_size=96, num_attention_heads=4, max_position_embeddings=32)


def config(name: str, L: int = 3, kv: int = 2, H: int = 4, blocks: int = 2) -> MHARConfig:
    return MHARConfig(residual_method=name, num_hidden_layers=L, num_key_value_heads=kv, routing_heads=H,
                      delta_num_blocks=min(blocks, L), **SMALL)


def _delta_sources_by_counting(L: int, B: int) -> list[int]:
    """Independent count: block of layer l is floor(l B / L); a site sees the null, every block
    that ended before it, and its own block's partial unless nothing of that block has run yet."""
    block = [l * B // L for l in range(L)]
    counts = []
    for l in range(L):
        done = len({b for b in block[:l] if b != block[l]})  # completed blocks before layer l
        first_of_block = l == 0 or block[l - 1] != block[l]
        counts += [1 + done + (0 if first_of_block else 1), 1 + done + 1]  # attn (partial iff mid-block), mlp
    return counts + [1 + B]  # final: null + every block, all complete


@pytest.mark.parametrize("L", [1, 2, 5])
@pytest.mark.parametrize("name", ["attnres", "mhar", "mhar_hw"])
def test_replacement_forms_analytic(name, L):
    G, H = 2, 4
    plan = site_plan(name, L, routing_heads=1 if name == "attnres" else H, num_key_value_heads=G)
    assert plan.num_sites == 2 * L + 1 and plan.num_sources == 2 * L + 1
    for s, site in enumerate(plan.sites):
        assert site.index == s and site.num_sources == s + 1
        assert (site.layer, site.kind) == ((s // 2, ("attn", "mlp")[s % 2]) if s < 2 * L else (L, "final"))
        aligned = name == "mhar_hw" and site.kind == "attn"
        assert site.num_queries == (G if aligned else 1)
        assert site.num_heads == (G if aligned else 1 if name == "attnres" else H)
    assert [site.label for site in plan.sites] == [f"L{l}.{k}" for l in range(L) for k in ("attn", "mlp")] + ["final"]
    assert [src.label for src in plan.sources] == ["emb"] + [f"L{l}.{k}" for l in range(L) for k in ("attn", "mlp")]
    assert [src.layer for src in plan.sources] == [0] + [l for l in range(L) for _ in "am"]


def test_head_aligned_sites_need_more_than_one_kv_group():
    """With G = 1 a mhar_hw attention site is one full-width query with H heads (the model builds a
    [d] query there, not [1, d])."""
    plan = site_plan("mhar_hw", 2, routing_heads=4, num_key_value_heads=1)
    assert {(s.num_queries, s.num_heads) for s in plan.sites} == {(1, 4)}


@pytest.mark.parametrize("L,B", [(1, 1), (3, 2), (4, 2), (5, 3), (7, 7), (12, 5)])
def test_delta_plan_counts_independently(L, B):
    plan = site_plan("delta", L, routing_heads=2, delta_num_blocks=B)
    assert plan.num_sites == 2 * L + 1
    assert [s.num_sources for s in plan.sites] == _delta_sources_by_counting(L, B)
    assert [src.kind for src in plan.sources] == ["null"] + ["block"] * B
    assert [src.layer for src in plan.sources] == [-1] + [min(l for l in range(L) if l * B // L == b) for b in range(B)]


@pytest.mark.parametrize("name", ["baseline", "hyper"])
def test_methods_without_routing_have_an_empty_plan(name):
    assert site_plan(name, 4, routing_heads=2) == SitePlan(name, (), ())


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown residual method 'bogus'"):
        site_plan("bogus", 2, routing_heads=1)


def _routed_shapes(model: torch.nn.Module, sites: torch.nn.ModuleList) -> list[tuple[int, int]]:
    """(sources read, weight columns) of every site in one forward pass, from its hooks."""
    seen: dict[int, tuple[int, int]] = {}
    hooks = []
    for s, site in enumerate(sites):
        hooks.append(site.hook_weights.register_forward_hook(
            lambda m, i, w, s=s: seen.__setitem__(s, (w.shape[0], w.shape[-1]))))  # [N, B, T, H_s]
    ids = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    return [seen[s] for s in range(len(sites))]


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("kv", [1, 2])
def test_the_model_builds_and_routes_its_plan(name, kv):
    cfg = config(name, kv=kv)
    model = MHARForCausalLM(cfg)
    plan = site_plan_of(cfg)
    built = model.model.sites
    assert [(m.index, m.layer, m.kind, m.label) for m in built] == \
        [(s.index, s.layer, s.kind, s.label) for s in plan.sites]
    assert [m.query.shape[0] if m.query.dim() == 2 else 1 for m in built] == [s.num_queries for s in plan.sites]
    assert _routed_shapes(model, built) == [(s.num_sources, s.num_heads) for s in plan.sites]
    if method(name).replaces:
        assert cfg.num_sources == plan.num_sources  # the source stack the model allocates


def test_the_converted_delta_model_builds_the_delta_plan():
    base = Qwen3Config(vocab_size=97, hidden_size=48, num_hidden_layers=5, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=12, intermediate_size=96, max_position_embeddings=32)
    model = MHARDeltaForCausalLM(MHARDeltaConfig(text_config=base, num_blocks=2, routing_heads=4)).eval()
    plan = site_plan("delta", 5, routing_heads=4, delta_num_blocks=2)
    assert [(m.index, m.layer, m.kind) for m in model.sites] == [(s.index, s.layer, s.kind) for s in plan.sites]
    assert _routed_shapes(model, model.sites) == [(s.num_sources, s.num_heads) for s in plan.sites]


@pytest.mark.parametrize("name", ["attnres", "mhar", "mhar_hw", "delta"])
def test_capture_layout_is_the_plan(name):
    cfg = config(name)
    layout, plan = layout_of(MHARForCausalLM(cfg)), site_plan_of(cfg)
    assert (layout.method, layout.sites, layout.sources) == (plan.method, plan.sites, plan.sources)
    coords = layout.coords()
    assert list(coords["site_num_sources"][1]) == [s.num_sources for s in plan.sites]
    assert list(coords["source_label"][1]) == [s.label for s in plan.sources]
    assert len(coords["head"]) == max(s.num_heads for s in plan.sites)


def test_capture_refuses_a_model_without_sites():
    with pytest.raises(CaptureError, match="no routing sites"):
        layout_of(MHARForCausalLM(config("baseline")))
