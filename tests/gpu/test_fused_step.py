"""The fused parts of the training step on a GPU (pytest -m gpu tests/gpu):

* the fused cross-entropy with bf16 logits at the paper's vocabulary (151,936) against float64
  and against the torch path's gradient (fp32 softmax, rounded to bf16);
* inductor-compiled sublayers: the same loss and gradients as the uncompiled model in fp32 for
  every method, and the same loss curve inside the CUDA-graph step under bf16 autocast, for an
  additive and a routed (triton) model;
* the fused loss inside the CUDA-graph step follows the torch loss's curve;
* `mhar train` on CUDA uses both by default and follows the curve of a run without them.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from mhar_probe.compiled import compile_sublayers  # noqa: E402
from mhar_probe.kernels.cross_entropy import fused_cross_entropy  # noqa: E402
from mhar_probe.kernels.cross_entropy.naive import cross_entropy_reference_f64  # noqa: E402
from mhar_probe.loss import next_token_cross_entropy  # noqa: E402
from mhar_probe.model import MHARConfig, MHARForCausalLM  # noqa: E402
from mhar_probe.model.methods import METHODS  # noqa: E402
from mhar_probe.model.routing import set_routing_backend  # noqa: E402
from model_checks import loss_and_grads  # noqa: E402
from mhar_probe.runfiles import read_metrics  # noqa: E402
from mhar_probe.step import GraphStep  # noqa: E402
from mhar_probe.train import TrainConfig, train  # noqa: E402

DEV = torch.device("cuda")


def test_fused_cross_entropy_bf16_at_the_paper_vocabulary():
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 151936, generator=g) * 4).to(DEV, torch.bfloat16)
    targets = torch.randint(0, 151936, (64,), generator=g).to(DEV)
    targets[5] = -100
    x = logits.clone().requires_grad_(True)
    loss = fused_cross_entropy(x, targets)
    loss.backward()
    ref_loss, ref_grad = cross_entropy_reference_f64(logits, targets)
    assert abs(loss.item() - ref_loss.item()) < 2e-6 * ref_loss.item()
    err = (x.grad.double() - ref_grad).abs()
    assert (err <= ref_grad.abs() * 2 ** -8 + 1e-12).all()  # within bf16's half-ulp of the truth
    y = logits.clone().requires_grad_(True)
    F.cross_entropy(y.float(), targets).backward()  # the torch path: fp32 gradient rounded to bf16
    assert (x.grad.float() - y.grad.float()).abs().max() <= y.grad.float().abs().max() * 2 ** -7


def _model(method: str) -> MHARForCausalLM:
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset("tiny", residual_method=method, vocab_size=512, num_hidden_layers=3,
                                 routing_heads=2 if method in ("mhar", "delta") else None)
    return set_routing_backend(MHARForCausalLM(cfg), "triton").to(DEV)


def _assert_matches_eager(compiled, eager, rows: torch.Tensor) -> None:
    """fp32 next-token loss within 1e-5 relative and every gradient within 1e-3 of the eager model's."""
    loss, grads = loss_and_grads(eager, rows)
    compiled_loss, compiled_grads = loss_and_grads(compiled, rows)
    torch.testing.assert_close(compiled_loss, loss, rtol=1e-5, atol=0)
    assert compiled_grads.keys() == grads.keys()
    for n, grad in grads.items():
        torch.testing.assert_close(compiled_grads[n], grad, rtol=1e-3, atol=1e-5, msg=n)


@pytest.mark.parametrize("method", METHODS)
def test_inductor_sublayers_match_the_uncompiled_model_in_fp32(method):
    torch.backends.cuda.matmul.allow_tf32 = False
    eager = _model(method)
    compiled = compile_sublayers(copy.deepcopy(eager))
    rows = torch.randint(0, 512, (2, 65), generator=torch.Generator().manual_seed(1)).to(DEV)
    _assert_matches_eager(compiled, eager, rows)


