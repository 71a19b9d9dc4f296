"""The fold kernel's own launch rows (`fold` in launch_tables.py) and the variants they select,
on the CPU interpreter: two sources per iteration of the reader loop sharing each dout load
(`sources` 2), the next reader's w, shift and S' loaded with its dout (`prefetch` 2), and the held
kernel (`sources` 0: one position a program holding the block's douts, the loop over sources).

Every kernel output is poisoned (NaN) before the kernels write it; the truth is float64 autograd
through eq. (mh) over a Python list of sources (as tests/test_kernels_fold.py). Each backward's
dout-reading launches must still be the plan (`backward_plan`) whose bytes
`test_fold_reads_each_dout_about_once_per_block` counts: a variant may not bring back the
gather backward's one read of each dout per (call, source) pair."""

from __future__ import annotations

import json

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
from mhar_probe.errors import UserError  # noqa: E402
from mhar_probe.kernels.launch_tables import BUILTIN, LaunchTables, load_tables  # noqa: E402
from mhar_probe.kernels.route.bwd_fold import BackwardLaunch, backward_plan  # noqa: E402

from kernel_checks import EPS, poisoned, poisoned_stack, rel, spy_launcher  # noqa: E402
from kernel_checks import split_e  # noqa: E402,F401 (the fixture applies here)
from test_kernels_collect import _chain, _leaves, f64_stack  # noqa: E402
from test_kernels_fold import _wide  # noqa: E402


@pytest.fixture
def launches(monkeypatch):
    """(BackwardLaunch, the fold launches' SOURCES and PREFETCH) of every backward in the test."""
    seen: list[BackwardLaunch] = []
    fold_consts: list[tuple[int, int]] = []
    gather, fold, held = kad.STACK_GATHER, kad.STACK_FOLD, kad.STACK_FOLD_HELD

    def spy_gather(grid, args, consts, *rest):
        seen.append(BackwardLaunch("gather", args[19], args[20], args[22], args[23], consts["HAS_ACC"], False))
        gather(grid, args, consts, *rest)

    def spy_fold(grid, args, consts, *rest):
        seen.append(BackwardLaunch("fold", args[16], args[17], 0, args[18], not args[19], True))
        fold_consts.append((consts["SOURCES"], int(consts["PREFETCH"])))
        fold(grid, args, consts, *rest)

    def spy_held(grid, args, consts, *rest):  # the held kernel: (SOURCES 0, PREFETCH)
        seen.append(BackwardLaunch("fold", args[14], args[14] + consts["CB"], 0, args[15], not args[16], True))
        fold_consts.append((0, 2 if consts["STAGES"] > 1 else consts["PREFETCH"]))  # prefetch 2: pipelined
        held(grid, args, consts, *rest)

    monkeypatch.setattr(kad, "STACK_GATHER", spy_gather)
    monkeypatch.setattr(kad, "STACK_FOLD", spy_fold)
    monkeypatch.setattr(kad, "STACK_FOLD_HELD", spy_held)
    return seen, fold_consts


@pytest.fixture
def held_r_stored(monkeypatch, launches):
    """R_STORED of every held fold launch (1: r_j loaded from the forward's stored norms)."""
    return spy_launcher(monkeypatch, kad, "STACK_FOLD_HELD", lambda args, consts: consts["R_STORED"])


def _tables(path, D, heads, hw, fold_row, gather_row=None):
    """A poisoned KernelConfig whose table gives every call of `_chain` over `heads` (any storage
    width) `fold_row` for its folds and `gather_row` (None: the built-in rule) for its gathers."""
    hs = {1 if hw and s % 2 == 0 else h for s, h in enumerate(heads)}
    hm = max(hs)
    LaunchTables(fold={(D, h, hm, 0): tuple(fold_row) for h in hs},
                 gather={(D, h, hm, 0): tuple(gather_row) for h in hs} if gather_row else {}).dump(path)
    return poisoned(launch_table=str(path))


