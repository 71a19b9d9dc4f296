"""The fold-block backward (kernels/route/bwd_fold.py) on the CPU interpreter.

Every kernel output is poisoned (NaN) before the kernels write it. The truth is the float64
reference routed over a Python list of sources (autograd through eq. mh); the fold's own
decomposition (naive.fold_reference) is checked in float64 against collect_reference. Each
backward's dout-reading launches are recorded and must be the plan (`backward_plan`) whose
bytes the structural test counts."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
import mhar_probe.kernels.route.bwd_collect as rbc  # noqa: E402
from mhar_probe.kernels import KernelConfig  # noqa: E402
from mhar_probe.kernels.route.naive import collect_reference, fold_reference  # noqa: E402
from mhar_probe.kernels.route.bwd_fold import BackwardLaunch, backward_plan, model_layout, plan_bytes  # noqa: E402

from kernel_checks import DEV, EPS, POISON, poisoned_stack, rel  # noqa: E402
from kernel_checks import split_e  # noqa: E402,F401 (the fixture applies here)
from test_kernels_collect import _chain, _leaves, f64_stack  # noqa: E402




@pytest.fixture
def launches(monkeypatch):
    """The dout-reading launches of every backward run in the test, as `BackwardLaunch`es."""
    seen: list[BackwardLaunch] = []
    gather, fold = kad.STACK_GATHER, kad.STACK_FOLD

    def spy_gather(grid, args, consts, *rest):
        call, top1, j0, j1 = args[19], args[20], args[22], args[23]
        seen.append(BackwardLaunch("gather", call, top1, j0, j1, consts["HAS_ACC"], False))
        gather(grid, args, consts, *rest)

    def spy_fold(grid, args, consts, *rest):
        call, top1, jf = args[16], args[17], args[18]
        seen.append(BackwardLaunch("fold", call, top1, 0, jf, not args[19], True))
        fold(grid, args, consts, *rest)

    monkeypatch.setattr(kad, "STACK_GATHER", spy_gather)
    monkeypatch.setattr(kad, "STACK_FOLD", spy_fold)
    return seen


def _layout(stack) -> list[tuple[int, int, int]]:
    return [(c.n, c.j0, c.j1) for c in stack._calls]


def _config(fold_calls: int) -> dict:
    """fold_calls 0: the gather backward."""
    return dict(stack_backward="gather") if fold_calls == 0 else dict(fold_calls=fold_calls)


def test_fold_reference_is_collect_reference():
    """In float64 the fold's block sums are the gather's sums (T_{c,j} is linear in dout_c and
    dl_{c,j}), for blocks of 1 to 4 calls over a stack whose calls read 1 to 7 sources, first
    reading 0 to 3 new ones; its folds are the plan's fold launches."""
    gen = torch.Generator().manual_seed(5)
    f = torch.float64
    P, D = 3, 12
    layout = [(1, 0, 1), (3, 1, 3), (3, 3, 3), (4, 3, 4), (2, 4, 4), (7, 4, 7), (7, 7, 7)]
    heads = [1, 2, 4, 2, 1, 4, 2]
    srcs = [torch.randn(P, D, generator=gen, dtype=f) for _ in range(7)]
    qs = [torch.randn(D, generator=gen, dtype=f) for _ in layout]
    gs = [1 + 0.2 * torch.randn(D, generator=gen, dtype=f) for _ in layout]
    douts = [torch.randn(P, D, generator=gen, dtype=f) for _ in layout]
    outs = [torch.randn(P, D, generator=gen, dtype=f) for _ in layout]
    res = [1e-3 * torch.randn(P, D, generator=gen, dtype=f) if c % 2 else None for c in range(len(layout))]
    weights = [torch.rand(n, P, H, generator=gen, dtype=f).softmax(0) for (n, _, _), H in zip(layout, heads)]
    dv, _, _ = collect_reference(srcs, [(n, q, g, H) for (n, _, _), q, g, H in zip(layout, qs, gs, heads)],
                                 weights, douts, outs, res, EPS, [None] * len(layout))
    for cb in (1, 2, 3, 4):
        calls = [(n, j0, j1, q, g, H) for (n, j0, j1), q, g, H in zip(layout, qs, gs, heads)]
        got, folds = fold_reference(srcs, calls, weights, douts, outs, res, EPS, cb)
        assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, dv)), cb
        plan = [(x.call, x.top1, x.hi) for x in backward_plan(layout, len(layout) - 1, cb) if x.kind == "fold"]
        assert folds == plan and folds, cb


def _check_plan(seen, stack, fold_calls):
    layout = _layout(stack)
    assert seen == backward_plan(layout, len(layout) - 1, fold_calls)
    assert any(x.kind == "fold" for x in seen) == (fold_calls > 0)


