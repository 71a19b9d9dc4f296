"""`mhar_probe.compiled`: each decoder layer's attention and MLP sublayer compiled, the residual
wiring between them untouched. On the CPU with torch.compile's "aot_eager" backend (the same
tracing and autograd split as inductor, without generated code): outputs and gradients equal the
uncompiled model's, every layer shares one graph per sublayer, and uncompiling restores the
methods. Inductor's kernels are checked on a GPU (tests/gpu/test_fused_step.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters

from mhar_probe.compiled import compile_sublayers, decoder_layers, sublayers_compiled, uncompile_sublayers
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.routing import set_routing_backend
from model_checks import loss_and_grads


def _model(method: str) -> MHARForCausalLM:
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset("tiny", residual_method=method, vocab_size=300, num_hidden_layers=3,
                                 routing_heads=2 if method in ("mhar", "mhar_hw") else None)
    model = MHARForCausalLM(cfg)
    return set_routing_backend(model, "eager") if method != "baseline" else model


@pytest.mark.parametrize("method", ["baseline", "mhar", "mhar_hw"])
def test_compiled_sublayers_give_the_same_loss_and_gradients(method):
    torch._dynamo.reset()
    counters.clear()
    eager = _model(method)
    compiled = compile_sublayers(copy.deepcopy(eager), backend="aot_eager")
    assert sublayers_compiled(compiled) and not sublayers_compiled(eager)
    rows = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(1))
    for _ in range(2):  # the second call replays the compiled graphs
        loss_e, grads_e = loss_and_grads(eager, rows)
        loss_c, grads_c = loss_and_grads(compiled, rows)
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-6, atol=0)
        assert grads_c.keys() == grads_e.keys()
        for name in grads_e:
            torch.testing.assert_close(grads_c[name], grads_e[name], rtol=1e-5, atol=1e-7, msg=name)
    # three layers, one graph per sublayer kind: attention and MLP (mhar_hw's attention takes
    # per-group inputs at every layer alike)
    assert counters["stats"]["unique_graphs"] == 2


def test_uncompile_restores_the_methods():
    model = compile_sublayers(_model("mhar"), backend="aot_eager")
    layer = decoder_layers(model)[0]
    assert "attn" in vars(layer) and "ffn" in vars(layer)
    uncompile_sublayers(model)
    assert not sublayers_compiled(model)
    assert layer.attn.__func__ is type(layer).attn and layer.ffn.__func__ is type(layer).ffn


def test_compiling_twice_keeps_one_wrapper():
    model = compile_sublayers(_model("baseline"), backend="aot_eager")
    first = vars(decoder_layers(model)[1])["attn"]
    compile_sublayers(model, backend="aot_eager")
    assert vars(decoder_layers(model)[1])["attn"] is first


def test_a_model_without_decoder_layers_is_refused():
    with pytest.raises(TypeError, match="no decoder layers"):
        compile_sublayers(torch.nn.Linear(2, 2))


def test_default_is_on_for_cuda_and_refusals_say_why():
    from mhar_probe.compiled import choose_compile_sublayers

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert choose_compile_sublayers(None, cuda) is True and choose_compile_sublayers(None, cpu) is False
    assert choose_compile_sublayers(False, cuda) is False
    with pytest.raises(ValueError, match="needs a CUDA device"):
        choose_compile_sublayers(True, cpu)
    # the same default under DDP / FSDP2 (tests/test_distributed.py)