def _check_plan(seen, layout, fold_calls):
    """The launches are the plan's, and no dout is read by more than fold_calls + 1 of them."""
    assert seen == backward_plan(layout, len(layout) - 1, fold_calls)
    reads = [sum(x.call <= c < x.top1 for x in seen) for c in range(len(layout))]
    assert any(x.kind == "fold" for x in seen) and max(reads) <= fold_calls + 1, reads


# fold rows: (block_p, num_warps, prefetch, maxnreg, loads_first, sources)
@pytest.mark.parametrize("hw,D,head_cycle,fold_calls,fold_row", [
    (0, 12, (1, 2, 4), 2, (1, 1, 1, 0, 0, 2)),  # two sources, dout prefetch; folds over 1..3 sources
    (2, 12, (1, 2, 4), 3, (1, 1, 2, 0, 1, 2)),  # mhar_hw (H = 1 reads beside 2, 4); all of (b), (c)
    (0, 96, (32, 8, 32), 2, (2, 1, 0, 0, 1, 2)),  # H = 32, d/H = 3; two positions per block
    (0, 40, (8, 2, 8), 1, (2, 1, 2, 0, 0, 1)),  # d/H = 5 and 20; (b) alone, a fold after every call
    (0, 40, (8, 2, 8), 2, (1, 2, 0, 0, 0, 2)),  # odd P (3) and widths, no prefetch
])
def test_fold_rows_match_float64(tmp_path, launches, hw, D, head_cycle, fold_calls, fold_row):
    """fp32 model-shaped chain under a fold row of its own: every gradient against float64
    autograd, the fold launched with the row's SOURCES and PREFETCH, and the launches the plan's."""
    seen, consts = launches
    S = 6
    heads = [head_cycle[s % 3] for s in range(S)]
    leaves = _leaves(D, S, heads, hw, 3, torch.float32)
    stacks = []
    cfg = _tables(tmp_path / "t.json", D, heads, hw, fold_row)

    def make(cap, params):
        stacks.append(poisoned_stack(cap, params, cfg, fold_calls=fold_calls))
        return stacks[-1]

    loss, _, _ = _chain(make, leaves, S, heads)
    grads = torch.autograd.grad(loss, leaves)
    _check_plan(seen, [(c.n, c.j0, c.j1) for c in stacks[0]._calls], fold_calls)
    assert consts and set(consts) == {(fold_row[5], fold_row[2])}
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert a.dtype == leaves[i].dtype and rel(a, b) < 2e-5, i


def test_two_sources_per_iteration_is_bitwise_the_one_source_fold(tmp_path):
    """Each source's terms are summed in the same order whether it shares its reader loop with
    another source or not, so in the interpreter (every operation done as written) the gradients
    of sources 2 / prefetch 2 equal today's fold's bitwise; and each is bitwise repeatable."""
    S, D = 6, 20
    heads = [4, 2, 4, 1, 4, 2]

    def run(row):
        leaves = _leaves(D, S, heads, 0, 21, torch.float32)
        cfg = _tables(tmp_path / f"t{'_'.join(map(str, row))}.json", D, heads, 0, row)
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, cfg, poison=False, fold_calls=2), leaves, S, heads)
        return torch.autograd.grad(loss, leaves)

    today = run((1, 1, 1, 0, 0, 1))
    for row in ((1, 1, 1, 0, 0, 2), (1, 1, 2, 0, 1, 2), (1, 1, 2, 0, 0, 1)):
        got, again = run(row), run(row)
        assert all(torch.isfinite(a).all() for a in got)
        assert all(torch.equal(a, b) for a, b in zip(got, again)), row
        assert all(torch.equal(a, b) for a, b in zip(got, today)), row