@pytest.mark.parametrize("hw,D,head_cycle,fold_calls,gather_row", [
    (0, 12, (1, 2, 4), 2, None),
    (2, 12, (1, 2, 4), 3, None),  # mhar_hw: single-head reads per query row beside H = 2, 4
    (0, 96, (32, 8, 32), 2, (2, 1, 1, 0, 1)),  # H = 32, d/H = 3; two positions per block, prefetch
    (0, 40, (8, 2, 8), 1, (2, 1, 0, 0, 0)),  # d/H = 5 and 20; a fold after every call
    (0, 40, (8, 2, 8), 0, None),  # the gather backward, still selectable
])
def test_fold_chain_matches_float64(tmp_path, launches, hw, D, head_cycle, fold_calls, gather_row):
    """fp32 model-shaped chain: every gradient (sources, queries, key-norm weights, sublayers)
    against float64 autograd, and the backward's launches are the plan's."""
    from test_kernels_collect import launch_table

    S = 6
    heads = [head_cycle[s % 3] for s in range(S)]
    leaves = _leaves(D, S, heads, hw, 3, torch.float32)
    stacks = []

    def make(cap, params):
        cfg = launch_table(tmp_path / "t.json", D, heads, hw, gather_row)
        stacks.append(poisoned_stack(cap, params, cfg, **_config(fold_calls)))
        return stacks[-1]

    loss, _, _ = _chain(make, leaves, S, heads)
    grads = torch.autograd.grad(loss, leaves)
    _check_plan(launches, stacks[0], fold_calls)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert a.dtype == leaves[i].dtype and rel(a, b) < 2e-5, i


def _wide(make_stack, xs, qs, gs, heads, groups):
    """A stack of many sources: before call c, call c-1's output (through tanh) and groups[c]
    leaf sources are appended; every call reads the whole stack. Returns (loss, stack)."""
    stack = make_stack(1 + sum(groups) + len(groups), list(zip(qs, gs)))
    it = iter(xs)
    outs = []
    for c, k in enumerate(groups):
        if c:
            stack.append(torch.tanh(outs[-1]))
        for _ in range(k):
            stack.append(next(it))
        out, _ = stack.route(qs[c], gs[c], heads[c], EPS, len(stack))
        outs.append(out)
    loss = sum((o.double() * (i + 1)).sin().sum() for i, o in enumerate(outs))
    return loss, stack


@pytest.mark.slow
@pytest.mark.parametrize("fold_calls", [2, 3])
def test_fold_wide_stack_of_129_sources(launches, fold_calls):
    """Six calls over 100 to 129 sources (d = 24, H = 8 and 2: d/H = 3 and 12), the later calls
    folded into the accumulators of 100+ sources: every gradient against float64 autograd."""
    D = 24
    groups = [100, 4, 4, 4, 5, 7]
    heads = [8, 2, 8, 2, 8, 8]
    gen = torch.Generator().manual_seed(7)
    xs = [torch.randn(1, 2, D, generator=gen) for _ in range(sum(groups))]
    qs = [torch.randn(D, generator=gen) * 0.7 for _ in groups]
    gs = [1 + 0.2 * torch.randn(D, generator=gen) for _ in groups]
    leaves = [t.to(DEV).requires_grad_() for t in xs + qs + gs]
    n = len(xs)
    loss, stack = _wide(lambda cap, p: poisoned_stack(cap, p, fold_calls=fold_calls), leaves[:n],
                        leaves[n:n + 6], leaves[n + 6:], heads, groups)
    grads = torch.autograd.grad(loss, leaves)
    assert stack._calls[-1].n == 129
    _check_plan(launches, stack, fold_calls)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_loss, _ = _wide(f64_stack, ref_leaves[:n], ref_leaves[n:n + 6], ref_leaves[n + 6:], heads, groups)
    truth = torch.autograd.grad(ref_loss, ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert rel(a, b) < 2e-5, i


@pytest.mark.parametrize("routing_douts", ["promoted", pytest.param("storage", marks=pytest.mark.slow)])
def test_fold_autocast_layout_matches_the_gather_backward(routing_douts):
    """Autocast's layout (fp32 source 0 beside fp16 sublayer outputs, fp32 routed outputs) with
    fp32 or, opted into, fp16 stored douts: the fold gives the gather backward's gradients up to
    fp32 rounding (both round the same values through the same douts)."""
    S, D = 6, 12
    heads = [1, 2, 4, 2, 1, 4]
    leaves = _leaves(D, S, heads, 0, 11, torch.float32)

    def run(cfg):
        stacks = []

        def make(cap, p):
            stacks.append(poisoned_stack(cap, p, routing_douts=routing_douts, **cfg))
            return stacks[-1]

        loss, _, _ = _chain(make, leaves, S, heads, half_sources=True)
        assert stacks[0].buffer.dtype == torch.float16
        return torch.autograd.grad(loss, leaves)

    fold, gather = run(_config(2)), run(_config(0))
    for i, (a, b) in enumerate(zip(fold, gather)):
        assert a.dtype == b.dtype and rel(a, b) < 1e-5, i


def test_fold_half_chain_matches_the_gather_backward():
    """fp16 sources and outputs (S'_c from the forward's stored residual; fp16 douts in the slots):
    the same gradients as the gather backward up to the rounding of fp16 outputs."""
    S, D = 5, 16
    heads = [2, 4, 1, 4, 2]
    leaves = _leaves(D, S, heads, 0, 4, torch.float16)

    def run(cfg):
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, **cfg), leaves, S, heads)
        return torch.autograd.grad(loss, leaves)

    fold, gather = run(_config(2)), run(_config(0))
    for i, (a, b) in enumerate(zip(fold, gather)):
        assert a.dtype == b.dtype and torch.isfinite(a).all() and rel(a, b) < 2e-3, i


