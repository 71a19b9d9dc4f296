"""Byte floors of a stack's routing (kernels/route/floors.py): analytic cases, and the forward's and
pair_e's bytes counted from the launches a real stack makes in the interpreter."""

from __future__ import annotations

import pytest
import torch

from mhar_probe.kernels.route.bwd_fold import backward_plan, model_layout, plan_bytes
from mhar_probe.kernels.route.floors import (StackWidths, built_bytes, forward_bytes, four_byte_floor,
                                             pair_e_bytes, stack_floor)

LAYOUT3 = [(1, 0, 1), (2, 1, 2), (3, 2, 3)]  # three calls over three sources, each appended before its first reader


@pytest.mark.parametrize("calls,d,P", [(25, 512, 16384), (49, 1024, 4096), (73, 1280, 2048), (1, 3, 7)])
def test_four_byte_floor_is_four_bytes_a_pair_element(calls, d, P):
    assert four_byte_floor(model_layout(calls), d, P) == 4 * d * P * calls * (calls + 1) // 2


def test_stack_floor_by_hand():
    """Three calls (1, 2, 3 sources; heads 1, 2, 1), d 4, P 5. F4 = 4 x 4 x 5 x 6 = 480. Per call:
    source 0's two extra bytes in both passes (2 x 2 x 4 = 16), output and dout (4 + 4) x 4 = 32,
    normaliser 8 H; per source its gradient, 4 x 4 for source 0 and 2 x 4 for the others."""
    per_call = 3 * 16 + 3 * 32 + 8 * (1 + 2 + 1)
    grads = 16 + 2 * 8
    assert stack_floor(LAYOUT3, 4, [1, 2, 1], 5) == 480 + 5 * (per_call + grads) == 1520
    narrow = StackWidths(src0=2, src=2, out=2, dout=2)  # a bf16 chain: only outputs, douts, normalisers, grads
    assert stack_floor(LAYOUT3, 4, [1, 2, 1], 5, narrow) == 480 + 5 * (3 * 16 + 8 * 4 + 3 * 8) == 1000


def test_forward_bytes_by_hand():
    """Call 0 reads source 0 (16 bytes of d = 4 at 4 bytes); calls 1 and 2 read source 0 and
    1 or 2 bf16 rows, one of them appended (read and written); each writes a 16-byte output and
    12 H n bytes of logits and weights."""
    per_position = (16 + 16 + 12 * 1 * 1) + (16 + 8 + 8 + 16 + 12 * 2 * 2) + (16 + 16 + 8 + 16 + 12 * 1 * 3)
    assert forward_bytes(LAYOUT3, 4, [1, 2, 1], 5) == 5 * per_position