def test_dense_folds_are_bitwise_the_masked_ones(tmp_path, monkeypatch):
    """DENSE (no masks and no call-table loads in the reader loop) is launched where every folded
    reader reads every folded source and the position blocks are whole, and the masked loop
    elsewhere; each source's terms are the same either way, so the gradients are bitwise equal.
    P = 3: rows of one position per block fold DENSE, rows of two do not (a part block)."""
    S, D = 6, 20
    heads = [4, 2, 4, 1, 4, 2]
    dense = spy_launcher(monkeypatch, kad, "STACK_FOLD", lambda args, consts: consts["DENSE"])

    def run(row):
        leaves = _leaves(D, S, heads, 0, 21, torch.float32)
        cfg = _tables(tmp_path / f"t{'_'.join(map(str, row))}.json", D, heads, 0, row)
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=2), leaves, S, heads)
        return torch.autograd.grad(loss, leaves)

    for dense_row, masked_row in (((1, 1, 0, 0, 0, 1), (2, 1, 0, 0, 0, 1)),
                                  ((1, 1, 2, 0, 1, 2), (2, 1, 2, 0, 1, 2))):
        dense.clear()
        want = run(masked_row)
        assert dense and not any(dense), masked_row
        dense.clear()
        got = run(dense_row)
        assert dense and all(dense), dense_row
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (dense_row, masked_row)


# held rows: (1, warps, prefetch 0 / 1 / 2 (pipelined), 0, 0, 0); one head count for every call (the model's)
@pytest.mark.parametrize("stored_r", [True, False])
@pytest.mark.parametrize("D,H,fold_calls,S,row", [
    (40, 4, 2, 6, (1, 2, 1, 0, 0, 0)),  # d/H = 10: two tiles, 8 + 2; three folds
    (96, 32, 2, 7, (1, 1, 0, 0, 0, 0)),  # H = 32, d/H = 3 (2 + 1), no prefetch
    (24, 2, 4, 9, (1, 4, 1, 0, 0, 0)),  # d/H = 12 (8 + 4), blocks of four readers
    (32, 4, 2, 6, (1, 8, 0, 0, 0, 0)),  # d/H = 8: one tile
    (40, 4, 2, 6, (1, 2, 2, 0, 0, 0)),  # prefetch 2: the source loop under Triton's pipeliner, 3 stages
])
def test_held_fold_matches_float64_and_repeats_bitwise(tmp_path, monkeypatch, launches, held_r_stored, D, H,
                                                      fold_calls, S, row, stored_r):
    """The held kernel (a fold row with sources 0) at every fold of a model-shaped chain, P = 3:
    every gradient against float64 autograd, bitwise repeatable, the launches the plan's (each
    dout still read by one fold and at most fold_calls gathers). stored_r: every fold loads r_j
    from the forward's stored norms (R_STORED); without (the forward stored none), every fold
    sums them itself."""
    seen, consts = launches
    if not stored_r:
        monkeypatch.setattr(kad._StackState, "_stored_r", lambda self, n, append, eps: (None, False))
    heads = [H] * S
    cfg = _tables(tmp_path / "t.json", D, heads, 0, row)

    def run():
        seen.clear()
        consts.clear()
        leaves = _leaves(D, S, heads, 0, 11, torch.float32)
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=fold_calls), leaves, S, heads)
        return leaves, torch.autograd.grad(loss, leaves)

    leaves, grads = run()
    layout = [(c + 1, c, c + 1) for c in range(S)]
    _check_plan(seen, layout, fold_calls)
    assert consts and set(consts) == {(0, row[2])}
    assert held_r_stored and set(held_r_stored) == {int(stored_r)}
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert rel(a, b) < 2e-5, i
    assert all(torch.equal(a, b) for a, b in zip(grads, run()[1]))


@pytest.mark.parametrize("head_cycle,fold_calls", [((4, 4, 4), 3), ((1, 2, 4), 2)])
def test_held_rows_fall_back_to_the_reader_loop(tmp_path, launches, head_cycle, fold_calls):
    """Where the held kernel does not serve a fold (blocks of 3 readers: not a power of two; calls
    of several head counts), a held row runs the reader loop with one source per iteration at the
    row's warps and prefetch; gradients against float64."""
    seen, consts = launches
    S, D = 6, 12
    heads = [head_cycle[s % 3] for s in range(S)]
    cfg = _tables(tmp_path / "t.json", D, heads, 0, (1, 2, 1, 0, 0, 0))
    leaves = _leaves(D, S, heads, 0, 13, torch.float32)
    loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=fold_calls), leaves, S, heads)
    grads = torch.autograd.grad(loss, leaves)
    _check_plan(seen, [(c + 1, c, c + 1) for c in range(S)], fold_calls)
    assert set(consts) == {(1, 1)}
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert rel(a, b) < 2e-5, i


