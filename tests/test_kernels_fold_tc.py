"""The fold with tensor-core dots (kernels/route/bwd_fold_tc.py, `fold_kernel="tc"`) on the CPU
interpreter: every gradient against float64 autograd through the reference, every output poisoned,
and the stack's folds launched through it (not `stack_fold_kernel`) where it applies."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
import mhar_probe.kernels.route.bwd_fold_tc as ktc  # noqa: E402

from kernel_checks import DEV, poisoned_stack, rel, spy_launcher  # noqa: E402
from kernel_checks import split_e  # noqa: E402,F401 (the fixture applies here)
from test_kernels_collect import _chain, _leaves, f64_stack  # noqa: E402


def _spies(monkeypatch):
    """(tc folds, fma folds): the sources each fold launch folds into (jf)."""
    tc = spy_launcher(monkeypatch, ktc, "STACK_FOLD_TC", lambda args, consts: args[18])
    fma = spy_launcher(monkeypatch, kad, "STACK_FOLD", lambda args, consts: args[18])
    return tc, fma


@pytest.mark.parametrize("D,H,fold_calls", [
    (12, 4, 2),  # d/H = 3
    (40, 8, 3),  # d/H = 5, H = 8
    (96, 32, 2),  # H = 32
    (32, 2, 1),  # a fold after every call
])
def test_fold_tc_chain_matches_float64(monkeypatch, D, H, fold_calls):
    """A model-shaped fp32 chain of 7 calls with H heads at every call: every gradient (sources,
    queries, key-norm weights, sublayers) within 2e-5 of float64 autograd, every fold run by the
    tensor-core kernel."""
    S = 7
    heads = [H] * S
    leaves = _leaves(D, S, heads, 0, 5, torch.float32)
    tc, fma = _spies(monkeypatch)
    loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, fold_calls=fold_calls, fold_kernel="tc"),
                        leaves, S, heads)
    grads = torch.autograd.grad(loss, leaves)
    assert tc and not fma
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert a.dtype == leaves[i].dtype and rel(a, b) < 2e-5, i


def test_fold_tc_over_chunks_of_sources_and_autocast_layout(monkeypatch):
    """37 sources (three chunks of 16 in a fold), source 0 in fp32 beside an fp16 buffer
    (autocast's layout): every gradient within 2e-5 of the fma fold's, the fp16 ones within an fp16
    ulp (both fold the same values; the sums run in another order)."""
    D, H = 16, 4
    groups = [30, 2, 2, 3]
    heads = [H] * len(groups)
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, 2, D, generator=gen) for _ in range(sum(groups))]
    qs = [torch.randn(D, generator=gen) * 0.7 for _ in groups]
    gs = [1 + 0.2 * torch.randn(D, generator=gen) for _ in groups]
    leaves = [t.to(DEV).requires_grad_() for t in xs + qs + gs]
    n, m = len(xs), len(groups)
    half = [x.detach().half().requires_grad_() if i else x for i, x in enumerate(leaves[:n])]

    def run(kernel):
        """Before call c: call c-1's output (fp16, as a sublayer's under autocast) and groups[c]
        sources appended; every call reads the whole stack."""
        qs, gs = leaves[n:n + m], leaves[n + m:]
        stack = poisoned_stack(1 + sum(groups) + m, list(zip(qs, gs)), fold_calls=1, fold_kernel=kernel)
        it = iter(half)
        outs = []
        for c, k in enumerate(groups):
            if c:
                stack.append(torch.tanh(outs[-1]).half())
            for _ in range(k):
                stack.append(next(it))
            outs.append(stack.route(qs[c], gs[c], heads[c], 1e-6, len(stack))[0])
        assert stack.buffer.dtype == torch.float16 and stack.row0.dtype == torch.float32
        loss = sum((o.double() * (i + 1)).sin().sum() for i, o in enumerate(outs))
        return torch.autograd.grad(loss, half + leaves[n:])

    tc, fma = _spies(monkeypatch)
    got = run("tc")
    assert max(tc) > 32 and not fma
    want = run("fma")
    assert fma
    for i, (a, b) in enumerate(zip(got, want)):  # fp16 gradients: an order change may move an fp16 ulp
        assert a.dtype == b.dtype and rel(a, b) < (2e-5 if a.dtype == torch.float32 else 1e-3), i


def test_fold_tc_is_bitwise_repeatable():
    S, D = 6, 24
    heads = [4] * S
    leaves = _leaves(D, S, heads, 0, 9, torch.float32)

    def run():
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, fold_calls=2, fold_kernel="tc"), leaves, S, heads)
        return torch.autograd.grad(loss, leaves)

    first, second = run(), run()
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_fold_tc_leaves_other_stacks_to_the_fma_fold(monkeypatch):
    """Calls with different heads (mhar_hw-like), or blocks of more than 16 calls, run the fma
    fold under fold_kernel="tc"."""
    S, D = 6, 12
    tc, fma = _spies(monkeypatch)
    heads = [1, 2, 4, 2, 1, 4]
    leaves = _leaves(D, S, heads, 0, 2, torch.float32)
    loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, fold_calls=2, fold_kernel="tc"), leaves, S, heads)
    torch.autograd.grad(loss, leaves)
    assert fma and not tc
    with pytest.raises(ValueError, match="fold_kernel"):
        poisoned_stack(4, None, fold_kernel="wmma")
