"""Sublayers writing their outputs into the source buffer (`KernelConfig(stack_append="into_buffer")`,
issue 55's third lever) on the CPU interpreter, beside the stored design it replaces.

The stack hands out its next buffer row (`next_slot`), the output projections write into it
(`model.layers.linear_into`), and the forward kernel of the next call reads that row first after
row 0 (the stored design's order) and stores nothing. The projection must be F.linear bitwise
(values and gradients, fp32 and under bf16 autocast); a model must give bitwise the stored
design's loss and gradients at odd shapes (N = 5 and 9 sources, H = 1 and 4, d/H = 3, B*T = 3),
every kernel output poisoned; a source changed in place after its append is refused, before the
next call and before the backward. Its bytes: tests/test_kernel_floors.py."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

import mhar_probe.kernels.route.fwd as rfwd  # noqa: E402
from mhar_probe.kernels import KernelConfig  # noqa: E402
from mhar_probe.model.config import MHARConfig  # noqa: E402
from mhar_probe.model.layers import linear_into  # noqa: E402
from mhar_probe.model.modeling import MHARForCausalLM  # noqa: E402
from mhar_probe.model.routing import ListSourceStack, set_routing_backend  # noqa: E402

from kernel_checks import DEV, EPS, poisoned_stack  # noqa: E402


def _linear_grads(fn, x, w, dy):
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    y = fn(x, w)
    y.backward(dy)
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("autocast", [False, True])
def test_linear_into_is_f_linear_bitwise(autocast):
    """Written into a NaN-filled tensor, the product and both gradients are F.linear's bit for
    bit (fp32, and bf16 under CPU autocast with fp32 operands, as training casts them)."""
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 3, 7, generator=gen), torch.randn(5, 7, generator=gen)
    dtype = torch.bfloat16 if autocast else torch.float32
    dy = torch.randn(2, 3, 5, generator=gen).to(dtype)
    out = torch.full((2, 3, 5), float("nan"), dtype=dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = _linear_grads(F.linear, x, w, dy)
        got = _linear_grads(lambda a, b: linear_into(a, b, out), x, w, dy)
    assert got[0].dtype == dtype and torch.equal(out, want[0])
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_linear_into_writes_a_new_tensor_where_out_is_not_its_result():
    """An `out` of another dtype or shape (or none) is left alone: F.linear's own result."""
    x, w = torch.randn(3, 4), torch.randn(2, 4)
    for out in (torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, 3), None):
        y = linear_into(x, w, out)
        assert torch.equal(y, F.linear(x, w)) and (out is None or not torch.equal(out, y))


def _model(method: str, d: int, H: int, layers: int) -> MHARForCausalLM:
    config = MHARConfig.from_preset("tiny", residual_method=method, hidden_size=d, num_hidden_layers=layers,
                                    num_attention_heads=2, num_key_value_heads=2, head_dim=4,
                                    intermediate_size=10, vocab_size=23, routing_heads=H)
    torch.manual_seed(0)
    model = MHARForCausalLM(config)
    with torch.no_grad():  # leave init (zero queries) so routing is not uniform
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.to(DEV)


@pytest.fixture
def appends(monkeypatch):
    """The APPEND of every forward launch (0 none, 1 read and stored, 2 read from its row)."""
    seen: list[int] = []
    for name in ("_FWD", "_FWD_SPLIT"):
        real = getattr(rfwd, name)

        def spy(grid, args, consts, *rest, real=real):
            seen.append(consts["APPEND"])
            real(grid, args, consts, *rest)

        monkeypatch.setattr(rfwd, name, spy)
    return seen


def _loss_and_grads(model, ids, append: str, autocast: bool, **levers):
    set_routing_backend(model, "triton", KernelConfig(poison=True, stack_append=append, **levers))
    model.zero_grad()
    with torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("method,d,H,layers,autocast", [
    ("attnres", 3, 1, 2, False), pytest.param("mhar", 12, 4, 4, False, marks=pytest.mark.slow),
    ("mhar_hw", 12, 4, 2, False),
    ("mhar", 12, 4, 2, True), ("mhar_hw", 12, 4, 2, True)])
def test_model_writing_into_the_buffer_is_the_stored_design_bitwise(appends, method, d, H, layers, autocast):
    """N = 2L + 1 sources (5, 9), H = 1 (d 3) and 4 (d/H = 3), B*T = 3, fp32 and bf16 autocast
    (an fp32 embedding beside a bf16 buffer): loss and every gradient bitwise the stored design's,
    and bitwise repeatable, and so are the logits of a forward without autograd; the stored
    design's forward launches store each of the 2L sublayer outputs (APPEND 1), the new design's
    read each from its row (APPEND 2) and store none."""
    model = _model(method, d, H, layers)
    ids = torch.randint(0, 23, (1, 3), generator=torch.Generator().manual_seed(2)).to(DEV)
    runs = {}
    for append in ("stored", "into_buffer", "into_buffer"):
        appends.clear()
        runs.setdefault(append, []).append(_loss_and_grads(model, ids, append, autocast))
        kinds = {1: appends.count(1), 2: appends.count(2)}
        assert kinds == ({1: 2 * layers, 2: 0} if append == "stored" else {1: 0, 2: 2 * layers}), appends
    (want,), got = runs["stored"], runs["into_buffer"]
    assert len(want[1]) > 0
    for loss, grads in got:
        assert torch.equal(loss, want[0]) and grads.keys() == want[1].keys()
        assert all(torch.equal(grads[n], want[1][n]) for n in grads), [n for n in grads if not torch.equal(grads[n], want[1][n])]
    with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):  # inference: no autograd
        appends.clear()
        logits = model(input_ids=ids).logits  # (the model routes with into_buffer, set last)
        assert appends.count(2) == 2 * layers
        set_routing_backend(model, "triton", KernelConfig(poison=True))
        assert torch.equal(logits, model(input_ids=ids).logits)