@pytest.mark.slow
def test_held_fold_over_a_stack_of_129(tmp_path, launches):
    """129 sources, H = 32 and d/H = 3 (d = 96), blocks of two readers folded into the accumulators
    of 100+ sources by the held kernel: every gradient against float64, bitwise repeatable."""
    seen, consts = launches
    D, groups = 96, [100, 4, 5, 4, 4, 7]
    heads = [32] * len(groups)
    path = tmp_path / "t.json"
    LaunchTables(fold={(D, 32, 32, 0): (1, 2, 1, 0, 0, 0)}).dump(path)
    cfg = poisoned(launch_table=str(path))
    gen = torch.Generator().manual_seed(9)
    xs = [torch.randn(1, 2, D, generator=gen) for _ in range(sum(groups))]
    qs = [torch.randn(D, generator=gen) * 0.7 for _ in groups]
    gs = [1 + 0.2 * torch.randn(D, generator=gen) for _ in groups]
    n = len(xs)

    def run(dtype, make):
        leaves = [t.to(dtype).requires_grad_() for t in xs + qs + gs]
        loss, stack = _wide(make, leaves[:n], leaves[n:n + 6], leaves[n + 6:], heads, groups)
        return stack, torch.autograd.grad(loss, leaves)

    stack, grads = run(torch.float32, lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=2))
    assert stack._calls[-1].n == 129 and consts and set(consts) == {(0, 1)}
    _check_plan(seen, [(c.n, c.j0, c.j1) for c in stack._calls], 2)
    _, truth = run(torch.float64, f64_stack)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert rel(a, b) < 2e-5, i
    _, again = run(torch.float32, lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=2))
    assert all(torch.equal(a, b) for a, b in zip(grads, again))


@pytest.mark.slow
def test_two_sources_over_a_stack_of_129(tmp_path, launches):
    """129 sources (d = 24, H = 8 and 2: d/H = 3 and 12), folds over 100+ sources (odd and even
    counts) two at a time with the next reader's rows prefetched: every gradient against float64."""
    seen, consts = launches
    D = 24
    groups = [100, 4, 5, 4, 4, 7]  # folds at calls 4 and 2: over 116 and 105 sources
    heads = [8, 2, 8, 2, 8, 8]
    path = tmp_path / "t.json"
    LaunchTables(fold={(D, h, 8, 0): (1, 1, 2, 0, 1, 2) for h in (2, 8)}).dump(path)
    cfg = poisoned(launch_table=str(path))
    gen = torch.Generator().manual_seed(7)
    xs = [torch.randn(1, 2, D, generator=gen) for _ in range(sum(groups))]
    qs = [torch.randn(D, generator=gen) * 0.7 for _ in groups]
    gs = [1 + 0.2 * torch.randn(D, generator=gen) for _ in groups]
    leaves = [t.requires_grad_() for t in xs + qs + gs]
    n = len(xs)
    loss, stack = _wide(lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=2), leaves[:n],
                        leaves[n:n + 6], leaves[n + 6:], heads, groups)
    grads = torch.autograd.grad(loss, leaves)
    assert stack._calls[-1].n == 129 and set(consts) == {(2, 2)}
    _check_plan(seen, [(c.n, c.j0, c.j1) for c in stack._calls], 2)
    assert {x.hi % 2 for x in seen if x.kind == "fold"} == {0, 1}  # odd and even source counts
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_loss, _ = _wide(f64_stack, ref_leaves[:n], ref_leaves[n:n + 6], ref_leaves[n + 6:], heads, groups)
    truth = torch.autograd.grad(ref_loss, ref_leaves)
    for i, (a, b) in enumerate(zip(grads, truth)):
        assert rel(a, b) < 2e-5, i


