"""Douts read where autograd left them (`KernelConfig(stack_douts="in_place")`, issue 55's first
lever) on the CPU interpreter, beside the slots design they replace.

Every kernel output is poisoned (NaN) before the kernels write it. The truth is float64 autograd
through eq. (mh) over a Python list of sources; the in-place design must also give bitwise the
slots design's gradients (the kernels read the same values, a slot being a plain copy), be bitwise
repeatable, copy a dout it cannot read in place (another dtype, an offset not 16-byte aligned),
and refuse a dout changed in place before it was read. Its bytes: tests/test_kernel_floors.py;
its bitwise repeats and 129 sources: tests/test_kernels_fold.py (parametrised over the designs)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
from mhar_probe.kernels import KernelConfig  # noqa: E402
from mhar_probe.kernels.launch_tables import LaunchTables  # noqa: E402
from mhar_probe.kernels.route.bwd_fold import BackwardLaunch, backward_plan  # noqa: E402

from kernel_checks import EPS, poisoned, poisoned_stack, rel  # noqa: E402
from kernel_checks import split_e  # noqa: E402,F401 (the fixture applies here)
from test_kernels_collect import _chain, _leaves, f64_stack  # noqa: E402


@pytest.fixture
def launches(monkeypatch):
    """(BackwardLaunch, IN_PLACE) of every dout-reading launch of the test's backwards."""
    seen: list[tuple[BackwardLaunch, int]] = []
    gather, fold = kad.STACK_GATHER, kad.STACK_FOLD

    def spy_gather(grid, args, consts, *rest):
        seen.append((BackwardLaunch("gather", args[19], args[20], args[22], args[23], consts["HAS_ACC"], False),
                     consts.get("IN_PLACE", 0)))
        gather(grid, args, consts, *rest)

    def spy_fold(grid, args, consts, *rest):
        seen.append((BackwardLaunch("fold", args[16], args[17], 0, args[18], not args[19], True),
                     consts.get("IN_PLACE", 0)))
        fold(grid, args, consts, *rest)

    monkeypatch.setattr(kad, "STACK_GATHER", spy_gather)
    monkeypatch.setattr(kad, "STACK_FOLD", spy_fold)
    return seen


def _config(path, D, heads, hw, fold_calls, gather_row, fold_row, douts):
    """A poisoned KernelConfig: `douts` (stack_douts), the gather backward where fold_calls is 0,
    and a launch table giving every call of `_chain` over `heads` these rows (None: built-in)."""
    hs = {1 if hw and s % 2 == 0 else h for s, h in enumerate(heads)}
    hm = max(hs)
    LaunchTables(gather={(D, h, hm, 0): tuple(gather_row) for h in hs} if gather_row else {},
                 fold={(D, h, hm, 0): tuple(fold_row) for h in hs} if fold_row else {}).dump(path)
    backward = dict(stack_backward="gather") if fold_calls == 0 else dict(fold_calls=fold_calls)
    return poisoned(launch_table=str(path), stack_douts=douts, **backward)


def _grads(cfg, leaves, S, heads, stacks=None, **chain):
    """The leaves' gradients through `_chain` over stacks running `cfg` (appended to `stacks`)."""
    stacks = [] if stacks is None else stacks

    def make(cap, p):
        stacks.append(poisoned_stack(cap, p, cfg))
        return stacks[-1]

    loss, _, _ = _chain(make, leaves, S, heads, **chain)
    return torch.autograd.grad(loss, leaves)


