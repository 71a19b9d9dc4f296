"""The forward's stored row norms (route/fwd.py R_STORED, `_StackState._stored_r`) on the CPU
interpreter.

Each row's r = rsqrt(mean(v^2) + eps) is computed once, by the forward launch that appends the
row, and stored; every later launch that reads the row from the buffer loads it instead of
reducing the row again. The truths: float64 norms of the stored rows, and the same stack run with
every launch reducing its rows itself (`_stored_r` returning None), which must give the same
outputs, weights and gradients bit for bit (the same values reduced the same way). Every kernel
output, the stored norms included, is NaN-poisoned before the kernels write it."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from mhar_probe.kernels.route import fwd as route_fwd  # noqa: E402
from mhar_probe.kernels.route.autograd import _StackState  # noqa: E402

from kernel_checks import EPS, poisoned, poisoned_stack, spy_launcher  # noqa: E402
from test_kernels_collect import _leaves, chain_grads  # noqa: E402


def _spy_r_stored(monkeypatch) -> list[tuple[int, int, int]]:
    """Every forward launch's (N, APPEND, R_STORED), both kernels, in launch order."""
    seen: list = []
    for name in ("_FWD", "_FWD_SPLIT"):
        spy_launcher(monkeypatch, route_fwd, name,
                     lambda a, c: seen.append((a[13], c["APPEND"], c["R_STORED"])))
    return seen


@pytest.mark.parametrize("forward", ["plain", "lookahead"])
@pytest.mark.parametrize("D,head_cycle,S,half", [
    (16, (2, 2, 2), 6, False),  # one tile a head (K = 8)
    (96, (32, 32, 32), 7, False),  # H = 32, d / H = 3: two tiles of 2 + 1 columns (the split kernel)
    (40, (8, 2, 8), 5, True),  # H changes (K 5 = 4 + 1, then 20 = 16 + 4); fp16 sources over an fp32 row 0
])
def test_stored_norms_change_no_bit(monkeypatch, forward, D, head_cycle, S, half):
    """The chain with stored norms against the same chain where every launch reduces its rows:
    loss, outputs, weights and every gradient equal bit for bit; every launch over more than
    source 0 ran with R_STORED, and the stored norms are the rows' float64 norms."""
    heads = [head_cycle[s % 3] for s in range(S)]
    leaves = _leaves(D, S, heads, 0, 5, torch.float32)
    config = poisoned(forward=forward)
    seen = _spy_r_stored(monkeypatch)
    got, stack = chain_grads(leaves, S, heads, config, half)
    assert all(r for _, _, r in seen)
    assert stack._r_upto == S
    rows = torch.cat([stack.row0[None].double(), stack.buffer[1:S].double()])  # [S, P, d]
    ref_r = torch.rsqrt(rows.pow(2).mean(-1) + EPS)
    assert torch.allclose(stack._rnorm[:S].double(), ref_r, rtol=2e-6, atol=0)

    monkeypatch.setattr(_StackState, "_stored_r", lambda self, n, append, eps: (None, False))
    seen.clear()
    want, _ = chain_grads(leaves, S, heads, config, half)
    assert seen and not any(r for _, _, r in seen)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), i


def _sites(D: int, P: int, S: int, seed: int):
    """(queries, key-norm weights, source 0 [1, P, D], mixers) of an S-call chain, no gradients."""
    gen = torch.Generator().manual_seed(seed)
    qs = [torch.randn(D, generator=gen) for _ in range(S)]
    gs = [1 + 0.2 * torch.randn(D, generator=gen) for _ in range(S)]
    x0 = torch.randn(1, P, D, generator=gen)
    return qs, gs, x0, [torch.randn(D, D, generator=gen) / D**0.5 for _ in range(S)]


def test_a_row_stored_by_a_copy_turns_the_stored_norms_off(monkeypatch):
    """A source appended as a non-contiguous tensor is copied into the buffer, not stored by a
    forward launch, so it has no stored norm: from the first launch that reads it from the buffer
    on, every launch reduces its rows itself (R_STORED off) and stores nothing, and the outputs
    are those of a stack that never stores a norm."""
    D, H, P, S = 16, 2, 3, 5
    qs, gs, x0, mixers = _sites(D, P, S, seed=3)

    def chain():
        stack = poisoned_stack(S, [(q, g) for q, g in zip(qs, gs)], poisoned(forward="plain"))
        stack.append(x0)
        outs = []
        for s in range(S):
            out, w = stack.route(qs[s], gs[s], H, EPS, len(stack))
            outs += [out, w]
            nxt = torch.tanh(out @ mixers[s])
            if s == 1:  # source 2: a transposed view, copied into the buffer by append
                nxt = nxt.transpose(1, 2).contiguous().transpose(1, 2)
                assert not nxt.is_contiguous()
            if s < S - 1:
                stack.append(nxt)
        return outs, stack

    seen = _spy_r_stored(monkeypatch)
    with torch.no_grad():
        got, stack = chain()
    # calls 0..4 over 1..5 rows: call 1 appends row 1 (stored), call 2 reads row 2 from the buffer
    # (a copy: no norm), so calls 2.. reduce their rows
    assert [(n, r) for n, _, r in seen] == [(1, 1), (2, 1), (3, 0), (4, 0), (5, 0)]
    assert stack._r_upto == 2
    monkeypatch.setattr(_StackState, "_stored_r", lambda self, n, append, eps: (None, False))
    with torch.no_grad():
        want, _ = chain()
    for i, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), i


def test_a_call_with_another_eps_reduces_its_rows(monkeypatch):
    """The norms are stored with the key-norm eps of the launches that made them; a call with
    another eps reduces its rows itself and stores nothing (its r differ), and the calls after it
    with the first eps load the norms stored before it."""
    D, H, P, S = 16, 2, 3, 4
    qs, gs, x0, _ = _sites(D, P, S, seed=4)
    seen = _spy_r_stored(monkeypatch)
    stack = poisoned_stack(S, None, poisoned(forward="plain"))
    stack.append(x0)
    with torch.no_grad():
        for s, eps in enumerate([EPS, EPS, 1e-2, EPS]):
            out, _ = stack.route(qs[s], gs[s], H, eps, len(stack))
            if s < S - 1:
                stack.append(torch.tanh(out))
    # call 2 (eps 1e-2) appends row 2 without storing its norm: call 3 must reduce row 2 itself
    assert [(n, r) for n, _, r in seen] == [(1, 1), (2, 1), (3, 0), (4, 0)]