def test_fold_rows_load_and_fall_back_to_the_gather_row(tmp_path):
    """A table with fold rows round-trips; one written before the kind existed still loads, and
    its fold runs under the gather's row with one source per iteration (as before); a fold row
    with a prefetch or source count the kernel has no variant for is refused with the file's name."""
    tables = LaunchTables(gather={(512, 8, 8, 4): (1, 2, 1, 0, 1)}, fold={(512, 8, 8, 4): (1, 1, 2, 0, 0, 2)})
    path = tmp_path / "new.json"
    tables.dump(path)
    back = load_tables(path)
    assert back.fold == tables.fold and back.fold_config(512, 8, 8, 4) == (1, 1, 2, None, False, 2)

    def as_fold(g):  # the gather's row as the fold's: one source per iteration
        return g[0], g[1], int(g[2]), g[3], g[4], 1

    assert back.fold_config(512, 8, 8, 2) == as_fold(back.gather_config(512, 8, 8, 2))  # no fold row for 2 bytes
    old = json.loads(path.read_text())
    del old["fold"], old["columns"]["fold"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    legacy = load_tables(tmp_path / "old.json")
    assert legacy.fold == {} and legacy.fold_config(512, 8, 8, 4) == (1, 2, 1, None, True, 1)
    builtin = load_tables(BUILTIN)
    for d in (512, 1024, 1280):
        for width in (2, 4):
            assert builtin.fold_config(d, 8, 8, width) == as_fold(builtin.gather_config(d, 8, 8, width))
    held = LaunchTables(fold={(1024, 8, 8, 4): (1, 8, 1, 128, 0, 0)})
    held.dump(tmp_path / "held.json")
    assert load_tables(tmp_path / "held.json").fold_config(1024, 8, 8, 4) == (1, 8, 1, 128, False, 0)
    for bad in ([512, 8, 8, 4, 1, 1, 1, 0, 0, 3], [512, 8, 8, 4, 1, 1, 3, 0, 0, 1], [512, 8, 8, 4, 1, 1, 1, 0, 0],
                [512, 8, 8, 4, 1, 1, 1, 0, 0, -1]):
        (tmp_path / "bad.json").write_text(json.dumps({"fold": [bad]}))
        with pytest.raises(UserError, match="bad.json"):
            load_tables(tmp_path / "bad.json")


def test_the_stack_launches_its_cards_fold_row(tmp_path, launches, monkeypatch):
    """A stack looks its rows up for the card its sources are on (`card_name` of the first
    source's device): with a table whose `devices` entry names that card, the folds run the
    card's row; on any other card (here: the CPU, no name) the default rows. Gradients against
    float64 either way."""
    seen, consts = launches
    S, D, fold_calls = 6, 12, 2
    heads = [(1, 2, 4)[s % 3] for s in range(S)]
    hm = max(heads)
    card_row, default_row = (1, 1, 2, 0, 1, 2), (1, 1, 0, 0, 0, 1)
    path = tmp_path / "t.json"
    LaunchTables(fold={(D, h, hm, 0): default_row for h in set(heads)},
                 devices={"FAKE CARD": LaunchTables(fold={(D, h, hm, 0): card_row for h in set(heads)})}).dump(path)
    cfg = poisoned(launch_table=str(path))
    ref_leaves = [t.detach().double().requires_grad_() for t in _leaves(D, S, heads, 0, 5, torch.float32)]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)

    def run() -> set[tuple[int, int]]:
        consts.clear()
        leaves = _leaves(D, S, heads, 0, 5, torch.float32)
        loss, _, _ = _chain(lambda cap, p: poisoned_stack(cap, p, cfg, fold_calls=fold_calls), leaves, S, heads)
        for i, (a, b) in enumerate(zip(torch.autograd.grad(loss, leaves), truth)):
            assert rel(a, b) < 2e-5, i
        return set(consts)

    assert run() == {(default_row[5], default_row[2])}
    monkeypatch.setattr(kad, "card_name", lambda device: "FAKE CARD" if device.type == "cpu" else None)
    assert run() == {(card_row[5], card_row[2])}