def test_pair_e_reads_a_source_once_per_block_of_its_readers():
    """Source j of a 25-call stack has 25 - j readers: ceil((25 - j) / block_c) reads of its row
    (and r_j), and one dl row per pair."""
    layout, d, P = model_layout(25), 512, 3
    for block_c in (1, 4, 16, 25):
        want = sum(-(-(25 - j) // block_c) * ((4 if j == 0 else 2) * d + 4) + 8 * 4 * (25 - j) for j in range(25))
        assert pair_e_bytes(layout, d, [8] * 25, P, block_c) == P * want


def test_built_backward_is_the_plans_bytes():
    layout = model_layout(49)
    got = built_bytes(layout, 1024, [8] * 49, 10, 8, 16)
    plan = backward_plan(layout, 48, 8)
    assert got.bwd == pytest.approx(plan_bytes(plan, layout, [8] * 49, 1024, 2, 4) * 1225 * 1024 * 10, rel=1e-12)
    assert got.total == got.fwd + got.bwd + got.pair_e


def test_built_kernels_at_the_paper_stacks_move_more_than_the_stack_floor():
    """What the kernels as built move exceeds the stack floor at every paper stack, and at 25
    calls by more than a third of F4: the 100M stack's routing cannot reach 1.3 x F4 even at copy
    bandwidth (benchmarks/kernels/results.md, "Byte floors")."""
    for calls, d, P in ((25, 512, 16384), (49, 1024, 4096), (73, 1280, 2048)):
        layout, heads = model_layout(calls), [8] * calls
        f4 = four_byte_floor(layout, d, P)
        floor = stack_floor(layout, d, heads, P)
        built = built_bytes(layout, d, heads, P, 8, 16).total
        assert f4 < floor < built
    layout = model_layout(25)
    assert built_bytes(layout, 512, [8] * 25, 16384, 8, 16).total > 1.3 * four_byte_floor(layout, 512, 16384)


# ------------------------------------------------- against the launches of a stack in the interpreter
def test_forward_and_pair_e_bytes_are_those_of_the_stacks_launches(monkeypatch):
    """A model-shaped fp32-embedding / bf16-buffer chain of 6 calls (d 8, H 2) run through the
    triton stack in the interpreter: the bytes counted from each forward launch's N and APPEND
    and from pair_e's work items are `forward_bytes` and `pair_e_bytes` over the stack's layout."""
    pytest.importorskip("triton")
    import mhar_probe.kernels.route.autograd as kad
    import mhar_probe.kernels.route.bwd_collect as rbc
    import mhar_probe.kernels.route.fwd as rfwd
    from kernel_checks import DEV, EPS, poisoned_stack, spy_launcher

    def fwd_launch(args, consts):  # (N, APPEND, H)
        return args[13], bool(consts["APPEND"]), consts["H"]

    fwd_seen = spy_launcher(monkeypatch, rfwd, "_FWD", fwd_launch)
    fwd_split_seen = spy_launcher(monkeypatch, rfwd, "_FWD_SPLIT", fwd_launch)
    item_lists = spy_launcher(monkeypatch, rbc, "PAIR_E", lambda args, consts: args[4].tolist())  # (j, c0) rows
    S, D, H, P, block_c = 6, 8, 2, 3, 4
    gen = torch.Generator().manual_seed(0)
    qs = [torch.randn(D, generator=gen).to(DEV).requires_grad_() for _ in range(S)]
    gs = [(1 + 0.1 * torch.randn(D, generator=gen)).to(DEV).requires_grad_() for _ in range(S)]
    stack = poisoned_stack(S, list(zip(qs, gs)))
    monkeypatch.setattr(kad, "pair_e_plan", _with_block_c(kad.pair_e_plan, block_c))
    x = torch.randn(1, P, D, generator=gen).to(DEV).requires_grad_()
    stack.append(x)
    outs = []
    for s in range(S):
        out, _ = stack.route(qs[s], gs[s], H, EPS, len(stack))
        outs.append(out)
        if s < S - 1:
            stack.append(torch.tanh(out).to(torch.bfloat16))
    sum((o.float() * (i + 1)).sin().sum() for i, o in enumerate(outs)).backward()
    fwd_seen = fwd_seen + fwd_split_seen
    items_seen = [tuple(r) for items in item_lists for r in items]
    layout = [(c.n, c.j0, c.j1) for c in stack._calls]
    assert layout == model_layout(S)
    widths = StackWidths(src0=4, src=2, out=4, dout=4)
    counted = sum(widths.src0 * D + widths.src * D * (n - 1) + (widths.src * D if app else 0) + widths.out * D + 12 * h * n
                  for n, app, h in fwd_seen)
    assert len(fwd_seen) == S and sum(app for _, app, _ in fwd_seen) == S - 1
    assert forward_bytes(layout, D, [H] * S, P, widths) == P * counted
    reads = {}
    for j, _ in items_seen:
        reads[j] = reads.get(j, 0) + 1
    counted_e = sum(k * ((widths.src0 if j == 0 else widths.src) * D + 4) for j, k in reads.items()) \
        + sum(4 * H * n for n, _, _ in layout)
    assert sorted(reads) == list(range(S))
    assert pair_e_bytes(layout, D, [H] * S, P, block_c, widths) == P * counted_e


def _with_block_c(plan_fn, block_c):
    """pair_e_plan with BLOCK_C forced to `block_c` (the items are built from the plan's)."""
    def plan(*args, **kwargs):
        bc, consts, warps = plan_fn(*args, **kwargs)
        return block_c, dict(consts, BLOCK_C=block_c), warps
    return plan