def test_with_the_other_two_levers_too():
    """Beside the douts read in place and the weights recomputed from the normaliser (folds of
    2 calls, mhar_hw's mixed head counts): still bitwise the stored design's."""
    model = _model("mhar_hw", 12, 4, 2)
    ids = torch.randint(0, 23, (1, 3), generator=torch.Generator().manual_seed(2)).to(DEV)
    levers = dict(stack_douts="in_place", stack_weights="logits", fold_calls=2)
    want, got = (_loss_and_grads(model, ids, append, False, **levers) for append in ("stored", "into_buffer"))
    assert torch.equal(got[0], want[0]) and all(torch.equal(got[1][n], want[1][n]) for n in want[1])


def test_only_the_new_design_hands_out_rows_and_its_buffer_is_poisoned_until_written():
    """The stored design and the list stack hand out nothing; the new design hands out row 1, 2,
    ... of a NaN-filled buffer (a row the sublayer did not write stays NaN), and appending the
    written row copies nothing into another row."""
    D, P = 6, 3
    x0 = torch.randn(1, P, D, device=DEV)
    for stack in (ListSourceStack(4), poisoned_stack(4)):
        stack.append(x0)
        assert stack.next_slot() is None
    stack = poisoned_stack(4, stack_append="into_buffer")
    assert stack.next_slot() is None  # before source 0
    stack.append(x0)
    slot = stack.next_slot()
    assert slot.shape == (1, P, D) and slot.dtype == x0.dtype and slot._base is None
    assert torch.isnan(stack.buffer).all()
    w = torch.randn(D, 5, device=DEV)
    y = linear_into(torch.randn(1, P, 5, device=DEV), w, slot)
    stack.append(y)
    assert torch.equal(stack.buffer[1], y.view(P, D)) and torch.isnan(stack.buffer[2:]).all()
    assert stack.next_slot().data_ptr() == stack.buffer[2].data_ptr()


def _written_chain(change_after_route: bool):
    """Source 0, then a projection written into row 1 and appended, then a route over both, the
    written source changed in place before that route or after it; returns (stack, loss)."""
    D, P = 6, 3
    gen = torch.Generator().manual_seed(3)
    q, g = torch.randn(D, generator=gen).to(DEV).requires_grad_(), torch.ones(D, device=DEV, requires_grad=True)
    stack = poisoned_stack(3, [(q, g), (q, g)], stack_append="into_buffer")
    stack.append(torch.randn(1, P, D, generator=gen).to(DEV).requires_grad_())
    out, _ = stack.route(q, g, 2, EPS, 1)
    w = torch.randn(D, D, generator=gen).to(DEV).requires_grad_()
    y = linear_into(out, w, stack.next_slot())
    stack.append(y)
    if not change_after_route:
        y.add_(1.0)
    out2, _ = stack.route(q, g, 2, EPS, 2)
    if change_after_route:
        y.add_(1.0)
    return stack, (out2 * out).sum()


def test_a_written_source_changed_in_place_is_refused():
    """The appended tensor is the buffer row: changed before the next call reads it, the call
    refuses; changed after, so that the backward would read other values than the forward did,
    the backward refuses."""
    with pytest.raises(RuntimeError, match="modified in place after it was appended"):
        _written_chain(change_after_route=False)
    _, loss = _written_chain(change_after_route=True)
    with pytest.raises(RuntimeError, match="modified in place after it was appended"):
        loss.backward()


def test_compiled_sublayers_write_into_the_buffer_without_recompiling():
    """Under torch.compile of the sublayers (aot_eager on the CPU) the projection runs uncompiled
    after the compiled region (`linear_into` is `torch.compiler.disable`d): bitwise the stored
    design's gradients, and a second forward compiles nothing (the rows differ only in their
    storage offset, which no guard holds)."""
    from torch._dynamo.utils import counters

    from mhar_probe.compiled import compile_sublayers

    model = _model("mhar", 12, 4, 2)
    ids = torch.randint(0, 23, (1, 3), generator=torch.Generator().manual_seed(2)).to(DEV)
    want = _loss_and_grads(model, ids, "stored", False)
    compile_sublayers(model, backend="aot_eager")
    for run in range(2):
        counters.clear()
        loss, grads = _loss_and_grads(model, ids, "into_buffer", False)
        assert torch.equal(loss, want[0]) and all(torch.equal(grads[n], want[1][n]) for n in want[1])
        assert (counters["stats"]["unique_graphs"] > 0) == (run == 0)
