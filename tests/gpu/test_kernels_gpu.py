"""GPU checks of the Triton routing kernels (run on a GPU machine: pytest -m gpu tests/gpu).

* fp32: every output and gradient within 2.5e-6 max relative error (max|a-b| / max|b|) of the
  eager reference, per call and over a shared-stack chain;
* bf16: error against a float64 truth no larger than the eager bf16 path's;
* bitwise repeatability of outputs and every gradient.
Each test appends its measured numbers to $MHAR_GPU_RESULTS (JSON lines) when set.
"""

from __future__ import annotations

import functools
import json
import os

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from mhar_probe.kernels import KernelConfig, TritonSourceStack, route_triton  # noqa: E402
from mhar_probe.kernels.launch_tables import LaunchTables, card_name, tables_for  # noqa: E402
from mhar_probe.kernels.route.naive import route_reference_f64  # noqa: E402
from mhar_probe.model.routing import ListSourceStack, route_reference  # noqa: E402

from kernel_checks import StridedAppendStack  # noqa: E402

EPS = 1e-6
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def record(**row) -> None:
    path = os.environ.get("MHAR_GPU_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return float("inf")
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def rel_rms(a, b) -> float:
    """Relative norm-wise error ||a - b|| / ||b|| (float64)."""
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return float("inf")
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def inputs(N, B, T, D, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    src = torch.randn(N, B, T, D, device="cuda", generator=g) * \
        (0.5 + torch.rand(N, 1, 1, 1, device="cuda", generator=g))
    q = torch.randn(D, device="cuda", generator=g) * 2 / D**0.5 * 8
    w = 1 + 0.3 * torch.randn(D, device="cuda", generator=g)
    dout = torch.randn(B, T, D, device="cuda", generator=g)
    return src, q, w, dout


def grads(fn, leaves, dout, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in leaves]
    out, W = fn(*leaves, **kw)
    return [out.detach(), W.detach()] + list(torch.autograd.grad(out, leaves, dout.to(out.dtype)))


SHAPES = [(1, 512, 1), (9, 1280, 8), (33, 512, 32), (129, 1024, 16), (17, 768, 2), (5, 4096, 4)]


@pytest.mark.parametrize("N,D,H", SHAPES)
def test_fp32_per_call_matches_reference(N, D, H):
    src, q, w, dout = inputs(N, 2, 37, D, seed=N * D + H)
    t = grads(lambda s, a, b: route_triton(s, a, b, H, EPS), [src, q, w], dout)
    r = grads(lambda s, a, b: route_reference(s, a, b, H, EPS), [src, q, w], dout)
    truth = grads(lambda s, a, b: route_reference_f64(s, a, b, H, EPS),
                  [src.double(), q.double(), w.double()], dout.double())
    errs = [rel(a, b) for a, b in zip(t, r)]
    et = [rel(a, b) for a, b in zip(t, truth)]  # triton vs float64
    ee = [rel(a, b) for a, b in zip(r, truth)]  # eager fp32 vs float64 (fp32's own error)
    record(test="fp32_per_call", N=N, D=D, H=H, out=errs[0], W=errs[1], dsrc=errs[2], dq=errs[3],
           dg=errs[4], triton_vs_f64=et, eager_vs_f64=ee)
    # The paper's figure, against the float64 truth, on every output and gradient.
    assert max(et) <= 2.5e-6, (errs, et, ee)
    # Against eager fp32: 2.5e-6, except where eager fp32 is itself further than that from the
    # float64 truth (measured on an H200: dsrc at N=17, d=768, H=2 is 3.1e-6 off while triton is
    # 1.1e-6 off); no fp32 implementation can be closer to eager than eager's own error there,
    # so the bound becomes eager's measured error plus triton's.
    for a, e_t, e_e in zip(errs, et, ee):
        assert a <= max(2.5e-6, e_e + e_t), (errs, et, ee)


def test_fp32_delta_matches_reference():
    N, D, H = 9, 1280, 8
    src, q, w, dout = inputs(N, 2, 37, D, seed=5)
    partial = torch.randn(2, 37, D, device="cuda")
    gate = torch.tensor(0.37, device="cuda")
    t = grads(lambda s, a, b, p, g: route_triton(s, a, b, H, EPS, partial=p, gate=g),
              [src, q, w, partial, gate], dout)
    r = grads(lambda s, a, b, p, g: route_reference(s, a, b, H, EPS, partial=p, gate=g),
              [src, q, w, partial, gate], dout)
    errs = [rel(a, b) for a, b in zip(t, r)]
    # The gate's gradient is one scalar summed over every position and channel: its rounding
    # depends on the summation order in both paths, so it is judged against float64 truth:
    # triton's error no larger than eager fp32's (or 2.5e-6).
    r64 = grads(lambda s, a, b, p, g: route_reference_f64(s, a, b, H, EPS, partial=p, gate=g),
                [t_.double() for t_ in (src, q, w, partial, gate)], dout.double())
    gate_t, gate_e = rel(t[-1], r64[-1]), rel(r[-1], r64[-1])
    record(test="fp32_delta", errs=errs, gate_err_vs_f64=gate_t, eager_gate_err_vs_f64=gate_e)
    assert max(errs[:-1]) <= 2.5e-6, errs
    assert gate_t <= max(2.5e-6, gate_e), (gate_t, gate_e)


def chain(stack, x0, qs, gs, Ms, heads, hw=0):
    stack.append(x0)
    outs, ws = [], []
    for s, (q, g, H) in enumerate(zip(qs, gs, heads)):
        n = len(stack)
        if hw and s % 2 == 0:  # a [hw, d] query (collect runs): one read per row, as mhar_hw
            reads = [stack.route(q[k] if q.dim() == 2 else q * (k + 1), g, 1, EPS, n) for k in range(hw)]
            x = sum(o for o, _ in reads) / hw
            ws += [w for _, w in reads]
        else:
            x, wt = stack.route(q, g, H, EPS, n)
            ws.append(wt)
        outs.append(x)
        if s < len(qs) - 1:
            stack.append(torch.tanh(x @ Ms[s]).to(x.dtype))
    return sum((o.float() * (i + 1) / len(outs)).sin().sum() for i, o in enumerate(outs)), ws


def run_chain(make_stack, dtype, L=6, D=1280, heads=(8, 1, 4), hw=0, seed=0, collect=False):
    """collect: the stack is built with the sites' parameters (the 4-bytes/pair backward; else
    the stack_bwd kernels), and a head-aligned site owns a [hw, d] query, as the model's."""
    S = 2 * L + 1
    g = torch.Generator(device="cuda").manual_seed(seed)
    x0 = torch.randn(2, 37, D, device="cuda", generator=g)
    qs = [torch.randn(*((hw,) if collect and hw and s % 2 == 0 else ()), D, device="cuda", generator=g)
          * 2 / D**0.5 for s in range(S)]
    gs = [1 + 0.2 * torch.randn(D, device="cuda", generator=g) for _ in range(S)]
    Ms = [torch.randn(D, D, device="cuda", generator=g) / D**0.5 for _ in range(S - 1)]
    leaves = [t.to(dtype).requires_grad_() for t in [x0] + qs + gs]
    Ms = [m.to(dtype) for m in Ms]
    hs = [heads[s % len(heads)] for s in range(S)]
    stack = make_stack(S, params=list(zip(leaves[1:S + 1], leaves[S + 1:]))) if collect else make_stack(S)
    loss, ws = chain(stack, leaves[0], leaves[1:S + 1], leaves[S + 1:], Ms, hs, hw)
    return [loss.detach()] + [w.detach() for w in ws] + list(torch.autograd.grad(loss, leaves))


def _f64_stack(S, params=None):
    return ListSourceStack(S, lambda *a, **k: route_reference_f64(*a, **k))


def _eager_stack(S, params=None):
    return ListSourceStack(S, route_reference)


def _f64_stack_rounded(S, params=None):  # float64, with the normalised key rounded to bf16 as in the reference
    return ListSourceStack(S, lambda *a, **k: route_reference_f64(*a, round_to=torch.bfloat16, **k))


@pytest.mark.parametrize("hw", [0, 4])
def test_fp32_shared_stack_chain(hw, collect, triton_stack):
    """Chained sites amplify fp32 rounding, so the yardstick is fp32 itself: triton's error
    against float64 must stay within 1.5x of the eager fp32 path's (plus the raw gap recorded)."""
    t = run_chain(triton_stack, torch.float32, hw=hw, collect=collect)
    r = run_chain(_eager_stack, torch.float32, hw=hw, collect=collect)
    truth = run_chain(_f64_stack, torch.float64, hw=hw, collect=collect)
    errs = [rel(a, b) for a, b in zip(t, r)]
    et = [rel(a, b) for a, b in zip(t, truth)]
    ee = [rel(a, b) for a, b in zip(r, truth)]
    record(test="fp32_chain", hw=hw, collect=collect, triton_vs_eager_max=max(errs), triton_vs_f64_max=max(et),
           eager_vs_f64_max=max(ee), loss=errs[0])
    assert max(et) <= 1.5 * max(ee) + 1e-7, (max(et), max(ee))


def stack_reads(make_stack, dtype, L=6, D=1280, heads=(8, 1, 4), hw=4, seed=0, collect=False):
    """Routing alone, many calls over one stack: every source is a leaf (bf16 values, the same
    for every path) and every call's output gradient is given, so the only difference between
    two runs is the routing implementation (no chain of shared bf16 ops amplifying flips).
    Sibling reads of one site (hw > 0) share one query as mhar_hw's G reads share the norm."""
    S = 2 * L + 1
    g = torch.Generator(device="cuda").manual_seed(seed)
    xs = [torch.randn(2, 37, D, device="cuda", generator=g) * (0.5 + s / S) for s in range(S)]
    qs = [torch.randn(D, device="cuda", generator=g) * 2 / D**0.5 for _ in range(S)]
    gs = [1 + 0.2 * torch.randn(D, device="cuda", generator=g) for _ in range(S)]
    douts = [torch.randn(2, 37, D, device="cuda", generator=g) for _ in range(S)]
    if collect and hw:  # the G sibling reads as rows of one [G, d] query (equal rows: same function)
        qs = [q.expand(hw, D).contiguous() if s % 2 == 0 else q for s, q in enumerate(qs)]
    leaves = [t.bfloat16().to(dtype).requires_grad_() for t in xs + qs + gs]
    xs, qs, gs = leaves[:S], leaves[S:2 * S], leaves[2 * S:]
    stack = make_stack(S, params=list(zip(qs, gs))) if collect else make_stack(S)
    loss, ws = 0.0, []
    for s in range(S):
        stack.append(xs[s])
        if hw and s % 2 == 0:
            for k in range(hw):
                o, w = stack.route(qs[s][k] if qs[s].dim() == 2 else qs[s], gs[s], 1, EPS, s + 1)
                loss = loss + (o.double() * douts[s].double() * (k + 1)).sum()
                ws.append(w)
        else:
            o, w = stack.route(qs[s], gs[s], heads[s % len(heads)], EPS, s + 1)
            loss = loss + (o.double() * douts[s].double()).sum()
            ws.append(w)
    grads = list(torch.autograd.grad(loss, leaves))
    if collect and hw:  # back to one gradient per sibling-read query, as without collect
        grads = [gr.sum(0) if gr.dim() == 2 else gr for gr in grads]
    return [w.detach() for w in ws] + grads


@pytest.fixture(params=["stack_bwd", "fold", "fold3", "gather"], ids=["", "collect", "fold3", "gather"])
def stack_kind(request) -> str:
    """Each stack test with a stack built without the sites' parameters (the stack_bwd kernels)
    and once more built with them (the model's), under each backward of such a stack: the
    fold-block backward (kernels/route/bwd_fold.py, the default: blocks of 8 calls, one fold in a
    13-call chain; fold3: blocks of 3, four folds) and the gather backward (kernels/route/bwd_collect.py
    alone, stack_backward="gather")."""
    return request.param


@pytest.fixture
def collect(stack_kind) -> bool:
    """Whether the stack is built with the sites' parameters."""
    return stack_kind != "stack_bwd"


@pytest.fixture
def triton_stack(stack_kind):
    """TritonSourceStack with the KernelConfig of `stack_kind` (passed to each stack it builds)."""
    changes = dict(fold3=dict(fold_calls=3), gather=dict(stack_backward="gather")).get(stack_kind, {})
    return functools.partial(TritonSourceStack, config=KernelConfig(**changes))


def configured(**changes) -> functools.partial:
    """A TritonSourceStack factory that builds stacks with KernelConfig(**changes)."""
    return functools.partial(TritonSourceStack, config=KernelConfig(**changes))


def table_file(tmp_path, name: str, **rows) -> str:
    """A launch-table file holding `rows` (kind -> {key: value}), laid over the built-in table."""
    path = str(tmp_path / f"{name}.json")
    LaunchTables(**rows).dump(path)
    return path


def _strided_append_stack(capacity, params=None):
    """A TritonSourceStack whose appended sources are strided (kernel_checks.StridedAppendStack)."""
    return StridedAppendStack(TritonSourceStack(capacity, params=params))


@pytest.mark.parametrize("hw", [0, 4])
def test_bf16_stack_no_worse_than_eager(hw, collect, triton_stack):
    """The bf16 claim, isolated: on every routing weight and every gradient, triton's error
    against the float64 truth is no larger than eager bf16's, or within what bf16 itself costs
    (the reference function in float64 with its bf16 key rounding, result stored in bf16).

    Errors are norm-wise (relative RMS). The max-norm error at bf16 resolution is decided by a
    single rounding flip at the largest element (half an ulp is 0.2% of it, about the whole
    error here): measured on an H100, both paths' max errors sat 1.1-1.7x above that floor and
    traded places by up to 13% on dq/dg. Max errors are recorded too."""
    for seed in range(2):
        kw = dict(hw=hw, seed=seed, collect=collect)
        truth = stack_reads(_f64_stack, torch.float64, **kw)
        t = stack_reads(triton_stack, torch.bfloat16, **kw)
        e = stack_reads(_eager_stack, torch.bfloat16, **kw)
        keyround = stack_reads(_f64_stack_rounded, torch.float64, **kw)
        n_w = len(truth) - 3 * 13  # routing weights first, then the 3S gradients
        floor = [rel_rms(k.bfloat16() if i >= n_w else k, x) for i, (k, x) in enumerate(zip(keyround, truth))]
        et = [rel_rms(a, b) for a, b in zip(t, truth)]
        ee = [rel_rms(a, b) for a, b in zip(e, truth)]
        record(test="bf16_stack", hw=hw, seed=seed, collect=collect, triton=et, eager=ee, bf16_floor=floor,
               triton_max=[rel(a, b) for a, b in zip(t, truth)], eager_max=[rel(a, b) for a, b in zip(e, truth)])
        bad = [(i, a, b, f) for i, (a, b, f) in enumerate(zip(et, ee, floor)) if a > 1.01 * max(b, f)]
        assert not bad, bad


@pytest.mark.parametrize("hw", [0, 4])
def test_bf16_chain_no_worse_than_eager(hw, collect, triton_stack):
    """bf16 chain through a model-like stack of tanh(x @ M) sublayers: triton's worst gradient
    errors against a float64 truth are no larger than eager bf16's. Both paths share every bf16
    op outside routing, so per-gradient ratios scatter by +-20-40% from rounding flips the chain
    carries (most gradients tie exactly); the per-gradient claim is tested in isolation by
    `test_bf16_stack_no_worse_than_eager`, and the ratios are recorded here."""
    import math
    logs, worst = [], []
    for seed in range(4):
        kw = dict(hw=hw, seed=seed, collect=collect)
        truth = run_chain(_f64_stack, torch.float64, **kw)
        t = run_chain(triton_stack, torch.bfloat16, **kw)
        e = run_chain(_eager_stack, torch.bfloat16, **kw)
        et = [rel(a, b) for a, b in zip(t, truth)]
        ee = [rel(a, b) for a, b in zip(e, truth)]
        k = len(truth) - (1 + 2 * 13)  # index of the first gradient (x0, queries, norm weights)
        gt, ge = et[k:], ee[k:]
        pairs = [(a, b) for a, b in zip(gt, ge) if a > 0 and b > 0]
        logs += [math.log(a / b) for a, b in pairs]
        worst.append((max(gt), max(ge)))
        record(test="bf16_chain", hw=hw, seed=seed, collect=collect, triton_grad_err_max=max(gt),
               eager_grad_err_max=max(ge), triton_loss_err=et[0], eager_loss_err=ee[0],
               grad_err_ratio_geomean=math.exp(sum(math.log(a / b) for a, b in pairs) / len(pairs)),
               per_grad=list(zip(gt, ge)))
    ratio = math.exp(sum(logs) / len(logs))
    record(test="bf16_chain_pooled", hw=hw, collect=collect, grad_err_ratio_geomean=ratio, worst=worst)
    assert sum(a for a, _ in worst) <= sum(b for _, b in worst), worst


@pytest.mark.parametrize("N,D,H", [(9, 1280, 8), (33, 512, 1)])
def test_bf16_per_call_no_worse_than_eager(N, D, H):
    src, q, w, dout = inputs(N, 2, 37, D, seed=11)
    src, dout = src.bfloat16(), dout.bfloat16()
    truth = grads(lambda s, a, b: route_reference_f64(s, a, b, H, EPS), [src.double(), q.double(), w.double()], dout)
    t = grads(lambda s, a, b: route_triton(s, a, b, H, EPS), [src, q, w], dout)
    e = grads(lambda s, a, b: route_reference(s, a, b, H, EPS), [src, q, w], dout)
    et = [rel(a, b) for a, b in zip(t, truth)]
    ee = [rel(a, b) for a, b in zip(e, truth)]
    record(test="bf16_per_call", N=N, D=D, H=H, triton=et, eager=ee)
    assert et[0] <= ee[0] * 1.1 and et[1] <= ee[1] * 1.1, (et, ee)  # out, W: same roundings
    for a, b in zip(et[2:], ee[2:]):  # every gradient (both share the forward's roundings,
        assert a <= b * 1.01, (et, ee)  # so equal-to-5-digits errors are common: 1% slack)


def test_bitwise_repeatable(collect, triton_stack):
    a = run_chain(triton_stack, torch.bfloat16, hw=4, seed=3, collect=collect)
    b = run_chain(triton_stack, torch.bfloat16, hw=4, seed=3, collect=collect)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    src, q, w, dout = inputs(9, 2, 37, 4096, seed=1)
    leaves = [src.bfloat16(), q, w, torch.randn(2, 37, 4096, device="cuda").bfloat16(),
              torch.tensor(0.2, device="cuda")]
    f = lambda s, a_, b_, p, g: route_triton(s, a_, b_, 8, EPS, partial=p, gate=g)  # noqa: E731
    r1, r2 = grads(f, leaves, dout), grads(f, leaves, dout)
    assert all(torch.equal(x, y) for x, y in zip(r1, r2))
    record(test="bitwise", collect=collect, ok=True)


@pytest.mark.parametrize("L,D,heads,fold_calls", [(12, 512, (8,), 8), (12, 1280, (8, 1, 4), 5),
                                                  (24, 1024, (8,), 8), (36, 1280, (32, 8), 12)])
def test_fold_backward_at_model_depth(L, D, heads, fold_calls):
    """fp32 routing over 2L+1 calls (the model's 25 / 49 / 73, H up to 32, d/H = 40, 64, 160),
    every gradient given: the fold-block backward's error against float64 is within 1.5x of the
    gather backward's (plus 1e-7), and its weights and gradients within 1e-5 of the gather's."""
    truth = stack_reads(_f64_stack, torch.float64, L=L, D=D, heads=heads, hw=0, collect=True)
    fold = stack_reads(configured(fold_calls=fold_calls), torch.float32, L=L, D=D, heads=heads, hw=0, collect=True)
    gather = stack_reads(configured(stack_backward="gather"), torch.float32, L=L, D=D, heads=heads, hw=0,
                         collect=True)
    ef = [rel(a, b) for a, b in zip(fold, truth)]
    eg = [rel(a, b) for a, b in zip(gather, truth)]
    between = [rel(a, b) for a, b in zip(fold, gather)]
    record(test="fold_at_depth", L=L, D=D, heads=list(heads), fold_calls=fold_calls, fold_vs_f64_max=max(ef),
           gather_vs_f64_max=max(eg), fold_vs_gather_max=max(between))
    assert max(ef) <= 1.5 * max(eg) + 1e-7, (max(ef), max(eg))
    assert max(between) < 1e-5, max(between)


# fold rows (block_p, num_warps, prefetch, maxnreg, loads_first, sources): two sources per reader
# iteration and / or the next reader's w, shift and S' prefetched (launch_tables.py, `fold`)
@pytest.mark.parametrize("L,D,heads,row", [(12, 512, (8,), (1, 1, 1, 0, 1, 2)), (12, 1280, (8, 1, 4), (1, 2, 2, 0, 1, 2)),
                                           (24, 1024, (8,), (1, 2, 0, 0, 1, 2)), (36, 1280, (32, 8), (1, 1, 2, 0, 0, 1))])
def test_fold_rows_at_model_depth(tmp_path, L, D, heads, row):
    """The fold kernel under a fold row of its own (compiled, fp32, 2L+1 calls): every weight and
    gradient within 1e-5 of today's fold (the card's built-in rows: on the H100 and H200 their own
    fold rows, the held kernel's on the H100; elsewhere the gather's row), its error
    against float64 within 1.5x of today's (plus 1e-7), and bitwise repeatable."""
    # keyed by the fp32 douts' width (4): a card's own rows of that width would win over width 0
    path = table_file(tmp_path, "fold", fold={(D, h, max(heads), 4): row for h in set(heads)})
    ev, et, between, repeats = _variant_against(dict(L=L, D=D, heads=heads, hw=0, collect=True), configured(), path)
    record(test="fold_rows_at_depth", L=L, D=D, heads=list(heads), row=list(row), rows_vs_f64_max=ev,
           today_vs_f64_max=et, rows_vs_today_max=between)
    assert repeats
    assert ev <= 1.5 * et + 1e-7, (ev, et)
    assert between < 1e-5, between


def _variant_against(kw: dict, reference, path: str) -> tuple[float, float, float, bool]:
    """Stacks (`stack_reads(**kw)`, fp32) under the launch table at `path` against stacks made by
    `reference`: the largest errors of the variant and the reference against float64, of the
    variant against the reference, and whether the variant repeats bitwise."""
    truth = stack_reads(_f64_stack, torch.float64, **kw)
    ref = stack_reads(reference, torch.float32, **kw)
    var = stack_reads(configured(launch_table=path), torch.float32, **kw)
    again = stack_reads(configured(launch_table=path), torch.float32, **kw)
    return (max(rel(a, b) for a, b in zip(var, truth)), max(rel(a, b) for a, b in zip(ref, truth)),
            max(rel(a, b) for a, b in zip(var, ref)), all(torch.equal(x, y) for x, y in zip(var, again)))


# held rows (sources 0): stack_fold_held_kernel, one position a program holding the block's douts; prefetch 2:
# the source loop under Triton's pipeliner (the H100's 100M and 350M rows)
@pytest.mark.parametrize("L,D,heads,row", [(12, 512, (8,), (1, 4, 2, 0, 0, 0)), (24, 1024, (8,), (1, 8, 2, 128, 0, 0)),
                                           (24, 1024, (8,), (1, 8, 1, 128, 0, 0)), (36, 1280, (8,), (1, 8, 1, 0, 0, 0)),
                                           (36, 1280, (32,), (1, 8, 0, 0, 0, 0))])
def test_held_fold_at_model_depth(tmp_path, monkeypatch, L, D, heads, row):
    """The held fold kernel (a fold row with sources 0; compiled, fp32, 2L+1 calls, d/H = 64, 128,
    160 = 128 + 32 and 40 = 32 + 8): launched at every fold, every weight and gradient within 1e-5
    of the reader loop's (a row of sources 2), its error against float64 within 1.5x of the reader
    loop's (plus 1e-7), and bitwise repeatable."""
    import mhar_probe.kernels.route.autograd as kad

    launched = []
    held = kad.STACK_FOLD_HELD
    monkeypatch.setattr(kad, "STACK_FOLD_HELD", lambda *a: (launched.append(a[2]["CB"]), held(*a)))
    from mhar_probe.kernels.route.bwd_fold import backward_plan, model_layout

    # keyed by the fp32 douts' width (4): a card's own rows of that width would win over width 0
    reader = table_file(tmp_path, "reader", fold={(D, h, max(heads), 4): (1, 2, 2, 0, 1, 2) for h in heads})
    path = table_file(tmp_path, "held", fold={(D, h, max(heads), 4): row for h in heads})
    ev, el, between, repeats = _variant_against(dict(L=L, D=D, heads=heads, hw=0, collect=True),
                                                configured(launch_table=reader), path)
    record(test="held_fold_at_depth", L=L, D=D, heads=list(heads), row=list(row), held_launches=len(launched),
           held_vs_f64_max=ev, reader_vs_f64_max=el, held_vs_reader_max=between)
    folds = sum(x.kind == "fold" for x in backward_plan(model_layout(2 * L + 1), 2 * L, 8))
    assert set(launched) == {8} and len(launched) == 2 * folds  # every fold of the two held runs, none of the reader's
    assert repeats
    assert ev <= 1.5 * el + 1e-7, (ev, el)
    assert between < 1e-5, between


@pytest.mark.parametrize("L,D,heads", [(12, 512, (8,)), (24, 1024, (8,)), (36, 1280, (8,)), (12, 1280, (8, 8, 1, 4))])
def test_lookahead_forward_at_model_depth(monkeypatch, L, D, heads):
    """The forward's lookahead (KernelConfig(forward="lookahead"); compiled, fp32, 2L+1 calls, d/H
    = 64, 128, 160 = 128 + 32): every weight and gradient within 1e-5 of the plain forward's, its
    error against float64 within 1.5x of the plain forward's (plus 1e-7), bitwise repeatable, and
    the calls pair up (each second call of a pair resumes; with H changing, where the next call's H
    repeats its leader's: 8, 8, 1, 4 pairs each 8 with the 8 after it, never 1 or 4)."""
    from mhar_probe.kernels.route import fwd as route_fwd

    resumed = []
    for name in ("_FWD", "_FWD_SPLIT"):
        real = getattr(route_fwd, name)
        monkeypatch.setattr(route_fwd, name, lambda grid, args, consts, *rest, _real=real: (
            resumed.append(consts["RESUME"]), _real(grid, args, consts, *rest)))
    kw = dict(L=L, D=D, heads=heads, hw=0, collect=True)
    truth = stack_reads(_f64_stack, torch.float64, **kw)
    plain = stack_reads(configured(forward="plain"), torch.float32, **kw)
    resumed.clear()
    ahead = stack_reads(configured(forward="lookahead"), torch.float32, **kw)
    pairs = sum(resumed)
    again = stack_reads(configured(forward="lookahead"), torch.float32, **kw)
    ea = max(rel(a, b) for a, b in zip(ahead, truth))
    ep = max(rel(a, b) for a, b in zip(plain, truth))
    between = max(rel(a, b) for a, b in zip(ahead, plain))
    record(test="lookahead_at_depth", L=L, D=D, heads=list(heads), resumed=pairs, ahead_vs_f64_max=ea,
           plain_vs_f64_max=ep, ahead_vs_plain_max=between)
    expect, lead = 0, None  # a call resumes where its leader had its H, else it leads the next
    for c in range(2 * L + 1):
        h = heads[c % len(heads)]
        expect, lead = (expect + 1, None) if lead == h else (expect, h if c < 2 * L else None)
    assert pairs == expect and expect >= L // 2
    assert all(torch.equal(x, y) for x, y in zip(ahead, again))
    assert ea <= 1.5 * ep + 1e-7, (ea, ep)
    assert between < 1e-5, between


def test_direct_launch_taken_and_bitwise_equal_to_tritons_path(monkeypatch):
    """The direct launch (`kernels/launch.py`) must pick the very kernel Triton's own lookup picks:
    the chain and the delta call give bitwise the same outputs and gradients through both paths,
    and the direct path is really taken (the launch counters of each kernel family move; the
    chain's d = 1280 runs the two-tile kernels, the delta call's d = 4096 the single-tile ones)."""
    from mhar_probe.kernels.route.bwd import _DQDG, ROUTE_BWD_LOCAL, STACK_BWD, STACK_BWD_SPLIT
    from mhar_probe.kernels.route.fwd import _FWD, _FWD_SPLIT

    families = [(_FWD,), (_FWD_SPLIT,), (STACK_BWD_SPLIT,), (_DQDG,), (ROUTE_BWD_LOCAL,)]
    launchers = [_FWD, _FWD_SPLIT, STACK_BWD, STACK_BWD_SPLIT, _DQDG, ROUTE_BWD_LOCAL]
    assert all(k._direct_ok for k in launchers)

    def counts():
        return [sum(k.direct_launches for k in fam) for fam in families]

    src, q, w, dout = inputs(9, 2, 37, 4096, seed=1)
    leaves = [src.bfloat16(), q, w, torch.randn(2, 37, 4096, device="cuda").bfloat16(),
              torch.tensor(0.2, device="cuda")]
    f = lambda s, a_, b_, p, g: route_triton(s, a_, b_, 8, EPS, partial=p, gate=g)  # noqa: E731
    results = {}
    before_all = STACK_BWD.direct_launches
    for i, direct in enumerate((False, True, True)):  # run 2 fills the cache, run 3 launches from it
        for k in launchers:  # False: Triton's own launch path every time
            monkeypatch.setattr(k, "_direct_ok", direct)
        before = counts()
        results[direct] = (run_chain(TritonSourceStack, torch.bfloat16, hw=4, seed=3), grads(f, leaves, dout))
        after = counts()
        if i != 1:
            assert [a > b for a, b in zip(after, before)] == [direct] * len(families), (direct, before, after)
    assert STACK_BWD.direct_launches == before_all  # d = 1280 splits: the padded stack kernel is not used
    for a, b in zip(results[False], results[True]):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    record(test="direct_launch", ok=True)


@pytest.mark.parametrize("D", [1024, 1280])
def test_register_cap_is_bitwise_neutral(tmp_path, D):
    """A maxnreg launch option (a launch-table row may cap registers for occupancy) changes
    register allocation only: with the same block size and warps, the chain's outputs and
    gradients stay bitwise equal (d = 1024 runs the single-tile kernels, d = 1280 the two-tile
    ones); a cap low enough to spill still computes the same values. (Other warp counts may
    reduce in another order, so they are not expected to be bitwise equal.)"""
    base = run_chain(TritonSourceStack, torch.bfloat16, D=D, heads=(8,), seed=5)
    tables = tables_for(KernelConfig(), card_name(torch.device("cuda")))  # the rows `base` ran with
    _, bp, nw, _, stages = tables.fwd_config(D, 8, 2)  # a bf16 chain: 2 bytes per output
    sbp, snw, per_sm, _ = tables.stack_config(D, 8, 8)
    path = table_file(tmp_path, "capped", fwd={(D, 8, 2): (bp, nw, 64, stages)},
                      stack={(D, 8, 8): (sbp, snw, per_sm, 96)})
    capped = run_chain(configured(launch_table=path), torch.bfloat16, D=D, heads=(8,), seed=5)
    assert all(torch.equal(a, b) for a, b in zip(base, capped))
    record(test="register_cap", D=D, ok=True)


@pytest.mark.parametrize("D,H", [(512, 8), (1280, 8), (1024, 1)])
def test_gather_loads_first_matches_program_order(tmp_path, D, H):
    """A gather row's loads_first 1 issues each reader's q*g tiles and call-table entry with its
    dout, before the dl store: the same terms in the same order, so over an fp32 chain every
    output, weight and gradient agrees with the loads in program order within fp32 rounding
    (whether bitwise is recorded), at one and two warps per position, H = 8 and 1."""
    for warps, prefetch in ((1, False), (2, True)):
        runs = {}
        for first in (False, True):
            row = (1, warps, int(prefetch), 0, int(first))
            path = table_file(tmp_path, f"g{warps}{first}", gather={(D, H, H, b): row for b in (0, 4)})
            runs[first] = run_chain(configured(launch_table=path), torch.float32, D=D, heads=(H,), seed=31,
                                    collect=True)
        err = max(rel(a, b) for a, b in zip(runs[True], runs[False]))
        record(test="gather_loads_first", D=D, H=H, warps=warps, prefetch=prefetch, max_rel_vs_program_order=err,
               bitwise=all(torch.equal(a, b) for a, b in zip(runs[True], runs[False])))
        assert err <= 1e-6, (warps, prefetch, err)


def test_gather_aligned_tiles_match_compiler_layout(monkeypatch, tmp_path):
    """Heads of width 160 (d = 1280, H = 8) are two column tiles, 128 + 32. The gather loads the
    narrow tile in narrower vectors (VEC_B, `narrow_tile_vec`) so that both tiles hold each head
    in the same lanes; it adds the same terms as the compiler's own layout (VEC_B = 0, forced
    here), the narrow tile's columns in another order. In autocast's layout (fp32 source 0 and
    douts, bf16 buffer) over fixed sources, every fp32 gradient agrees with the compiler's own
    layout within fp32 rounding and every bf16 source gradient within its rounding, at the
    config in use (two warps, loads first) and at two warps in program order; the launches took
    the aligned path (VEC_B > 0) unless forced. One warp with aligned tiles (the 1B bf16 entry)
    is judged against float64 by the bf16 chain tests above."""
    import mhar_probe.kernels.route.autograd as kad

    S, D = 13, 1280
    g = torch.Generator(device="cuda").manual_seed(29)
    xs = [torch.randn(2, 37, D, device="cuda", generator=g).to(torch.float32 if s == 0 else torch.bfloat16)
          .requires_grad_() for s in range(S)]
    qs = [(torch.randn(D, device="cuda", generator=g) * 2 / D**0.5).requires_grad_() for _ in range(S)]
    gs = [(1 + 0.2 * torch.randn(D, device="cuda", generator=g)).requires_grad_() for _ in range(S)]
    rs = [torch.randn(2, 37, D, device="cuda", generator=g) for _ in range(S)]

    def grads(path) -> list[torch.Tensor]:
        stack = TritonSourceStack(S, params=list(zip(qs, gs)), config=KernelConfig(launch_table=path))
        loss = torch.zeros((), device="cuda")
        for s in range(S):
            stack.append(xs[s])
            out, _ = stack.route(qs[s], gs[s], 8, 1e-6)
            loss = loss + (out * rs[s]).sum()
        return list(torch.autograd.grad(loss, xs + qs + gs))

    runs = {}
    rule = kad.narrow_tile_vec
    for cfg in (None, (1, 2, 0, 0, 0)):
        path = None if cfg is None else table_file(tmp_path, "cfg", gather={(1280, 8, 8, b): cfg for b in (0, 2, 4)})
        for align in (False, True):
            monkeypatch.setattr(kad, "narrow_tile_vec", rule if align else (lambda *a: 0))
            kad._GATHER_PLANS.clear()
            runs[(cfg, align)] = grads(path)
            vecs = {plan[1]["VEC_B"] for plan in kad._GATHER_PLANS.values()}
            assert (min(vecs) > 0) if align else vecs == {0}, (cfg, align, vecs)
    for cfg in (None, (1, 2, 0, 0, 0)):
        got, base = runs[(cfg, True)], runs[(cfg, False)]
        errs = [rel(a, b) for a, b in zip(got, base)]
        bf16 = [e for e, t in zip(errs, got) if t.dtype == torch.bfloat16]
        fp32 = [e for e, t in zip(errs, got) if t.dtype == torch.float32]
        record(test="gather_aligned_tiles", cfg=str(cfg), max_rel_fp32=max(fp32), max_rel_bf16=max(bf16),
               bitwise=all(torch.equal(a, b) for a, b in zip(got, base)))
        assert max(fp32) <= 1e-6 and max(bf16) <= 2**-8, (cfg, max(fp32), max(bf16))


@pytest.mark.parametrize("D", [512, 1280])
def test_forward_pipeline_depth_is_neutral(tmp_path, D):
    """The forward's loop over source rows under Triton's pipeliner with 2, 3 or 4 stages (rows
    copied ahead into shared memory): the same rows in the same order, so over an fp32 chain every
    output, weight and gradient agrees within fp32 rounding (whether bitwise is recorded).
    d = 512 runs the single-tile kernel, d = 1280 the two-tile one."""
    runs = {}
    for stages in (2, 3, 4):
        path = table_file(tmp_path, f"s{stages}", fwd={(D, 8, b): (1, 1, 0, stages) for b in (0, 4)})
        runs[stages] = run_chain(configured(launch_table=path), torch.float32, D=D, heads=(8,), seed=11)
    for stages in (2, 4):
        err = max(rel(a, b) for a, b in zip(runs[stages], runs[3]))
        record(test="fwd_pipeline_depth", D=D, stages=stages, max_rel_vs_3=err,
               bitwise=all(torch.equal(a, b) for a, b in zip(runs[stages], runs[3])))
        assert err <= 1e-6, (stages, err)


@pytest.mark.parametrize("D", [512, 1280])
def test_gather_same_h_matches_general_path(monkeypatch, D):
    """The gather's constant-H path (every call has the same head count) forms the same terms in
    the same order as the general path that reads each reader's head count from the call table
    (what a stack with mixed head counts runs; forced here): over an fp32 chain every output and
    gradient agrees within fp32 rounding (whether bitwise is recorded)."""
    import mhar_probe.kernels.route.autograd as kad

    uniform = kad._uniform_heads
    runs = {}
    for same_h in (False, True):
        monkeypatch.setattr(kad, "_uniform_heads", uniform if same_h else (lambda calls: False))
        runs[same_h] = run_chain(TritonSourceStack, torch.float32, D=D, heads=(8,), seed=13, collect=True)
    err = max(rel(a, b) for a, b in zip(runs[True], runs[False]))
    record(test="gather_same_h", D=D, max_rel_vs_general=err,
           bitwise=all(torch.equal(a, b) for a, b in zip(runs[True], runs[False])))
    assert err <= 1e-6, err


@pytest.mark.parametrize("D,hw", [(512, 0), (1280, 0), (512, 4)])
def test_append_stored_by_forward_matches_the_copy(D, hw):
    """The forward kernel's store of each call's newest source (a contiguous append) against a
    copy at append (a strided one), one-tile heads at d = 512, two-tile 160 = 128 + 32 at
    d = 1280, mhar_hw-like sibling reads: the stored row is folded into the softmax right after
    row 0, the copied one in the rows' order, so fp32 chains agree within fp32 rounding."""
    runs = {}
    for copy in (False, True):
        runs[copy] = run_chain(_strided_append_stack if copy else TritonSourceStack, torch.float32, D=D, heads=(8,),
                               hw=hw, seed=19, collect=True)
    bitwise = all(torch.equal(a, b) for a, b in zip(runs[False], runs[True], strict=True))
    err = max(rel(a, b) for a, b in zip(runs[False], runs[True]))
    record(test="fwd_append", D=D, hw=hw, bitwise=bitwise, max_rel_vs_copy=err)
    assert err <= 1e-5


@pytest.mark.parametrize("D", [512, 1280])
def test_pair_e_split_dot_matches_ieee_dot(monkeypatch, D):
    """fp16 sources (keys rounded to fp16, which TF32 holds exactly) with fp32 query and key-norm
    weights: the query and key-norm gradients that pair_e's three-product TF32 dot forms agree
    with its IEEE fp32 dot (forced here) to fp32 rounding (they differ only in dl's bits below
    2^-22 and the order of the sums); the source gradients do not go through pair_e and stay
    bitwise equal."""
    import mhar_probe.kernels.route.autograd as kad

    S = 13
    g = torch.Generator(device="cuda").manual_seed(17)
    x0 = torch.randn(2, 37, D, device="cuda", generator=g).half()
    qs = [torch.randn(D, device="cuda", generator=g) * 2 / D**0.5 for _ in range(S)]
    gs = [1 + 0.2 * torch.randn(D, device="cuda", generator=g) for _ in range(S)]
    Ms = [(torch.randn(D, D, device="cuda", generator=g) / D**0.5).half() for _ in range(S - 1)]
    plan = kad.pair_e_plan

    def ieee_plan(*args, **kwargs):
        block_c, consts, warps = plan(*args, **kwargs)
        assert consts["SPLIT_DOT"]  # fp16 keys: the split dot is the default here
        return block_c, {**consts, "SPLIT_DOT": False}, warps

    def grads(split_dot):
        monkeypatch.setattr(kad, "pair_e_plan", plan if split_dot else ieee_plan)
        leaves = [t.clone().requires_grad_() for t in [x0] + qs + gs]
        stack = TritonSourceStack(S, params=list(zip(leaves[1:S + 1], leaves[S + 1:])))
        loss, _ = chain(stack, leaves[0], leaves[1:S + 1], leaves[S + 1:], Ms, [8] * S)
        return torch.autograd.grad(loss, leaves)

    split, ieee = grads(True), grads(False)
    err = max(rel(a, b) for a, b in zip(split[1:], ieee[1:]))
    record(test="pair_e_split_dot", D=D, max_rel_dq_dg_vs_ieee=err,
           source_grad_bitwise=torch.equal(split[0], ieee[0]))
    assert all(a.dtype == torch.float32 for a in split[1:])
    assert torch.equal(split[0], ieee[0])
    assert err <= 1e-5, err


@pytest.mark.parametrize("D", [512, 1280])
def test_pair_e_split_dot_over_the_bf16_buffer_matches_ieee_dot(monkeypatch, D):
    """Autocast's layout (fp32 source 0 beside a bf16 buffer, fp32 outputs: unrounded keys): the
    query and key-norm gradients that pair_e forms over the buffer with the three-product TF32
    dot, r_j moved into dl (v exact in TF32), agree with its IEEE fp32 dot (forced here) to fp32
    rounding; source 0's launch keeps the IEEE dot; the source gradients do not go through
    pair_e and stay bitwise equal."""
    import mhar_probe.kernels.route.autograd as kad

    S = 13
    g = torch.Generator(device="cuda").manual_seed(23)
    x0 = torch.randn(2, 37, D, device="cuda", generator=g)
    qs = [torch.randn(D, device="cuda", generator=g) * 2 / D**0.5 for _ in range(S)]
    gs = [1 + 0.2 * torch.randn(D, device="cuda", generator=g) for _ in range(S)]
    Ms = [torch.randn(D, D, device="cuda", generator=g) / D**0.5 for _ in range(S - 1)]
    plan = kad.pair_e_plan
    forms = []

    def split_plan(*args, **kwargs):
        block_c, consts, warps = plan(*args, **kwargs)
        forms.append((consts["SPLIT_DOT"], consts["R_IN_DL"]))
        return block_c, consts, warps

    def ieee_plan(*args, **kwargs):
        block_c, consts, warps = plan(*args, **kwargs)
        return block_c, {**consts, "SPLIT_DOT": False, "R_IN_DL": False}, warps

    def grads(split_dot):
        monkeypatch.setattr(kad, "pair_e_plan", split_plan if split_dot else ieee_plan)
        leaves = [t.clone().requires_grad_() for t in [x0] + qs + gs]
        stack = TritonSourceStack(S, params=list(zip(leaves[1:S + 1], leaves[S + 1:])))
        stack.append(leaves[0])
        outs = []
        for s in range(S):
            x, _ = stack.route(leaves[1 + s], leaves[1 + S + s], 8, EPS, len(stack))
            outs.append(x)
            if s < S - 1:
                stack.append(torch.tanh(x @ Ms[s]).to(torch.bfloat16))
        assert stack.buffer.dtype == torch.bfloat16 and outs[-1].dtype == torch.float32
        loss = sum((o * (i + 1) / S).sin().sum() for i, o in enumerate(outs))
        return torch.autograd.grad(loss, leaves)

    split, ieee = grads(True), grads(False)
    assert forms == [(False, False), (True, True)]  # row 0 (fp32), then the bf16 buffer
    err = max(rel(a, b) for a, b in zip(split[1:], ieee[1:]))
    record(test="pair_e_split_dot_bf16_buffer", D=D, max_rel_dq_dg_vs_ieee=err,
           source_grad_bitwise=torch.equal(split[0], ieee[0]))
    assert torch.equal(split[0], ieee[0])
    assert err <= 1e-5, err


@pytest.mark.parametrize("collect,changes", [(False, {}), (True, {}), (True, dict(fold_calls=2)),
                                             (True, dict(stack_backward="gather")), (True, dict(forward="lookahead"))],
                         ids=["", "collect", "fold2", "gather", "lookahead"])
def test_stack_fwd_bwd_replays_in_a_cuda_graph(collect, changes):
    """The routing autograd path is capturable (no host sync, host-built tables on the device
    once per layout): a chain's forward and backward captured with torch.cuda.graph, then replayed
    on new input values (written in place), gives bitwise the outputs and gradients of an eager
    run on those values (the kernels are deterministic), twice, with other pinned host memory
    allocated and written between replays (what a replay must not depend on). Stacks built with
    the sites' parameters under each backward: the fold-block one (7 calls: no fold at the
    default 8, three at fold2, whose accumulators and dout slots the graph's pool holds) and the
    gather backward."""
    _replay_check(collect, KernelConfig(**changes))


def _replay_check(collect: bool, config: KernelConfig) -> None:
    S, D = 7, 1280
    g = torch.Generator(device="cuda").manual_seed(41)
    x0 = torch.randn(2, 37, D, device="cuda", generator=g).requires_grad_()
    qs = [(torch.randn(D, device="cuda", generator=g) * 2 / D**0.5).requires_grad_() for _ in range(S)]
    gs = [(1 + 0.2 * torch.randn(D, device="cuda", generator=g)).requires_grad_() for _ in range(S)]
    Ms = [torch.randn(D, D, device="cuda", generator=g) / D**0.5 for _ in range(S - 1)]
    leaves = [x0, *qs, *gs]

    def step():
        stack = TritonSourceStack(S, params=list(zip(qs, gs)) if collect else None, config=config)
        loss, ws = chain(stack, x0, qs, gs, Ms, [8, 1, 4] * 3)
        return [loss.detach(), *(w.detach() for w in ws), *torch.autograd.grad(loss, leaves)]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()
    for seed in (43, 47):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        with torch.no_grad():
            x0.copy_(torch.randn(x0.shape, device="cuda", generator=gen))
            for q in qs:
                q.copy_(torch.randn(D, device="cuda", generator=gen) * 2 / D**0.5)
        junk = torch.arange(1 << 16, dtype=torch.int64).pin_memory()  # reuses freed pinned blocks
        junk.fill_(-1)
        graph.replay()
        torch.cuda.synchronize()
        eager = step()
        bitwise = all(torch.equal(a, b) for a, b in zip(static, eager, strict=True))
        record(test="cuda_graph_replay", collect=collect, seed=seed, bitwise=bitwise)
        assert bitwise


def test_stack_takes_the_cards_launch_rows():
    """A stack on this GPU looks its rows up under the card's name (launch_tables.json `devices`:
    the H200's fold rows there; any other card the default rows)."""
    name = torch.cuda.get_device_name()
    stack = TritonSourceStack(2, config=KernelConfig())
    stack.append(torch.randn(1, 4, 64, device="cuda"))
    assert stack.launch_tables is tables_for(KernelConfig(), name)
    record(test="cards_launch_rows", card=name, fold_rows=len(stack.launch_tables.fold))
