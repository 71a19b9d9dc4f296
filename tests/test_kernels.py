"""Triton routing kernels on the CPU interpreter (TRITON_INTERPRET=1), tiny shapes, fp64 truth.

Every kernel output is poisoned (NaN-filled) before the kernel writes it, so an unwritten
element fails the comparison. bf16 is not exercised here (the interpreter has no bf16 math);
fp16 covers the rounding of the normalised key. GPU checks live in tests/gpu/.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
from mhar_probe.kernels.launch_tables import LaunchTables  # noqa: E402
from mhar_probe.kernels.route.naive import route_bwd_reference, route_reference_f64  # noqa: E402
from mhar_probe.model.routing import ListSourceStack, get_backend, route_reference  # noqa: E402

from kernel_checks import POISON, DEV, EPS, StridedAppendStack, poisoned_route, poisoned_stack, rel  # noqa: E402


def route64(*args, **kwargs):
    return route_reference_f64(*args, **kwargs)


def make(N, B, T, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(N, B, T, D, generator=g) * (1 + torch.rand(N, 1, 1, 1, generator=g))
    q = torch.randn(D, generator=g) * 0.5
    w = 1 + 0.3 * torch.randn(D, generator=g)
    dout = torch.randn(B, T, D, generator=g)
    return [t.to(DEV, dtype) for t in (src, q, w)] + [dout.to(DEV, dtype)]


@pytest.mark.parametrize("N,D,H,dtype", [(1, 8, 1, torch.float32), (5, 12, 2, torch.float32),
                                          (4, 16, 4, torch.float16), (3, 24, 8, torch.float32),
                                          (37, 12, 2, torch.float32), (32, 10, 2, torch.float16)])
def test_forward_matches_reference(N, D, H, dtype):
    """Against float64, W poisoned first; N = 37 and 32 turn the logits into weights in several
    W_ROWS-row tiles (37 = 2 * 16 + 5: a part-masked last tile; 32: whole tiles, two-tile heads)."""
    src, q, w, _ = make(N, 1, 3, D, dtype)
    out, W = poisoned_route(src, q, w, H, EPS)
    ref_out, ref_W = route64(src, q, w, H, round_to=dtype)
    same_dtype_out, _ = route_reference(src, q, w, H, EPS)
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    assert rel(W, ref_W) < tol * 10
    assert rel(out, ref_out) < tol
    assert rel(out, same_dtype_out) < tol
    assert W.shape == (N, 1, 3, H) and out.dtype == dtype


def test_head_split_rule():
    from mhar_probe.kernels.route.fwd import head_split

    assert head_split(160) == (128, 32, 32) and head_split(1280) == (1024, 256, 256)  # 1B: H=8, H=1
    assert head_split(12) == (8, 4, 4) and head_split(3) == (2, 1, 1)
    for K in range(1, 300):
        split, pad = head_split(K), 1 << (K - 1).bit_length()
        if split is None:  # a power of two, or two tiles would not save lanes
            k1 = 1 << (K.bit_length() - 1)
            assert K == k1 or k1 + (1 << (K - k1 - 1).bit_length()) >= pad
        else:
            k1, k2, bk2 = split
            assert k1 + k2 == K and k1 & (k1 - 1) == 0 and bk2 >= k2 and k1 + bk2 < pad


@pytest.mark.parametrize("D,H,dtype,delta", [(12, 2, torch.float32, True), (10, 1, torch.float32, False),
                                             (24, 8, torch.float16, False), (12, 1, torch.float16, True),
                                             (16, 4, torch.float32, True)])
def test_split_head_forward_matches_float64(monkeypatch, D, H, dtype, delta):
    """Head widths that are not powers of two run as two exact tiles (route_fwd_split_kernel),
    powers of two as one tile: outputs and weights match the float64 truth, and the two-tile
    kernel ran exactly where the head width splits (6 = 4 + 2, 10, 3 = 2 + 1, 12 = 8 + 4)."""
    from mhar_probe.kernels.route import fwd as route_fwd

    N = 5
    src, q, w, _ = make(N, 1, 3, D, dtype, seed=4)
    partial = torch.randn(1, 3, D, generator=torch.Generator().manual_seed(5)).to(DEV, dtype) if delta else None
    gate = torch.tensor(0.7, device=DEV) if delta else None
    used = []
    real = route_fwd._FWD_SPLIT
    monkeypatch.setattr(route_fwd, "_FWD_SPLIT", lambda *a: (used.append(1), real(*a)))
    out, W = poisoned_route(src, q, w, H, EPS, partial=partial, gate=gate)
    ref_out, ref_W = route64(src, q, w, H, partial=partial, gate=gate, round_to=dtype)
    tol = 1e-6 if dtype == torch.float32 else 2e-3
    assert rel(W, ref_W) < tol * 10 and rel(out, ref_out) < tol
    assert len(used) == (0 if (D // H) & (D // H - 1) == 0 else 1)


@pytest.mark.parametrize("order", ["rising", "falling", "random"])
@pytest.mark.parametrize("D,H", [(12, 2), (16, 4)])  # two-tile heads (6 = 4 + 2) and one tile
def test_forward_fold_and_lazy_rescale_match_float64(monkeypatch, order, D, H):
    """The forward's instruction cuts (the fold: logit r*<q*g, v> over a 16-bit buffer; the lazy
    rescale: running sums rescaled only where a running max grew) against the float64 truth, on
    source orders where every row raises the max (rising), only the first does (falling), or
    mixed. Three layouts: fp32 (no fold: the reference's product order), fp16 (the key is
    rounded: no fold) and autocast's (fp32 row 0 and output, 16-bit buffer: the fold applies)."""
    from mhar_probe.kernels.route import fwd as route_fwd

    N, T = 7, 5
    g = torch.Generator().manual_seed(11)
    q = torch.randn(D, generator=g) * 0.5
    w = 1 + 0.3 * torch.randn(D, generator=g)
    step = {"rising": torch.arange(N), "falling": torch.arange(N).flip(0),
            "random": torch.randperm(N, generator=g)}[order].float()
    # rows turning from -u towards u = q*w (angle pi -> 0), away from u along a direction
    # orthogonal to u in every head: the logit of each head rises with the step (the key norm
    # takes out the length); a little noise per position
    u = (q * w).view(H, -1)
    o = torch.randn(H, D // H, generator=g)
    o = o - (o * u).sum(-1, keepdim=True) / u.pow(2).sum(-1, keepdim=True) * u
    theta = torch.pi * (1 - step / (N - 1))  # [N]
    rows = torch.cos(theta)[:, None] * (u / u.norm()).reshape(D) + \
        torch.sin(theta)[:, None] * (o / o.norm()).reshape(D)  # [N, D]
    src = rows[:, None, :] + 0.01 * torch.randn(N, T, D, generator=g)  # [N, P, D]
    qq, ww = q.to(DEV), w.to(DEV)
    for layout in ("fp32", "fp16", "mixed"):
        buf = src.to(DEV, torch.float32 if layout == "fp32" else torch.float16)  # [N, P, D]
        v0 = src[0].to(DEV) if layout == "mixed" else buf[0]
        out_dtype = torch.float16 if layout == "fp16" else torch.float32
        truth = torch.cat([v0[None].float(), buf[1:].float()])[:, None]  # [N, 1, P, D]: promoted
        ref_out, ref_W = route64(truth, qq, ww, H, round_to=torch.float16 if layout == "fp16" else None)
        monkeypatch.setattr(route_fwd, "_FWD_PLANS", {})  # this layout's plans only (checked below)
        out = torch.full((T, D), float("nan"), dtype=out_dtype, device=DEV)
        W = torch.full((N, T, H), float("nan"), device=DEV)
        route_fwd.launch_route_fwd(buf, N, T, qq, ww, H, EPS, out, W, v0=v0)
        tol = 2e-3 if layout == "fp16" else 1e-6
        assert rel(W, ref_W[:, 0]) < tol * 10 and rel(out, ref_out[0]) < tol
        folded = {plan[2]["FOLD"] for plan in route_fwd._FWD_PLANS.values()}
        assert folded == {layout == "mixed"}, (layout, folded)
    if order == "rising":  # the test's premise: the running max grows on every row in every head
        normed = src / src.pow(2).mean(-1, keepdim=True).add(EPS).sqrt()
        lg = torch.einsum("nphk,hk->nph", normed.view(N, T, H, -1), u)  # [N, P, H]
        assert (lg.diff(dim=0) > 0).all()


def test_forward_bad_heads():
    src, q, w, _ = make(2, 1, 1, 12, torch.float32)
    with pytest.raises(ValueError, match="divisible"):
        poisoned_route(src, q, w, 5, EPS)


def test_stacks_past_32_bit_offsets_are_refused_before_any_kernel(monkeypatch):
    """The kernels address rows as row x (B*T*d) in 32-bit integers: a stack or a stacked tensor of
    more than 2^31 - 1 elements is refused with one message before anything is allocated or
    launched (a [1, 2, 4] source in a stack of 2^28 rows: 2^31 elements), and one element fewer is
    not."""
    src, q, w, _ = make(2, 1, 2, 4, torch.float32)
    stack = poisoned_stack(2**28)
    with pytest.raises(ValueError, match="32-bit offsets"):
        stack.append(src[0])
    poisoned_stack(2**28 - 1).append(src[0])  # 2^31 - 8 elements: taken
    monkeypatch.setattr(kad, "INT32_ELEMENTS", 15)  # the stacked form: [2, 1, 2, 4] is 16 elements
    with pytest.raises(ValueError, match="use a smaller microbatch"):
        poisoned_route(src, q, w, 2, EPS)


@pytest.mark.parametrize("delta", [False, True])
@pytest.mark.parametrize("N,D,H", [(3, 12, 2), (6, 10, 1)])
def test_per_call_backward(N, D, H, delta):
    src, q, w, dout = make(N, 1, 3, D, torch.float32, seed=N + D)
    partial = torch.randn(1, 3, D, device=DEV) if delta else None
    gate = torch.tensor(0.7, device=DEV) if delta else None
    leaves = [t.clone().requires_grad_() for t in (src, q, w)]
    extra = [t.clone().requires_grad_() for t in (partial, gate)] if delta else [None, None]
    out, W = poisoned_route(*leaves, H, EPS, partial=extra[0], gate=extra[1])
    grads = torch.autograd.grad(out, leaves + [e for e in extra if e is not None], dout)
    ref_leaves = [t.double().requires_grad_() for t in (src, q, w)]
    ref_extra = [t.double().requires_grad_() for t in (partial, gate)] if delta else [None, None]
    ref_out, _ = route64(*ref_leaves, H, EPS, partial=ref_extra[0], gate=ref_extra[1])
    ref = torch.autograd.grad(ref_out, ref_leaves + [e for e in ref_extra if e is not None],
                              dout.double())
    assert rel(out, ref_out) < 1e-6
    for a, b in zip(grads, ref):
        assert rel(a, b) < 1e-5


@pytest.mark.parametrize("rows", [7, 600])  # both block shapes of the fixed-order reduction
def test_dqdg_reduction(rows):
    from mhar_probe.kernels.route.bwd import launch_dqdg

    gen = torch.Generator().manual_seed(rows)
    epart = torch.randn(rows, 40, generator=gen).to(DEV)
    q, g = (torch.randn(40, generator=gen).to(DEV) for _ in range(2))
    dq, dg = torch.full_like(q, float("nan")), torch.full_like(g, float("nan"))
    launch_dqdg(epart, q, g, dq, dg)
    E = epart.double().sum(0)
    assert rel(dq, E * g.double()) < 1e-6 and rel(dg, E * q.double()) < 1e-6


def test_closed_form_reference_matches_autograd():
    src, q, w, dout = make(4, 1, 2, 12, torch.float64)
    leaves = [t.clone().requires_grad_() for t in (src, q, w)]
    out, W = route64(*leaves, 2, EPS)
    ref = torch.autograd.grad(out, leaves, dout)
    closed = route_bwd_reference(src, q, w, 2, EPS, W.detach(), dout)
    for a, b in zip(closed, ref):
        assert rel(a, b) < 1e-10


def _chain(backend_stack, sources0, queries, norms, mixers, heads, hw_groups=0):
    """A model-shaped chain: site s routes over the stack, a 'sublayer' makes source s+1."""
    stack = backend_stack
    stack.append(sources0)
    outs, weights = [], []
    for s, (q, g, H) in enumerate(zip(queries, norms, heads)):
        n = len(stack)
        if hw_groups and s % 2 == 0:  # mhar_hw-like site: G H=1 reads of the same prefix
            reads = [stack.route(q * (k + 1), g, 1, EPS, n) for k in range(hw_groups)]
            x = sum(o for o, _ in reads)
            weights += [w for _, w in reads]
        else:
            x, wts = stack.route(q, g, H, EPS, n)
            weights.append(wts)
        outs.append(x)
        if s < len(queries) - 1:
            stack.append(torch.tanh(x @ mixers[s]))
    loss = sum((o.float() * (i + 1)).sin().sum() for i, o in enumerate(outs))
    return loss, weights


def _chain_params(D, S, seed, mixers=None):
    """Source 0 [1, 3, D], S queries and key-norm weights, and `mixers` (default S - 1) [D, D]
    matrices for `_chain`, drawn in that order from one generator."""
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(1, 3, D, generator=gen)
    qs = [torch.randn(D, generator=gen) * 0.7 for _ in range(S)]
    gs = [1 + 0.2 * torch.randn(D, generator=gen) for _ in range(S)]
    Ms = [torch.randn(D, D, generator=gen) / D**0.5 for _ in range(S - 1 if mixers is None else mixers)]
    return x0, qs, gs, Ms


@pytest.mark.parametrize("hw,D,head_cycle", [
    (0, 12, (1, 2, 4)), (2, 12, (1, 2, 4)), (0, 40, (8, 2, 8)), (0, 16, (1, 4, 2))])
def test_shared_stack_chain(monkeypatch, hw, D, head_cycle):
    """A stack built without the sites' parameters (the stack_bwd kernels) against float64:
    d = 12 with H in (1, 2, 4): head widths 12, 6, 3 run as two exact tiles (8+4, 4+2, 2+1);
    d = 40 with H = 8 splits 5 = 4+1 (narrowest second tile, as d/H = 40 at H = 32 of d1280);
    d = 16 has power-of-two heads only (one tile)."""
    from mhar_probe.kernels.route import bwd as route_bwd

    used = []
    real = kad.STACK_BWD_SPLIT
    monkeypatch.setattr(kad, "STACK_BWD_SPLIT", lambda *a: (used.append(1), real(*a)))
    S = 2 * 3 + 1
    x0, qs, gs, Ms = _chain_params(D, S, seed=3)
    heads = [head_cycle[s % 3] for s in range(S)]

    def run(dtype, stack):
        leaves = [t.to(DEV, dtype).requires_grad_() for t in [x0] + qs + gs + Ms]
        loss, wts = _chain(stack, leaves[0], leaves[1:S + 1], leaves[S + 1:2 * S + 1],
                           leaves[2 * S + 1:], heads, hw)
        return loss, torch.autograd.grad(loss, leaves), wts

    loss, grads, wts = run(torch.float32, poisoned_stack(S))
    ref_loss, ref_grads, ref_wts = run(torch.float64, ListSourceStack(
        S, lambda *a, **k: route64(*a, **k)))
    assert abs(loss.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item())
    for a, b in zip(wts, ref_wts):
        assert rel(a, b) < 1e-5
    for a, b in zip(grads, ref_grads):
        assert rel(a, b) < 2e-5
    assert bool(used) == (D % 16 != 0) and route_bwd.STACK_BWD_SPLIT is real


class _AppendSpy:
    """Stands in for a forward kernel's @triton.jit object: records each launch's (N, APPEND)."""

    def __init__(self, fn, seen):
        self.fn, self.seen = fn, seen

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.seen.append((args[13], kwargs["APPEND"]))  # args[12:15]: P, N, eps
            return self.fn[grid](*args, **kwargs)
        return run


@pytest.mark.parametrize("D,H,hw,mixed", [(12, 2, 0, False), (16, 4, 2, False), (12, 2, 0, True)])
def test_append_stored_by_the_next_call_is_the_copied_append(monkeypatch, D, H, hw, mixed):
    """The forward kernel stores a call's newest source into the buffer (route_fwd APPEND)
    where a contiguous source is appended, and a strided one is copied at append: the same
    outputs, weights and gradients within fp32 rounding (the stored row is folded into the
    softmax right after row 0, the copied one in the rows' order), the same buffer contents, and
    every call over n >= 2 rows stored its last row itself (the first of an mhar_hw site's reads
    does; its siblings read the stored row). The buffer is NaN-poisoned, so a row the kernel
    failed to store fails the comparison. Both kernels (6 = 4 + 2 two-tile heads and one tile),
    fp32 and fp16 sources beside an fp32 source 0 (autocast's layout)."""
    from mhar_probe.kernels.route import fwd as route_fwd

    S = 2 * 2 + 1
    x0, qs, gs, Ms = _chain_params(D, S, seed=5)
    heads = [H] * S

    def run(copy):
        seen = []
        for launcher in (route_fwd._FWD, route_fwd._FWD_SPLIT):
            monkeypatch.setattr(launcher, "fn", _AppendSpy(launcher.fn, seen))
        leaves = [t.to(DEV).requires_grad_() for t in [x0] + qs + gs + Ms]
        inner = poisoned_stack(S)
        stack = StridedAppendStack(inner) if copy else inner
        if mixed:  # an fp32 source 0 and half-precision sublayer outputs, as bf16 under autocast
            stack.append(leaves[0])
            loss, wts = 0.0, []
            for s in range(S):
                out, w = stack.route(leaves[1 + s], leaves[S + 1 + s], H, EPS, len(stack))
                loss, wts = loss + (out.float() * (s + 1)).sin().sum(), wts + [w]
                if s < S - 1:
                    stack.append(torch.tanh(out.float() @ leaves[2 * S + 1 + s]).half())
        else:
            loss, wts = _chain(stack, leaves[0], leaves[1:S + 1], leaves[S + 1:2 * S + 1],
                               leaves[2 * S + 1:], heads, hw)
        buf = inner.stacked()
        for launcher in (route_fwd._FWD, route_fwd._FWD_SPLIT):
            monkeypatch.setattr(launcher, "fn", launcher.fn.fn)
        return [loss, *wts, *torch.autograd.grad(loss, leaves)], buf, seen

    folded, buf_fold, seen_fold = run(False)
    copied, buf_copy, seen_copy = run(True)
    for a, b in zip([*folded, buf_fold], [*copied, buf_copy], strict=True):
        assert a.dtype == b.dtype and rel(a, b) < 1e-6
    assert all(torch.isfinite(t).all() for t in [*folded, buf_fold])
    assert [a for _, a in seen_copy] == [False] * len(seen_copy)
    expect = []
    for s in range(S):
        reads = hw if (hw and s % 2 == 0) else 1
        expect += [(s + 1, s > 0)] + [(s + 1, False)] * (reads - 1)
    assert seen_fold == expect


def test_append_then_other_reads_store_the_row_first():
    """A source not yet stored by a call is copied in wherever something else reads it first:
    `stacked()` (the hook_sources path), a call over fewer rows, another append. A tensor
    modified in place between its append and the call that stores it is refused."""
    gen = torch.Generator().manual_seed(7)
    src = torch.randn(4, 2, 3, 8, generator=gen).to(DEV)
    q, g = torch.randn(8, generator=gen).to(DEV), torch.ones(8, device=DEV)
    stack = poisoned_stack(4)
    stack.append(src[0])
    stack.append(src[1].clone())
    assert torch.equal(stack.stacked(2), src[:2])  # read before any call stored row 1
    stack.append(src[2].clone())
    out, w = stack.route(q, g, 2, EPS, 2)  # fewer rows than held: row 2 is copied, not folded
    ref_out, ref_w = route64(src[:2], q, g, 2)
    assert rel(out, ref_out) < 1e-6 and rel(w, ref_w) < 1e-5
    transposed = src[3].transpose(0, 1).contiguous().transpose(0, 1)  # [2, 3, 8], not contiguous
    stack.append(transposed)
    out, w = stack.route(q, g, 2, EPS, 4)
    ref_out, ref_w = route64(src, q, g, 2)
    assert rel(out, ref_out) < 1e-6 and rel(w, ref_w) < 1e-5
    assert torch.equal(stack.stacked(), src)

    stack = poisoned_stack(3)
    stack.append(src[0])
    x = src[1].clone()
    stack.append(x)
    x.mul_(2)
    with pytest.raises(RuntimeError, match="source 1 was modified in place after it was appended"):
        stack.route(q, g, 2, EPS, 2)


def test_kernel_config_refuses_bad_values(tmp_path):
    """A KernelConfig field outside its choices, and a launch table file that is not one (a row
    of the wrong width, a forward row without the pipeliner's stages, not JSON), are refused
    with a message naming what is wrong; the UserError of a bad file is the CLI's one-line error."""
    from mhar_probe.errors import UserError
    from mhar_probe.kernels import KernelConfig
    from mhar_probe.kernels.launch_tables import load_tables, tables_for

    with pytest.raises(ValueError, match="choose from promoted, storage"):
        KernelConfig(routing_douts="bf16")
    for body, message in (('{"fwd": [[512, 8, 0, 1, 1, 0]]}', "expected 7 integers"),
                          ('{"fwd": [[512, 8, 0, 1, 1, 0, 0]]}', "has 0 stages"),
                          ('{"gather": [[512, 8, 8, 0, 1, 1, 0, 0]]}', "expected 9 integers"),
                          ("fwd = 1", "cannot read it")):
        path = tmp_path / "table.json"
        path.write_text(body)
        with pytest.raises(UserError, match=message):
            load_tables(path)
    good = tmp_path / "good.json"
    LaunchTables(fwd={(512, 8, 2): (2, 2, 0, 4)}).dump(good)
    tables = tables_for(KernelConfig(launch_table=good))
    assert tables.fwd_config(512, 8, 2)[1:] == (2, 2, None, 4)  # the file's row, over the built-in
    assert tables.fwd_config(512, 8, 4) == tables_for(KernelConfig()).fwd_config(512, 8, 4)  # the rest


def test_no_grad_path_saves_nothing_and_matches():
    src, q, w, _ = make(4, 1, 3, 12, torch.float32)
    stack = get_backend("triton", POISON).new_stack(4)  # the backend carries the configuration
    with torch.no_grad():
        for i in range(4):
            stack.append(src[i])
        out, W = stack.route(q, w, 2, EPS, 4)
    assert stack._w_flat is None and not stack._calls  # nothing recorded
    ref_out, ref_W = route64(src, q, w, 2)
    assert rel(out, ref_out) < 1e-6 and rel(W, ref_W) < 1e-5
    assert torch.equal(stack.stacked(4), src)


def test_double_backward_refused():
    src, q, w, dout = make(3, 1, 2, 8, torch.float32)
    src.requires_grad_()
    q.requires_grad_()
    out, _ = poisoned_route(src, q, w, 2, EPS)
    (g,) = torch.autograd.grad((out * q).sum(), src, create_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        g.sum().backward()


def test_interrupted_backward_then_reuse_fails_loudly():
    stack = poisoned_stack(4)
    x0 = torch.randn(1, 2, 8, device=DEV).requires_grad_()
    q = torch.randn(8, device=DEV).requires_grad_()
    g = torch.ones(8, device=DEV)
    stack.append(x0)
    a, _ = stack.route(q, g, 2, EPS)
    h = torch.tanh(a)
    h.register_hook(lambda grad: (_ for _ in ()).throw(ValueError("boom")))
    stack.append(h)
    b, _ = stack.route(q, g, 2, EPS)
    stack.append(torch.tanh(b))
    c, _ = stack.route(q, g, 2, EPS)
    with pytest.raises(ValueError, match="boom"):
        c.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="out-of-order"):
        a.sum().backward()


def test_checkpoint_recompute_refused():
    from torch.utils.checkpoint import checkpoint

    stack = poisoned_stack(3)
    x0 = torch.randn(1, 2, 8, device=DEV).requires_grad_()
    q = torch.randn(8, device=DEV).requires_grad_()
    g = torch.ones(8, device=DEV)
    stack.append(x0)

    def layer(x):
        out, _ = stack.route(q, g, 1, EPS)
        return torch.tanh(out + x)

    y = checkpoint(layer, x0, use_reentrant=False)
    with pytest.raises(RuntimeError, match="activation checkpointing"):
        y.sum().backward()


def test_delta_path_under_checkpoint():
    from torch.utils.checkpoint import checkpoint

    src, q, w, dout = make(3, 1, 3, 12, torch.float32, seed=7)
    partial = torch.randn(1, 3, 12, device=DEV)
    gate = torch.tensor(0.3, device=DEV)
    leaves = [t.clone().requires_grad_() for t in (src, q, w, partial, gate)]

    def f(s, qq, ww, p, gt):
        return poisoned_route(s, qq, ww, 2, EPS, partial=p, gate=gt)[0]

    grads = torch.autograd.grad((checkpoint(f, *leaves, use_reentrant=False) * dout).sum(), leaves)
    ref = torch.autograd.grad((f(*leaves) * dout).sum(), leaves)
    for a, b in zip(grads, ref):
        assert torch.equal(a, b)


def test_stack_pending_sources_gathered_once():
    """Several sources appended between calls, one of them not read by the next call: each
    gradient is gathered by the node of the first call after it (fused call+gather kernel)."""
    gen = torch.Generator().manual_seed(5)
    B, T, D = 1, 3, 12
    xs = [torch.randn(B, T, D, generator=gen) for _ in range(4)]
    qs = [torch.randn(D, generator=gen) for _ in range(3)]
    g = 1 + 0.2 * torch.randn(D, generator=gen)
    plan = [(2, 1, 2), (1, 3, 4), (1, 4, 1)]  # (sources appended before, n read, H)

    def run(dtype, stack):
        leaves = [t.to(DEV, dtype).requires_grad_() for t in xs + qs]
        it = iter(leaves[:4])
        loss = 0.0
        for (k, n, H), q in zip(plan, leaves[4:]):
            for _ in range(k):
                stack.append(next(it))
            out, _ = stack.route(q, g.to(DEV, dtype), H, EPS, n)
            loss = loss + (out.float() * torch.arange(1, D + 1, device=DEV)).sin().sum()
        return torch.autograd.grad(loss, leaves)

    got = run(torch.float32, poisoned_stack(4))
    ref = run(torch.float64, ListSourceStack(4, lambda *a, **k: route64(*a, **k)))
    for a, b in zip(got, ref):
        assert rel(a, b) < 2e-5


@pytest.mark.parametrize("first_k", [1, 2])
def test_mixed_dtype_stack_is_the_promoted_function(first_k):
    """Autocast's layout: an fp32 source 0 beside half-precision sublayer outputs. The stack
    keeps source 0 in its own fp32 row and the rest in a half-precision buffer (half the bytes),
    and must compute what the promoted stack computes (the same half values appended as fp32:
    an all-fp32 stack) up to fp32 rounding (the forward folds q*g over the half buffer, and
    stores each newest source itself), and what the eager reference computes on the
    torch.stack-promoted sources."""
    D, S = 12, 5
    x0, qs, gs, Ms = _chain_params(D, S, seed=11, mixers=S - 1 + first_k - 1)
    heads = [1, 2, 4, 2, 1]

    def run(stack, widen=False):
        leaves = [t.to(DEV).requires_grad_() for t in [x0] + qs + gs + Ms]
        x0_, q_, g_, M_ = leaves[0], leaves[1:S + 1], leaves[S + 1:2 * S + 1], leaves[2 * S + 1:]

        def append(x):  # x: half, as bf16 under autocast; widen: the promoted stack's fp32 copy
            stack.append(x.float() if widen else x)

        stack.append(x0_)  # fp32, as the embedding under autocast
        for k in range(1, first_k):  # more sources before the first call (gathered together)
            append(torch.tanh(x0_ @ M_[S - 2 + k]).half())
        loss, outs, wts = 0.0, [], []
        for s in range(S):
            out, w = stack.route(q_[s], g_[s], heads[s], EPS, len(stack))
            outs.append(out)
            wts.append(w)
            loss = loss + (out.float() * (s + 1)).sin().sum()
            if len(stack) < stack.capacity:
                append(torch.tanh(out.float() @ M_[s]).half())
        return outs, wts, torch.autograd.grad(loss, leaves)

    cap = S + first_k - 1
    split_stack = poisoned_stack(cap)
    split = run(split_stack)
    assert split_stack.row0.dtype == torch.float32 and split_stack.buffer.dtype == torch.float16
    promoted_stack = poisoned_stack(cap)
    promoted = run(promoted_stack, widen=True)
    assert promoted_stack.buffer.dtype == torch.float32
    for a, b in zip(split[0] + split[1] + list(split[2]), promoted[0] + promoted[1] + list(promoted[2])):
        assert a.dtype == b.dtype and rel(a, b) < 1e-5
    eager = run(ListSourceStack(cap, route_reference))
    assert all(o.dtype == torch.float32 for o in split[0])
    for a, b in zip(split[0], eager[0]):
        assert rel(a, b) < 1e-5
    for a, b in zip(split[2], eager[2]):  # eager rounds each call's share of a half source's
        assert rel(a, b) < 3e-3           # gradient to half, the kernel rounds their fp32 sum
    # the opt-in approximation (douts stored in the buffer's half precision): the forward is
    # untouched, the gradients move by about half-precision rounding, and they do move
    approx_stack = poisoned_stack(cap, routing_douts="storage")
    approx = run(approx_stack)
    assert approx_stack._dout_buf is None and approx_stack.config.routing_douts == "storage"
    assert all(torch.equal(a, b) for a, b in zip(approx[0] + approx[1], split[0] + split[1]))
    assert any(not torch.equal(a, b) for a, b in zip(approx[2], split[2]))
    for a, b in zip(approx[2], split[2]):
        assert rel(a, b) < 5e-3


# ---------------------------------------------------------------- `mhar bench routing` CLI
@pytest.mark.parametrize("argv,message", [
    (["--shapes", "7B"], "unknown shape(s) 7B"),
    (["--backends", "triton,cuda"], "unknown backend(s) cuda"),
    (["--sweep-kernels", "fwd,scatter"], "choose from fwd, stack, gather, fold, pair_e"),
])
def test_bench_routing_refuses_bad_input(argv, message, capsys):
    from mhar_probe.cli import main

    assert main(["bench", "routing", *argv]) == 2
    assert message in capsys.readouterr().err


def test_bench_routing_sweeps_the_fold_rows(tmp_path, monkeypatch):
    """`--sweep-kernels gather,fold` is taken; every fold candidate is a row the table loader
    accepts, stored under the key the fold kernel's lookup asks for (so the tuned file drives the
    fold), the kernel's row variants (two sources per iteration, prefetch 0-2) all among them."""
    from mhar_probe.bench.routing import SWEEP_PREFIX, check_arguments, sweep_candidates, sweep_key
    from mhar_probe.cli.bench import routing_parser
    from mhar_probe.errors import UserError
    from mhar_probe.kernels.launch_tables import LaunchTables, load_tables

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # check the arguments alone
    check_arguments(routing_parser().parse_args(["--sweep", "1B-train", "--sweep-kernels", "gather,fold"]))
    assert SWEEP_PREFIX["fold"] == "stack_fold"
    rows = sweep_candidates("fold")
    assert len(rows) == len(set(rows)) and {(r[2], r[5]) for r in rows} == {(p, s) for p in (0, 1, 2) for s in (1, 2)}
    key = sweep_key("fold", 1280, 8, 4)
    assert sweep_key("gather", 1280, 8, 4) == key
    for row in rows:
        path = tmp_path / "tuned.json"
        LaunchTables(fold={key: row}).dump(path)
        bp, warps, pre, cap, first, sources = row
        assert load_tables(path).fold_config(1280, 8, 8, 4) == (bp, warps, pre, cap or None, bool(first), sources)
    assert sweep_candidates("fold", "[[1, 2, 2, 0, 1, 2]]") == [(1, 2, 2, 0, 1, 2)]
    with pytest.raises(UserError, match="block_p, num_warps, prefetch, maxnreg, loads_first, sources"):
        sweep_candidates("fold", "[[1, 2, 2, 0, 1]]")


def test_bench_routing_module_entry_point_gives_the_same_message():
    """`python -m mhar_probe.cli bench routing` (what the device scripts run) refuses bad input with
    the CLI's one-line message and exit status 2, not a traceback."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "mhar_probe.cli", "bench", "routing", "--backends", "triton,cuda"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert "unknown backend(s) cuda" in res.stderr and "Traceback" not in res.stderr


def test_bench_routing_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    from mhar_probe.cli import main

    assert main(["bench", "routing", "--shapes", "100M"]) == 2
    assert "CUDA GPU" in capsys.readouterr().err


def test_direct_launch_key_is_at_least_as_fine_as_tritons_specialisation():
    """`launch.Launcher` caches compiled kernels under its own key (`spec_key`), so two
    arguments with the same key must get the same specialisation from Triton's own binder
    (`native_specialize_impl`); otherwise a cached launch would run a kernel compiled for other
    assumptions (e.g. divisibility by 16, or an argument equal to 1 folded into a constant)."""
    jit = pytest.importorskip("triton.runtime.jit")
    native = getattr(jit, "native_specialize_impl", None)
    if native is None:
        pytest.skip("this Triton has no native_specialize_impl")
    from triton.backends.compiler import BaseBackend

    from mhar_probe.kernels.launch import spec_key

    buf = torch.zeros(64, dtype=torch.float32)
    half = torch.zeros(64, dtype=torch.float16)
    args = [0, 1, 2, 15, 16, 17, 32, 48, -1, -16, 2**31 - 16, 2**31 - 1, 2**31, 2**32, -2**31, -2**31 - 1,
            2**63 - 1, 2**63, 0.0, 1.0, 1.5, True, False, None,
            buf, buf[1:], buf[4:], buf[2:], half, half[1:], half[8:], half[4:], buf.double(), buf.int()]
    key = {}
    for a in args:
        k = spec_key((a,))
        triton_spec = native(BaseBackend, a, False, True, True)
        assert key.setdefault(k, triton_spec) == triton_spec, (a, k, key[k], triton_spec)
    assert len(key) >= 12  # the keys do separate what Triton separates (not one key for all)


class _RecordingKernel:
    """Stands in for a @triton.jit object: records the launch options, then launches the real one."""

    def __init__(self, fn, seen, keys=("num_warps", "maxnreg")):
        self.fn, self.seen, self.keys = fn, seen, keys

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.seen.append({k: kwargs.get(k) for k in self.keys})
            return self.fn[grid](*args, **kwargs)
        return run


def test_launch_table_file_reaches_the_launch(monkeypatch, tmp_path):
    """Rows of a launch-table file (KernelConfig.launch_table) reach Triton's launch: the
    forward's warps, register cap (`maxnreg`) and pipeliner stages, the stack kernel's warps and
    cap. They leave the function unchanged (the interpreter ignores caps and stages: the values
    are checked against float64). A stack built without the file runs the built-in rows."""
    from mhar_probe.kernels.route import bwd as route_bwd, fwd as route_fwd

    D, H = 16, 4
    table = tmp_path / "tuned.json"
    LaunchTables(fwd={(D, H, 0): (1, 1, 64, 4)}, stack={(D, H, H): (1, 1, 16, 96)}).dump(table)
    seen_f, seen_b = [], []
    monkeypatch.setattr(route_fwd._FWD, "fn", _RecordingKernel(route_fwd._FWD.fn, seen_f,
                                                                ("num_warps", "maxnreg", "STAGES")))
    monkeypatch.setattr(route_bwd.STACK_BWD, "fn", _RecordingKernel(route_bwd.STACK_BWD.fn, seen_b))
    src, q, w, dout = make(3, 1, 3, D, torch.float32)
    leaves = [t.clone().requires_grad_() for t in (src, q, w)]
    stack = poisoned_stack(3, launch_table=table)
    for i in range(3):
        stack.append(leaves[0][i])
    out, _ = stack.route(leaves[1], leaves[2], H, EPS, 3)
    got = torch.autograd.grad(out, leaves, dout)
    leaves64 = [t.double().requires_grad_() for t in (src, q, w)]
    ref_out, _ = route64(*leaves64, H)
    ref = torch.autograd.grad(ref_out, leaves64, dout.double())
    assert rel(out, ref_out) < 1e-6
    assert all(rel(a, b) < 1e-5 for a, b in zip(got, ref))
    assert seen_f == [{"num_warps": 1, "maxnreg": 64, "STAGES": 4}]
    assert seen_b == [{"num_warps": 1, "maxnreg": 96}]
    seen_f.clear()
    plain = poisoned_stack(1)  # no file: the built-in rows (the heuristic here)
    plain.append(leaves[0][0])
    plain.route(leaves[1], leaves[2], H, EPS, 1)
    assert seen_f == [{"num_warps": 1, "maxnreg": None, "STAGES": 3}]
