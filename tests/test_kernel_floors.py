"""Byte floors of a stack's routing (kernels/route/floors.py): analytic cases, and the forward's and
pair_e's bytes counted from the launches a real stack makes in the interpreter."""

from __future__ import annotations

import functools

import pytest
import torch

from mhar_probe.kernels.route.bwd_fold import backward_plan, model_layout, plan_bytes
from mhar_probe.kernels.route.floors import (StackWidths, built_bytes, forward_bytes, four_byte_floor,
                                             pair_e_bytes, stack_floor, weight_bytes)

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
    """Call 0 reads source 0 (16 bytes of d = 4 at 4 bytes) and writes its 4-byte r; calls 1 and
    2 read source 0 and 1 or 2 bf16 rows, one of them appended (read and written, and its r
    written), the other (call 2's row 1) read from the buffer with its stored r; each writes a
    16-byte output and 12 H n bytes of logits and weights."""
    per_position = (16 + 4 + 16 + 12 * 1 * 1) + (16 + 8 + 8 + 4 + 16 + 12 * 2 * 2) + \
        (16 + 16 + 4 + 8 + 4 + 16 + 12 * 1 * 3)
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
    from kernel_checks import poisoned_stack, spy_launcher

    def fwd_launch(args, consts):  # (N, APPEND, H); every launch has R_STORED, the first STORE_R0
        assert consts["R_STORED"] and consts["STORE_R0"] == (args[13] == 1)
        return args[13], bool(consts["APPEND"]), consts["H"]

    fwd_seen = spy_launcher(monkeypatch, rfwd, "_FWD", fwd_launch)
    fwd_split_seen = spy_launcher(monkeypatch, rfwd, "_FWD_SPLIT", fwd_launch)
    item_lists = spy_launcher(monkeypatch, rbc, "PAIR_E", lambda args, consts: args[4].tolist())  # (j, c0) rows
    S, D, H, P, block_c = 6, 8, 2, 3, 4
    monkeypatch.setattr(kad, "pair_e_plan", _with_block_c(kad.pair_e_plan, block_c))
    stack = _mixed_chain(functools.partial(poisoned_stack, forward="plain"), S, D, H, P)
    fwd_seen = fwd_seen + fwd_split_seen
    items_seen = [tuple(r) for items in item_lists for r in items]
    layout = [(c.n, c.j0, c.j1) for c in stack._calls]
    assert layout == model_layout(S)
    widths = StackWidths(src0=4, src=2, out=4, dout=4)
    # rows from the buffer with their stored r (4 bytes), the appended row's r written, row 0's by call 0
    counted = sum(widths.src0 * D + widths.src * D * (n - 1) + (widths.src * D + 4 if app else 0) + widths.out * D
                  + 12 * h * n + 4 * (n - 1 - app) + 4 * (n == 1) for n, app, h in fwd_seen)
    assert len(fwd_seen) == S and sum(app for _, app, _ in fwd_seen) == S - 1
    assert forward_bytes(layout, D, [H] * S, P, widths) == P * counted
    reads = {}
    for j, _ in items_seen:
        reads[j] = reads.get(j, 0) + 1
    counted_e = sum(k * ((widths.src0 if j == 0 else widths.src) * D + 4) for j, k in reads.items()) \
        + sum(4 * H * n for n, _, _ in layout)
    assert sorted(reads) == list(range(S))
    assert pair_e_bytes(layout, D, [H] * S, P, block_c, widths) == P * counted_e


def _mixed_chain(make_stack, S, D, H, P):
    """A model-shaped chain of S calls (d D, H heads, P positions) through make_stack(S, params):
    an fp32 source 0, bf16 sublayer outputs (tanh of each routed output), fp32 routed outputs;
    forward and backward run. Returns the stack."""
    from kernel_checks import DEV, EPS

    gen = torch.Generator().manual_seed(0)
    qs = [torch.randn(D, generator=gen).to(DEV).requires_grad_() for _ in range(S)]
    gs = [(1 + 0.1 * torch.randn(D, generator=gen)).to(DEV).requires_grad_() for _ in range(S)]
    stack = make_stack(S, list(zip(qs, gs)))
    stack.append(torch.randn(1, P, D, generator=gen).to(DEV).requires_grad_())
    outs = []
    for s in range(S):
        out, _ = stack.route(qs[s], gs[s], H, EPS, len(stack))
        outs.append(out)
        if s < S - 1:
            stack.append(torch.tanh(out).to(torch.bfloat16))
    sum((o.float() * (i + 1)).sin().sum() for i, o in enumerate(outs)).backward()
    return stack


