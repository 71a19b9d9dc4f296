"""`mhar_probe.compiled` on a hyper-connection model: each sublayer compiled together with its
hyper-connection (the `hyper-connections` package's module, untouched) as one region.

Checked on the CPU with torch.compile's "aot_eager" backend (inductor's tracing and autograd split
without generated code; inductor's own kernels in the slow test): the wiring equals Zhu et al.'s
equations written out in float64, the compiled region gives the uncompiled package's loss and
gradients (float64 and float32), every layer shares one graph per sublayer kind, and a committed
ladder hyper run's config gives state dicts that load both ways with the same logits."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from mhar_probe.compiled import (HYPER_REGION, compile_sublayers, decoder_layers, sublayers_compiled,
                                 uncompile_sublayers)
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.modeling import hyper_sublayer
from model_checks import loss_and_grads

LADDER_HYPER = Path(__file__).resolve().parents[1] / "results/ladder/runs/tiny-hyper-kv4-lr2e-3-s0-n480"


def _perturb(model: MHARForCausalLM, scale: float = 0.3) -> MHARForCausalLM:
    """Move every hyper-connection parameter off its initialisation (the dynamic alpha / beta
    projections start at zero) so that each term of the equations is exercised."""
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.model.hyper.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _model(dtype: torch.dtype = torch.float32, layers: int = 3) -> MHARForCausalLM:
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset("tiny", residual_method="hyper", vocab_size=300, num_hidden_layers=layers)
    return _perturb(MHARForCausalLM(cfg)).to(dtype)


def _reference(hc, sublayer, streams: torch.Tensor) -> torch.Tensor:
    """Zhu et al. 2024 (Alg. 2, dynamic hyper-connections with the package's RMSNorm and tanh),
    written out from the module's parameters: streams [(B n), T, d] -> [(B n), T, d]."""
    n = hc.num_residual_streams
    H = streams.unflatten(0, (-1, n)).transpose(1, 2)  # [B, T, n, d]
    d = H.shape[-1]
    Hn = H / H.norm(dim=-1, keepdim=True) * math.sqrt(d) * (hc.norm.gamma + 1)  # [B, T, n, d]
    A = hc.static_alpha + hc.dynamic_alpha_scale * torch.tanh(Hn @ hc.dynamic_alpha_fn)  # [B, T, n, 1+n]
    b = hc.static_beta + hc.dynamic_beta_scale * torch.tanh(Hn @ hc.dynamic_beta_fn)  # [B, T, n]
    x = (A[..., 0, None] * H).sum(-2)  # [B, T, d]
    y = sublayer(x)  # [B, T, d]
    out = torch.einsum("btrs,btrd->btsd", A[..., 1:], H) + b[..., None] * y[..., None, :]  # [B, T, n, d]
    return out.transpose(1, 2).flatten(0, 1)  # [(B n), T, d]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "region"])
def test_hyper_sublayer_is_the_papers_equations(compiled):
    model = _model(torch.float64, layers=1)
    hc, layer = model.model.hyper[1], model.model.layers[0]
    fn = torch.compile(hyper_sublayer, backend="aot_eager", dynamic=False) if compiled else hyper_sublayer
    streams = torch.randn(2 * 4, 5, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(fn(hc, layer.ffn, streams), _reference(hc, layer.ffn, streams),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,rtol,atol", [
    pytest.param(torch.float64, 1e-12, 1e-13, id="float64"),
    pytest.param(torch.float32, 1e-5, 1e-7, id="float32", marks=pytest.mark.slow),  # the same, slower to build
])
def test_compiled_regions_give_the_packages_loss_and_gradients(dtype, rtol, atol):
    torch._dynamo.reset()
    counters.clear()
    eager = _model(dtype)
    compiled = compile_sublayers(copy.deepcopy(eager), backend="aot_eager")
    assert sublayers_compiled(compiled) and not sublayers_compiled(eager)
    assert HYPER_REGION in vars(compiled.model)  # the region, and no separately compiled sublayer
    assert not any(name in vars(layer) for layer in decoder_layers(compiled) for name in ("attn", "ffn"))
    rows = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(1))
    for _ in range(2):  # the second call replays the compiled graphs
        loss_e, grads_e = loss_and_grads(eager, rows)
        loss_c, grads_c = loss_and_grads(compiled, rows)
        torch.testing.assert_close(loss_c, loss_e, rtol=rtol, atol=0)
        assert grads_c.keys() == grads_e.keys() and any(".hyper." in k for k in grads_e)
        for name in grads_e:
            torch.testing.assert_close(grads_c[name], grads_e[name], rtol=rtol, atol=atol, msg=name)
    # three layers, one graph per sublayer kind (attention region, MLP region), none broken
    assert counters["stats"]["unique_graphs"] == 2
    assert not counters["graph_break"]