def test_fold_is_bitwise_repeatable():
    """The same inputs give bitwise the same gradients, also after a backward over other values
    in between (no state of one backward, accumulators or dout slots, reaches the next) and in a
    second backward through the same graph (retain_graph: the fold frontier starts again at the
    top); outputs not poisoned, so a read of memory no kernel wrote would show."""
    S, D = 5, 12
    heads = [1, 2, 4, 2, 1]

    def run(seed, twice=False):
        leaves = _leaves(D, S, heads, 0, seed, torch.float32)
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, poison=False, fold_calls=2), leaves, S, heads)
        grads = torch.autograd.grad(loss, leaves, retain_graph=twice)
        return (grads, torch.autograd.grad(loss, leaves)) if twice else grads

    first = run(8)
    run(9)
    again, retained = run(8, twice=True)
    assert all(torch.isfinite(a).all() for a in first)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, retained))


def test_fold_reads_each_dout_about_once_per_block():
    """Structural: the default backward is the fold, and in its plan no dout is read by more
    than fold_calls + 1 launches (the gathers of its block's nodes and one fold), at any stack
    depth; the gather backward reads dout_c in c + 1 launches (once per pair). Counting bytes
    per pair-element over that plan (`plan_bytes`, fp32 douts and bf16 sources, H = 8) at the
    model's stacks (25 / 49 / 73 calls): below 0.72x / 0.56x / 0.49x the gather backward's."""
    cfg = KernelConfig()
    assert cfg.stack_backward == "fold" and cfg.fold_calls == 8
    for calls, d, ratio in ((25, 512, 0.72), (49, 1024, 0.56), (73, 1280, 0.49)):
        layout = model_layout(calls)
        fold = backward_plan(layout, calls - 1, cfg.fold_calls)
        gather = backward_plan(layout, calls - 1, 0)
        for plan, most in ((fold, cfg.fold_calls + 1), (gather, calls)):
            reads = [sum(x.call <= c < x.top1 for x in plan) for c in range(calls)]
            assert max(reads) == most, (calls, reads)
        heads = [8] * calls
        b_fold = plan_bytes(fold, layout, heads, d, 2, 4)
        b_gather = plan_bytes(gather, layout, heads, d, 2, 4)
        assert b_gather > 4 and b_fold < ratio * b_gather, (calls, b_fold, b_gather)


def test_kernel_config_refuses_unknown_backwards():
    with pytest.raises(ValueError, match="stack_backward"):
        KernelConfig(stack_backward="atomic")
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="fold_calls"):
            KernelConfig(fold_calls=bad)


def test_bench_variants_select_the_backward():
    """`mhar bench routing --backends triton,triton-gather,triton-fold12` times the backwards side
    by side in one process: each variant's backend carries its own KernelConfig (the variant's
    fields over the run's base configuration), the default (`triton`) the fold-block backward at
    blocks of 8; the old name of the storage-douts variant still reads."""
    from mhar_probe.bench.routing import BACKENDS, variant_backend

    seen = {}
    for name in ("triton", "triton-gather", "triton-fold4", "triton-fold12", "triton-fold16"):
        assert name in BACKENDS
        cfg = variant_backend(name, POISON).options
        seen[name] = (cfg.stack_backward, cfg.fold_calls, cfg.poison)
    assert seen == {"triton": ("fold", 8, True), "triton-gather": ("gather", 8, True),
                    "triton-fold4": ("fold", 4, True), "triton-fold12": ("fold", 12, True),
                    "triton-fold16": ("fold", 16, True)}
    storage = variant_backend("triton-storage-douts", POISON).options
    assert storage.routing_douts == "storage" and variant_backend("triton-bf16dout", POISON).options == storage