def _curve(method: str, loss_kernel: str, compiled: bool, steps: int = 8) -> list[float]:
    model = _model(method)
    if compiled:
        compile_sublayers(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def objective(rows):
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            logits = model(rows[:, :-1], use_cache=False).logits
        ce = next_token_cross_entropy(logits, rows[:, 1:], loss_kernel)
        return ce, ce, {}

    step = GraphStep(objective=objective, params=list(model.parameters()), optimizer=opt, grad_clip=1.0, device=DEV)
    g = torch.Generator().manual_seed(2)
    batch = [torch.randint(0, 512, (4, 65), generator=g) for _ in range(2)]  # learnt by heart: the loss falls
    return [step(batch, lr=3e-3).loss for _ in range(steps)]


@pytest.mark.parametrize("hyper", ["region-pointwise", "sublayers"])
def test_inductor_hyper_modes_match_the_uncompiled_model_in_fp32(hyper):
    """The other two hyper compile modes (the default, "region", is in the test above); at B T =
    10,240 tokens, where inductor lowers the stream mixing's bmms to pointwise work on CUDA
    (its decompose_bmm needs a first dimension of at least 10,240). T is the model's longest
    sequence (max_position_embeddings, 256), so B = 40 rows make the 10,240 tokens."""
    from torch._dynamo.utils import counters
    from torch._inductor.fx_passes.decompose_mem_bound_mm import MIN_FIRST_DIMENSION_DECOMPOSITION

    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    counters.clear()
    eager = _model("hyper")
    compiled = compile_sublayers(copy.deepcopy(eager), hyper=hyper)
    T = eager.config.max_position_embeddings  # [B, T + 1] rows give T inputs per row
    B = -(-MIN_FIRST_DIMENSION_DECOMPOSITION // T)
    assert B * T == 10_240
    rows = torch.randint(0, 512, (B, T + 1), generator=torch.Generator().manual_seed(1)).to(DEV)
    _assert_matches_eager(compiled, eager, rows)
    assert (counters["inductor"]["decompose_bmm"] > 0) == (hyper == "region-pointwise")


@pytest.mark.parametrize("method", ["baseline", "mhar", "hyper"])
def test_fused_loss_and_compiled_sublayers_follow_the_plain_graph_step(method):
    plain = _curve(method, "torch", compiled=False)
    fused = _curve(method, "fused", compiled=False)
    both = _curve(method, "fused", compiled=True)
    assert plain[-1] < plain[0] - 0.3  # it learns
    for a, b, c in zip(plain, fused, both):  # bf16 autocast: the same curve, not the same bits
        assert b == pytest.approx(a, abs=0.02)
        assert c == pytest.approx(a, abs=0.05)


SMALL = dict(preset="tiny", seq_len=64, batch_size=8, eval_every=4, eval_batches=1, vocab_size=512,
             corpus_max_bytes=300_000, progress=False, lr=3e-3, steps=12, device="cuda", method="mhar", heads=2)


def test_trainer_defaults_to_the_fused_step_and_follows_the_plain_curve(tmp_path, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    fused = train(TrainConfig(out=str(tmp_path / "fused"), **SMALL))
    plain = train(TrainConfig(out=str(tmp_path / "plain"), loss_kernel="torch", compile_sublayers=False, **SMALL))
    assert (fused["loss_kernel"], fused["compiled_sublayers"]) == ("fused", True)
    assert (plain["loss_kernel"], plain["compiled_sublayers"]) == ("torch", False)
    curves = [[m["loss"] for m in read_metrics(tmp_path / run / "metrics.jsonl") if "loss" in m]
              for run in ("fused", "plain")]
    assert len(curves[0]) == len(curves[1]) == 12
    for a, b in zip(*curves):
        assert a == pytest.approx(b, abs=0.05)
    assert fused["final_val_loss"] == pytest.approx(plain["final_val_loss"], abs=0.05)