def _with_block_c(plan_fn, block_c):
    """pair_e_plan with BLOCK_C forced to `block_c` (the items are built from the plan's)."""
    def plan(*args, **kwargs):
        bc, consts, warps = plan_fn(*args, **kwargs)
        return block_c, dict(consts, BLOCK_C=block_c), warps
    return plan


# ------------------------------------------- the douts' bytes, from the loads and stores of the launches
class _DoutTraffic:
    """The dout bytes each dout-reading launch moves, from the interpreter's own loads and stores:
    the distinct elements loaded and those stored inside the douts a launch may touch (its own
    dout and the slot buffer), each counted once per launch
    (the rule `plan_dout_bytes` counts by)."""

    def __init__(self, monkeypatch):
        from triton.runtime import interpreter as ti

        self.on = False
        self.loads: list = []
        self.stores: list = []
        self.bytes: list[int] = []
        self.parts: list[tuple[int, int]] = []  # (loaded, stored) bytes of each launch
        load, store = ti.InterpreterBuilder.create_masked_load, ti.InterpreterBuilder.create_masked_store
        tracer = self

        def traced_load(builder, ptrs, mask, other, *rest):
            if tracer.on:
                tracer.loads.append(self._elements(ptrs, mask))
            return load(builder, ptrs, mask, other, *rest)

        def traced_store(builder, ptrs, value, mask, *rest):
            if tracer.on:
                tracer.stores.append(self._elements(ptrs, mask))
            return store(builder, ptrs, value, mask, *rest)

        monkeypatch.setattr(ti.InterpreterBuilder, "create_masked_load", traced_load)
        monkeypatch.setattr(ti.InterpreterBuilder, "create_masked_store", traced_store)

    @staticmethod
    def _elements(ptrs, mask):
        import numpy as np

        addr = np.broadcast_to(ptrs.data, np.broadcast_shapes(ptrs.data.shape, mask.data.shape))
        return addr[np.broadcast_to(mask.data, addr.shape)].astype(np.uint64), ptrs.get_element_ty().primitive_bitwidth // 8

    def launch(self, launcher, grid, args, consts, rest, douts, every_store=False):
        """Run one launch traced; `douts`: the tensors whose bytes count as the douts'.
        every_store: each store of an element counted (the forward's logits, then its weights,
        over the same elements), not each element stored."""
        self.on, self.loads, self.stores = True, [], []
        try:
            launcher(grid, args, consts, *rest)
        finally:
            self.on = False
        spans = {(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in douts}
        parts = []
        for seen, every in ((self.loads, False), (self.stores, every_store)):
            distinct = set()
            for k, (addr, size) in enumerate(seen):
                for lo, hi in spans:
                    distinct.update(((k, int(a)) if every else int(a), size) for a in addr[(addr >= lo) & (addr < hi)])
            parts.append(sum(size for _, size in distinct))
        self.bytes.append(sum(parts))
        self.parts.append((parts[0], parts[1]))


def _held_config(tmp_path, held: bool) -> dict:
    """KernelConfig changes for `_mixed_chain`'s stacks (d 8, H 2): with `held`, a launch table whose
    fold row is the held kernel's (sources 0)."""
    if not held:
        return {}
    from mhar_probe.kernels.launch_tables import LaunchTables

    path = tmp_path / "held.json"
    LaunchTables(fold={(8, 2, 2, 0): (1, 1, 1, 0, 0, 0)}).dump(path)
    return dict(launch_table=str(path))


def _spy_backward(monkeypatch, kad, seen: list, trace):
    """Spy on every dout-reading launch of the stack's backward: each recorded in `seen` as a
    `BackwardLaunch` (the gather, the reader-loop fold and the held fold), then run through
    `trace(kind, launcher, grid, args, consts, rest)` (kind "gather" or "fold": the held kernel
    takes the reader loop's douts and weights at the same places). Returns the held kernel's spy
    (`.launches` counts its launches)."""
    from mhar_probe.kernels.route.bwd_fold import BackwardLaunch

    gather, fold, held = kad.STACK_GATHER, kad.STACK_FOLD, kad.STACK_FOLD_HELD

    def spy_gather(grid, args, consts, *rest):
        seen.append(BackwardLaunch("gather", args[19], args[20], args[22], args[23], consts["HAS_ACC"], False))
        trace("gather", gather, grid, args, consts, rest)

    def spy_fold(grid, args, consts, *rest):
        seen.append(BackwardLaunch("fold", args[16], args[17], 0, args[18], not args[19], True))
        trace("fold", fold, grid, args, consts, rest)

    def spy_held(grid, args, consts, *rest):
        seen.append(BackwardLaunch("fold", args[14], args[14] + consts["CB"], 0, args[15], not args[16], True))
        spy_held.launches += 1
        trace("fold", held, grid, args, consts, rest)
    spy_held.launches = 0
    monkeypatch.setattr(kad, "STACK_GATHER", spy_gather)
    monkeypatch.setattr(kad, "STACK_FOLD", spy_fold)
    monkeypatch.setattr(kad, "STACK_FOLD_HELD", spy_held)
    return spy_held


@pytest.mark.parametrize("stack_backward,fold_calls,held", [("fold", 2, False), ("fold", 2, True), ("gather", 8, False)],
                         ids=["fold", "held", "gather"])
def test_dout_bytes_are_those_of_the_launches(monkeypatch, tmp_path, stack_backward, fold_calls, held):
    """A model-shaped fp32-embedding / bf16-buffer chain of 6 calls (d 8, H 2, fp32 douts) through
    the triton stack in the interpreter: the dout bytes each launch loads and stores
    (`_DoutTraffic`) are `plan_dout_bytes` over the stack's launches (each dout stored into its
    slot by its call's gather and read from there by every reader), the folds run by the reader
    loop or by the held kernel."""
    pytest.importorskip("triton")
    import mhar_probe.kernels.route.autograd as kad
    from kernel_checks import poisoned_stack

    from mhar_probe.kernels.route.bwd_fold import BackwardLaunch, plan_dout_bytes

    traffic = _DoutTraffic(monkeypatch)
    seen: list[BackwardLaunch] = []
    held_spy = _spy_backward(monkeypatch, kad, seen, lambda kind, launcher, grid, args, consts, rest: traffic.launch(
        launcher, grid, args, consts, rest, [args[3], args[6]] if kind == "gather" else [args[3]]))
    S, D, H, P = 6, 8, 2, 3
    stack = _mixed_chain(lambda cap, params: poisoned_stack(cap, params, stack_backward=stack_backward,
                                                             fold_calls=fold_calls, **_held_config(tmp_path, held)),
                         S, D, H, P)
    layout = [(c.n, c.j0, c.j1) for c in stack._calls]
    assert layout == model_layout(S) and seen == backward_plan(layout, S - 1, fold_calls if stack_backward == "fold" else 0)
    assert any(x.kind == "fold" for x in seen) == (stack_backward == "fold")
    assert (held_spy.launches > 0) == held  # the held row runs the held kernel
    assert sum(traffic.bytes) == P * plan_dout_bytes(seen, layout, D, 4)


# ------------------------------------------------ the weights' bytes
@pytest.mark.parametrize("stack_backward,fold_calls,held", [("fold", 2, False), ("fold", 2, True), ("gather", 8, False)],
                         ids=["fold", "held", "gather"])
def test_weight_bytes_are_those_of_the_launches(monkeypatch, tmp_path, stack_backward, fold_calls, held):
    """The chain of `test_dout_bytes_are_those_of_the_launches`: the bytes every forward launch
    loads and stores in its weights (W), and every dout-reading launch loads from the stored
    weights, from the interpreter's own loads and stores (`_DoutTraffic`; the forward's logits and
    weights stored over the same elements counted twice) are `forward_bytes`' and `plan_bytes`'
    weight terms (12 H n per forward over n sources, 4 H per pair of a backward launch); no
    backward launch loads the dl it stores."""
    pytest.importorskip("triton")
    import mhar_probe.kernels.route.autograd as kad
    import mhar_probe.kernels.route.fwd as rfwd
    from kernel_checks import poisoned_stack

    from mhar_probe.kernels.route.bwd_fold import BackwardLaunch

    traffic = _DoutTraffic(monkeypatch)
    fwd_launchers = {name: getattr(rfwd, name) for name in ("_FWD", "_FWD_SPLIT")}
    seen: list[BackwardLaunch] = []
    fwd_bytes, bwd_bytes, dl_loads = [], [], []

    def spy_fwd(name):
        def run(grid, args, consts, *rest):
            traffic.launch(fwd_launchers[name], grid, args, consts, rest, [args[8]], every_store=True)
            fwd_bytes.append(traffic.bytes.pop())
        return run

    def traced(kind, launcher, grid, args, consts, rest):
        wall, dall = (args[8], args[9]) if kind == "gather" else (args[6], args[7])
        traffic.launch(launcher, grid, args, consts, rest, [wall])
        bwd_bytes.append(traffic.bytes.pop())
        spans = (dall.data_ptr(), dall.data_ptr() + dall.numel() * 4)
        dl_loads.append(sum(int(((a >= spans[0]) & (a < spans[1])).sum()) for a, _ in traffic.loads))

    for name in fwd_launchers:
        monkeypatch.setattr(rfwd, name, spy_fwd(name))
    held_spy = _spy_backward(monkeypatch, kad, seen, traced)
    S, D, H, P = 6, 8, 2, 3
    stack = _mixed_chain(lambda cap, params: poisoned_stack(cap, params, stack_backward=stack_backward,
                                                             fold_calls=fold_calls, forward="plain", **_held_config(tmp_path, held)),
                         S, D, H, P)
    layout = [(c.n, c.j0, c.j1) for c in stack._calls]
    assert layout == model_layout(S) and seen == backward_plan(layout, S - 1, fold_calls if stack_backward == "fold" else 0)
    assert sum(dl_loads) == 0
    assert (held_spy.launches > 0) == held
    assert sum(fwd_bytes) == P * sum(weight_bytes(n, H) for n, _, _ in layout)
    per_pair = sum(4 * H * sum(1 for c in range(x.call, x.top1) for j in range(x.lo, x.hi) if layout[c][0] > j)
                   for x in seen)
    assert sum(bwd_bytes) == P * per_pair


# --------------------------------------- the appended sources' bytes: stored by the forward kernel
def _projected_chain(make_stack, S, D, H, P):
    """The model's chain of S calls under bf16 autocast on the CPU: an fp32 source 0, each later
    source a projection of the routed output (F.linear: bf16 under autocast), forward and backward
    run. Returns the stack."""
    from kernel_checks import DEV, EPS

    gen = torch.Generator().manual_seed(0)
    qs = [torch.randn(D, generator=gen).to(DEV).requires_grad_() for _ in range(S)]
    gs = [(1 + 0.1 * torch.randn(D, generator=gen)).to(DEV).requires_grad_() for _ in range(S)]
    ws = [(torch.randn(D, D, generator=gen) / D).to(DEV).requires_grad_() for _ in range(S)]
    stack = make_stack(S, list(zip(qs, gs)))
    outs = []
    with torch.autocast(DEV, dtype=torch.bfloat16):
        stack.append(torch.randn(1, P, D, generator=gen).to(DEV).requires_grad_())
        for s in range(S):
            out, _ = stack.route(qs[s], gs[s], H, EPS, len(stack))
            outs.append(out)
            if s < S - 1:
                stack.append(torch.nn.functional.linear(out, ws[s]))
    sum((o.float() * (i + 1)).sin().sum() for i, o in enumerate(outs)).backward()
    return stack


def test_appended_source_bytes_are_those_of_the_launches(monkeypatch):
    """A 6-call chain (d 8, H 2, fp32 source 0, bf16 projections appended): the bytes every forward
    launch loads from and stores into the sources (the buffer and the appended tensor) and its
    output, from the interpreter's loads and stores (`_DoutTraffic`, every store counted): each
    source row read once, the output stored once, and each appended row stored once into the
    buffer by the call that reads it first (APPEND), as `forward_bytes` counts."""
    pytest.importorskip("triton")
    import mhar_probe.kernels.route.fwd as rfwd
    from kernel_checks import poisoned_stack

    traffic = _DoutTraffic(monkeypatch)
    fwd_launchers = {name: getattr(rfwd, name) for name in ("_FWD", "_FWD_SPLIT")}
    kinds: list[int] = []

    def spy_fwd(name):
        def run(grid, args, consts, *rest):
            kinds.append(consts["APPEND"])
            # V, X where a source is appended, and the output (XDST's placeholder where nothing is
            # appended), every store counted; a call over source 0 alone reads it as V
            sources = [args[1], args[10]] if consts["APPEND"] else [args[1]]
            traffic.launch(fwd_launchers[name], grid, args, consts, rest, [args[7]] + sources * (args[13] > 1),
                           every_store=True)
        return run

    for name in fwd_launchers:
        monkeypatch.setattr(rfwd, name, spy_fwd(name))
    S, D, H, P = 6, 8, 2, 3
    widths = StackWidths(src0=4, src=2, out=4, dout=4)
    stack = _projected_chain(functools.partial(poisoned_stack, forward="plain"), S, D, H, P)
    layout = [(c.n, c.j0, c.j1) for c in stack._calls]
    assert layout == model_layout(S) and stack.buffer.dtype == torch.bfloat16
    assert kinds == [0] + [1] * (S - 1)
    loaded, stored = (sum(part) for part in zip(*traffic.parts))
    assert loaded == P * sum(widths.src * D * (n - 1) for n, _, _ in layout)
    appended = stored - P * widths.out * D * S  # less the outputs
    heads = [H] * S
    # ... and the rows' stored r: read for the n - 2 rows from the buffer, written for the appended
    # one (for row 0 by call 0)
    read_out_weights = P * sum(widths.src0 * D + widths.src * D * (n - 1) + widths.out * D + weight_bytes(n, H)
                               + 4 * max(n - 1, 1) for n, _, _ in layout)
    assert appended == forward_bytes(layout, D, heads, P, widths) - read_out_weights == P * widths.src * D * (S - 1)


@pytest.mark.parametrize("lookahead", [False, True])
def test_forward_bytes_are_those_of_the_launches(monkeypatch, lookahead):
    """A 7-call chain under bf16 autocast (d 8, H 2, an fp32 source 0 beside bf16 projections):
    every per-position byte each forward launch loads (distinct elements) and stores (every store:
    the logits, then the weights over them) in the sources, the appended tensor, the output, the
    weights and the lookahead's state, from the interpreter's own loads and stores, is
    `forward_bytes`; with the lookahead (KernelConfig(forward="lookahead")), calls 1, 3 and 5
    resume and read one row each (`lookahead_pairs`), and the forward moves fewer bytes. A row a
    resuming call read again, or a state it failed to read, would change the count."""
    pytest.importorskip("triton")
    import mhar_probe.kernels.route.fwd as rfwd
    from kernel_checks import poisoned_stack

    from mhar_probe.kernels.route.floors import lookahead_pairs

    traffic = _DoutTraffic(monkeypatch)
    launchers = {name: getattr(rfwd, name) for name in ("_FWD", "_FWD_SPLIT")}
    resumed: list[tuple[int, int]] = []

    def spy(name):
        def run(grid, args, consts, *rest):
            if consts["RESUME"]:
                resumed.append((args[13], args[20]))
            # every per-position tensor: V0, V, OUT, W, X, WN, SACC, SML, RN (not the queries, [d] each)
            per_position = [args[i] for i in (0, 1, 7, 8, 10, 17, 18, 19, 21)]
            traffic.launch(launchers[name], grid, args, consts, rest, list({t.data_ptr(): t for t in per_position}.values()),
                           every_store=True)
        return run

    for name in launchers:
        monkeypatch.setattr(rfwd, name, spy(name))
    S, D, H, P = 7, 8, 2, 3
    widths = StackWidths(src0=4, src=2, out=4, dout=4)
    changes = dict(forward="lookahead" if lookahead else "plain")
    stack = _projected_chain(lambda cap, params: poisoned_stack(cap, params, **changes), S, D, H, P)
    layout = [(c.n, c.j0, c.j1) for c in stack._calls]
    assert layout == model_layout(S)
    counted = sum(loaded + stored for loaded, stored in traffic.parts)
    assert counted == forward_bytes(layout, D, [H] * S, P, widths, lookahead=lookahead)
    if lookahead:  # (N, N0) of each resuming launch
        assert resumed == [(2, 1), (4, 3), (6, 5)] and lookahead_pairs(layout, [H] * S) == {1: 1, 3: 3, 5: 5}
    else:
        assert not resumed


def test_lookahead_moves_fewer_forward_bytes_at_the_paper_stacks():
    """At the paper's stacks the lookahead's state (4 d + 8 H written and read per pair) costs less
    than the rows it saves: the forward moves 77% / 66% / 62% of the plain forward's bytes at 100M /
    350M / 1B (25 / 49 / 73 calls, H = 8). A short stack of narrow rows can move more (the chain
    above: d 8, 7 calls)."""
    shares = []
    for calls, d, P in ((25, 512, 16384), (49, 1024, 4096), (73, 1280, 2048)):
        layout, heads = model_layout(calls), [8] * calls
        shares.append(forward_bytes(layout, d, heads, P, lookahead=True) / forward_bytes(layout, d, heads, P))
    assert [round(x, 2) for x in shares] == [0.77, 0.66, 0.62]
    small = model_layout(7)
    assert forward_bytes(small, 8, [2] * 7, 3, lookahead=True) > forward_bytes(small, 8, [2] * 7, 3)