def test_a_fresh_process_compiles_each_region_once(monkeypatch):
    """einops caches its backend per tensor type on first use; when that first use is inside the
    first region's trace, the graph's guard on the cache fails on the next call and the region
    compiles twice (on CUDA: tens of seconds). A fresh process's empty cache, compiled first:"""
    from einops import _backends

    monkeypatch.setattr(_backends, "_type2backend", {})
    torch._dynamo.reset()
    counters.clear()
    model = compile_sublayers(_model(layers=2), backend="aot_eager")
    rows = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(1))
    for _ in range(2):
        loss_and_grads(model, rows)
    assert counters["stats"]["unique_graphs"] == 2


def test_the_sublayers_mode_compiles_attention_and_mlp_alone_and_modes_replace_each_other():
    model = compile_sublayers(_model(), backend="aot_eager", hyper="sublayers")
    assert HYPER_REGION not in vars(model.model) and sublayers_compiled(model)
    assert all("attn" in vars(layer) and "ffn" in vars(layer) for layer in decoder_layers(model))
    compile_sublayers(model, backend="aot_eager")  # now the regions, with the sublayers traced inside
    assert HYPER_REGION in vars(model.model)
    assert not any("attn" in vars(layer) for layer in decoder_layers(model))
    uncompile_sublayers(model)
    assert not sublayers_compiled(model) and HYPER_REGION not in vars(model.model)
    with pytest.raises(ValueError, match="choose from region, sublayers, region-pointwise"):
        compile_sublayers(model, hyper="fused")


def test_a_ladder_hyper_runs_state_dict_loads_both_ways_with_the_same_logits(tmp_path):
    """The committed ladder run's config (its weights are not committed): a model saved uncompiled
    loads into a compiled one and back, keys unchanged, logits equal to the uncompiled model's."""
    torch._dynamo.reset()
    cfg = MHARConfig.from_pretrained(LADDER_HYPER)
    assert cfg.residual_method == "hyper" and cfg.hyper_streams == 4
    torch.manual_seed(0)
    saved = _perturb(MHARForCausalLM(cfg)).eval()
    rows = torch.randint(0, cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        before = saved(rows, use_cache=False).logits
    saved.save_pretrained(tmp_path / "eager")
    loaded = compile_sublayers(MHARForCausalLM.from_pretrained(tmp_path / "eager"), backend="aot_eager").eval()
    assert sublayers_compiled(loaded)
    assert loaded.state_dict().keys() == saved.state_dict().keys()
    with torch.no_grad():
        torch.testing.assert_close(loaded(rows, use_cache=False).logits, before, rtol=1e-5, atol=1e-6)
    loaded.save_pretrained(tmp_path / "compiled")  # and back: the compiled model's checkpoint
    again = MHARForCausalLM.from_pretrained(tmp_path / "compiled").eval()
    for name, tensor in saved.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(again(rows, use_cache=False).logits, before, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("hyper", ["region", "region-pointwise"])
def test_inductor_regions_on_the_cpu_match_the_package(hyper, monkeypatch):
    """Inductor's generated code for the region (C++ on the CPU), fp32, loss and gradients against
    the package in float64, to 1e-4 of each gradient's largest entry (inductor's fp32 sums in
    another order: it differs from the eager fp32 model as much as that differs from float64,
    about 1e-5); for "region-pointwise" with inductor's CPU threshold raised so that the stream
    mixing's batched matmuls are lowered to pointwise work here as they are on CUDA (batch >= 10240)."""
    from torch._inductor.fx_passes import decompose_mem_bound_mm

    monkeypatch.setattr(decompose_mem_bound_mm, "cpu_max_first_dimension_decomposition", 1 << 30)
    torch._dynamo.reset()
    counters.clear()
    eager = _model(layers=2)
    compiled = compile_sublayers(copy.deepcopy(eager), backend="inductor", hyper=hyper)
    rows = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(1))
    loss_e, grads_e = loss_and_grads(eager.double(), rows)  # float64
    loss_c, grads_c = loss_and_grads(compiled, rows)  # float32
    torch.testing.assert_close(loss_c, loss_e.float(), rtol=1e-5, atol=0)
    assert grads_c.keys() == grads_e.keys()
    for name, ref in grads_e.items():
        torch.testing.assert_close(grads_c[name], ref.float(), rtol=0, atol=1e-4 * ref.abs().max().item(), msg=name)
    # the mixing's forward bmm and its two backward bmms, in each of the two regions' graphs
    assert (counters["inductor"]["decompose_bmm"] > 0) == (hyper == "region-pointwise")