# gather rows: (block_p, num_warps, prefetch, maxnreg, loads_first);
# fold rows: the same and sources (launch_tables.py)
@pytest.mark.parametrize("hw,D,head_cycle,fold_calls,gather_row,fold_row", [
    (0, 96, (32, 8, 32), 2, (2, 1, 1, 0, 1), (2, 1, 0, 0, 1, 2)),  # H = 32, d/H = 3; two sources a fold loop
    (2, 12, (1, 2, 4), 3, None, (1, 1, 2, 0, 1, 2)),  # mhar_hw; the fold's w/shift/S' prefetch
    pytest.param(0, 40, (8, 2, 8), 1, (2, 1, 0, 0, 0), None,  # d/H = 5; no prefetch, a fold a call
                 marks=pytest.mark.slow),
    pytest.param(0, 40, (8, 2, 8), 0, (1, 1, 1, 0, 1), None, marks=pytest.mark.slow),  # the gather backward
])
def test_in_place_douts_match_float64_and_the_slots_bitwise(tmp_path, launches, hw, D, head_cycle, fold_calls,
                                                           gather_row, fold_row):
    """fp32 model-shaped chain: every gradient against float64 autograd, bitwise the slots
    design's, every dout-reading launch in place and the plan's."""
    S = 6
    heads = [head_cycle[s % 3] for s in range(S)]
    leaves = _leaves(D, S, heads, hw, 3, torch.float32)

    def cfg(douts):
        return _config(tmp_path / f"{douts}.json", D, heads, hw, fold_calls, gather_row, fold_row, douts)

    stacks = []
    in_place = _grads(cfg("in_place"), leaves, S, heads, stacks)
    layout = [(c.n, c.j0, c.j1) for c in stacks[0]._calls]
    assert [x for x, _ in launches] == backward_plan(layout, len(layout) - 1, fold_calls)
    assert {mode for _, mode in launches} == {4}  # fp32 douts: offsets in 16-byte steps of 4 elements
    launches.clear()
    slots = _grads(cfg("slots"), leaves, S, heads)
    assert {mode for _, mode in launches} == {0}
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b, t) in enumerate(zip(in_place, slots, truth)):
        assert a.dtype == leaves[i].dtype and rel(a, t) < 2e-5, i
        assert torch.equal(a, b), i


