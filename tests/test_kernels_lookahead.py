"""The forward's lookahead (`KernelConfig(forward="lookahead")`, route/fwd.py NEXT and RESUME) on
the CPU interpreter.

A stack built with its sites' parameters knows every call's query, so a call folds the rows it
reads into the next call's online softmax as well, and the next call reads only the rows appended
since. The truth is the float64 reference over a Python list of sources; every kernel output is
NaN-poisoned before the kernels write it (the lookahead's state and the next call's logits too)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from mhar_probe.kernels.route import fwd as route_fwd  # noqa: E402

from kernel_checks import poisoned, poisoned_stack, rel, spy_launcher  # noqa: E402
from test_kernels_collect import _chain, _leaves, chain_grads, f64_stack  # noqa: E402

AHEAD = poisoned(forward="lookahead")
PLAIN = poisoned(forward="plain")


def _spy_forward(monkeypatch) -> list:
    """Every forward launch's (N, NEXT, RESUME, N0), both kernels, in launch order."""
    seen: list = []

    def record(args, consts):
        seen.append((args[13], consts["NEXT"], consts["RESUME"], args[20]))

    for name in ("_FWD", "_FWD_SPLIT"):
        spy_launcher(monkeypatch, route_fwd, name, lambda a, c: record(a, c))
    return seen


def _run(leaves, S, heads, config, half_sources=False):
    values, stack = chain_grads(leaves, S, heads, config, half_sources)
    assert stack.collect
    return values


@pytest.mark.parametrize("hw,D,head_cycle,S", [
    (0, 12, (4, 4, 4), 5),  # one H: calls pair up (0, 1), (2, 3); call 4 has no next call
    (0, 12, (4, 4, 4), 6),  # an even count: the last call resumes
    (0, 40, (8, 2, 8), 5),  # H changes: a call whose leader guessed another H reads all its rows
    (2, 12, (1, 2, 4), 5),  # head-aligned sites: the second read of a site resumes with no new row
    (0, 96, (32, 32, 32), 7),  # H = 32, d / H = 3: two tiles of 2 + 1 columns
])
def test_lookahead_chain_matches_float64(monkeypatch, hw, D, head_cycle, S):
    """Outputs, weights and every gradient (sources, queries, key-norm weights, the sublayers) of
    an fp32 chain against float64 autograd, and the launches are the pairs the lookahead makes."""
    heads = [head_cycle[s % 3] for s in range(S)]
    leaves = _leaves(D, S, heads, hw, 3, torch.float32)
    seen = _spy_forward(monkeypatch)
    got = _run(leaves, S, heads, AHEAD)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_loss, ref_outs, ref_wts = _chain(f64_stack, ref_leaves, S, heads)
    ref = [ref_loss, *ref_outs, *ref_wts, *torch.autograd.grad(ref_loss, ref_leaves)]
    assert len(got) == len(ref)
    for i, (a, b) in enumerate(zip(got, ref)):
        assert rel(a, b) < 2e-5, i
    resumed = [s for s in seen if s[2]]
    assert resumed, "no call resumed"
    assert all(s[3] >= 1 for s in resumed) and all(not (s[1] and s[2]) for s in seen)
    if not hw and len(set(heads)) == 1:  # pairs: (lead, resume from its n), the last call plain if odd
        expect = []
        for c in range(S):
            n = c + 1
            expect.append((n, 1, 0, 0) if c % 2 == 0 and c + 1 < S else
                          (n, 0, 1, n - 1) if c % 2 else (n, 0, 0, 0))
        assert seen == expect


def test_lookahead_is_the_plain_forward_and_bitwise_repeatable():
    """Autocast's layout (an fp32 source 0 beside half sublayer outputs: the forward's fold of
    q * g): the lookahead gives the plain forward's outputs, weights and gradients up to fp32
    rounding, and the same bits run to run."""
    S, D = 6, 40
    heads = [8] * S
    leaves = _leaves(D, S, heads, 0, 11, torch.float32)
    plain = _run(leaves, S, heads, PLAIN, half_sources=True)
    ahead = [_run(leaves, S, heads, AHEAD, half_sources=True) for _ in range(2)]
    for i, (a, b) in enumerate(zip(ahead[0], plain)):
        assert a.dtype == b.dtype and rel(a, b) < 1e-5, i
    assert all(torch.equal(a, b) for a, b in zip(*ahead))


def test_lookahead_drops_a_state_the_next_call_cannot_use():
    """A call that routes over fewer rows than its leader read (n given) cannot resume: it reads
    its own rows, and its outputs are the plain forward's."""
    from test_kernels_collect import EPS

    S, D, H = 3, 12, 2
    gen = torch.Generator().manual_seed(4)
    x = [torch.randn(1, 3, D, generator=gen) for _ in range(3)]
    qs = [torch.randn(D, generator=gen) for _ in range(S)]
    gs = [1 + 0.1 * torch.randn(D, generator=gen) for _ in range(S)]

    def run(config):
        stack = poisoned_stack(4, list(zip(qs, gs)), config)
        leaf = x[0].clone().requires_grad_()
        stack.append(leaf)
        stack.append(x[1])
        stack.append(x[2])
        outs = [stack.route(qs[0], gs[0], H, EPS, 3)[0], stack.route(qs[1], gs[1], H, EPS, 2)[0],
                stack.route(qs[2], gs[2], H, EPS, 3)[0]]
        loss = sum((o * (i + 1)).sin().sum() for i, o in enumerate(outs))
        return [*outs, *torch.autograd.grad(loss, [leaf])], [(c.resume_from, c.lead_woff >= 0) for c in stack._calls]

    got, calls = run(AHEAD)
    want, _ = run(PLAIN)
    # call 1 reads 2 < 3 rows: it does not resume; it leads instead, and call 2 resumes from its 2
    assert calls == [(0, True), (0, True), (2, False)]
    for a, b in zip(got, want):
        assert rel(a, b) < 1e-5