@pytest.mark.parametrize("dtype,half_sources", [(torch.float32, True), (torch.float16, False)])
def test_in_place_mixed_and_half_chains_are_the_slots_bitwise(launches, dtype, half_sources):
    """Autocast's layout (fp32 source 0 beside fp16 sublayer outputs, fp32 routed outputs and
    douts), and an fp16 chain (fp16 douts: offsets in 16-byte steps of 8 elements): bitwise the
    slots design's gradients."""
    S, D = 6, 16
    heads = [1, 2, 4, 2, 1, 4]
    leaves = _leaves(D, S, heads, 0, 11, dtype)
    got = [_grads(poisoned(stack_douts=douts, fold_calls=2), leaves, S, heads, half_sources=half_sources)
           for douts in ("in_place", "slots")]
    assert {mode for _, mode in launches} == {0, 16 // torch.empty(0, dtype=dtype).element_size()}
    for i, (a, b) in enumerate(zip(*got)):
        assert torch.isfinite(a).all() and torch.equal(a, b), i


class _Hook(torch.autograd.Function):
    """Identity whose backward hands on fn(incoming gradient)."""

    @staticmethod
    def forward(ctx, x, fn):
        ctx.fn = fn
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.fn(g), None


def _shifted(shift):
    """The gradient as a view `shift` elements into a larger buffer (shift 1: 4 bytes, not
    16-byte aligned; 4: 16 bytes, aligned)."""
    def fn(g):
        view = torch.empty(g.numel() + shift, dtype=g.dtype, device=g.device)[shift:].view_as(g)
        return view.copy_(g)
    return fn


def _chain_through(cfg, leaves, S, heads, through):
    """`_chain` with each routed output passed through `through` (an identity in the forward)."""
    x0, qs, gs, Ms = leaves[0], leaves[1:S + 1], leaves[S + 1:2 * S + 1], leaves[2 * S + 1:]
    stack = poisoned_stack(S, list(zip(qs, gs)), cfg)
    stack.append(x0)
    outs = []
    for s in range(S):
        x, _ = stack.route(qs[s], gs[s], heads[s], EPS, len(stack))
        x = through(s, x)
        outs.append(x)
        if s < S - 1:
            stack.append(torch.tanh(x @ Ms[s]))
    return sum((o.float() * (i + 1)).sin().sum() for i, o in enumerate(outs))


def test_unaligned_douts_are_copied(monkeypatch):
    """A dout handed on as a view 4 bytes into its buffer is copied before the kernels read it
    (the loads assume 16-byte steps); one 16 bytes in is read in place: bitwise the slots
    design's gradients either way."""
    S, D = 5, 12
    heads = [1, 2, 4, 2, 1]
    leaves = _leaves(D, S, heads, 0, 2, torch.float32)
    shifts = [1, 4, 1, 0, 4]
    held = []
    hold = kad._StackState._hold_dout

    def spy(self, call, dout):
        kept, off = hold(self, call, dout)
        held.append((call, kept is dout))
        return kept, off

    monkeypatch.setattr(kad._StackState, "_hold_dout", spy)

    def through(s, x):
        return _Hook.apply(x, _shifted(shifts[s]))

    got = []
    for douts in ("in_place", "slots"):
        loss = _chain_through(poisoned(stack_douts=douts, fold_calls=2), leaves, S, heads, through)
        got.append(torch.autograd.grad(loss, leaves))
    assert sorted(held) == [(c, shifts[c] != 1) for c in range(S)]
    for i, (a, b) in enumerate(zip(*got)):
        assert torch.isfinite(a).all() and torch.equal(a, b), i


def test_a_dout_changed_in_place_before_it_is_read_is_refused():
    """The top call's dout is kept by a function on its output; the sublayer before the top call
    doubles it in its backward, which runs after the top call's node and before the next call's,
    whose gather would read it: refused with one message naming the call."""
    S, D = 4, 12
    heads = [2, 2, 2, 2]
    leaves = _leaves(D, S, heads, 0, 6, torch.float32)
    kept: list[torch.Tensor] = []

    def keep(g):
        kept.append(g)
        return g

    def spoil(g):
        kept[0].mul_(2)
        return g

    x0, qs, gs, Ms = leaves[0], leaves[1:S + 1], leaves[S + 1:2 * S + 1], leaves[2 * S + 1:]
    stack = poisoned_stack(S, list(zip(qs, gs)), poisoned(stack_douts="in_place", fold_calls=8))
    stack.append(x0)
    outs = []
    for s in range(S):
        x, _ = stack.route(qs[s], gs[s], heads[s], EPS, len(stack))
        outs.append(_Hook.apply(x, keep) if s == S - 1 else x)
        if s < S - 1:
            nxt = torch.tanh(x @ Ms[s])
            stack.append(_Hook.apply(nxt, spoil) if s == S - 2 else nxt)
    loss = sum((o * (i + 1)).sin().sum() for i, o in enumerate(outs))
    with pytest.raises(RuntimeError, match="upstream gradient of routing call 3 was modified in place"):
        torch.autograd.grad(loss, leaves)


def test_in_place_needs_promoted_douts():
    with pytest.raises(ValueError, match="stack_douts"):
        KernelConfig(stack_douts="shared")
    with pytest.raises(ValueError, match="routing_douts='promoted'"):
        KernelConfig(stack_douts="in_place", routing_douts="storage")
    assert KernelConfig().stack_douts == "slots"  # the default until a GPU measurement


def test_the_bench_times_the_in_place_variant_after_checking_its_gradients(monkeypatch):
    """`mhar bench routing --backends triton,triton-douts-in-place --check-grads` (device_run.sh
    douts): the variant's backend carries stack_douts="in_place" over the run's configuration;
    --check-grads needs triton first; the gradient comparison reports bitwise equality or the
    largest relative difference."""
    from kernel_checks import POISON

    from mhar_probe.bench.routing import GRAD_TOL, check_arguments, grad_difference, variant_backend
    from mhar_probe.cli.bench import routing_parser
    from mhar_probe.errors import UserError

    cfg = variant_backend("triton-douts-in-place", POISON).options
    assert (cfg.stack_douts, cfg.poison, cfg.stack_backward) == ("in_place", True, "fold")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # check the arguments alone
    check_arguments(routing_parser().parse_args(["--backends", "triton,triton-douts-in-place", "--check-grads"]))
    with pytest.raises(UserError, match="must start with triton"):
        check_arguments(routing_parser().parse_args(["--backends", "triton-douts-in-place,triton", "--check-grads"]))
    a = (torch.tensor([1.0, -2.0]), torch.tensor([4.0]))
    assert grad_difference(a, tuple(t.clone() for t in a)) == (True, 0.0)
    same, diff = grad_difference((a[0], a[1] + 1e-3), a)
    assert not same and diff == pytest.approx(1e-3 / 4, rel=1e-3) and diff > GRAD_TOL
