"""Routing weights recomputed in the backward (`KernelConfig(stack_weights="logits")`, issue 55's
second lever) on the CPU interpreter, beside the stored weights they replace.

Every kernel output is poisoned (NaN) before the kernels write it. The truth is float64 autograd
through eq. (mh) over a Python list of sources. The forward of the logits design stores no weights,
only each call's softmax max and normaliser, and the gather and fold recompute every w_{c,j} in the
forward's order of operations, so with one head count per stack the gradients are bitwise the
stored design's; with several (mhar_hw: per-head sums regrouped) within fp32 rounding of them. Its
bytes: tests/test_kernel_floors.py; bitwise repeats and 129 sources: tests/test_kernels_fold.py."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
from mhar_probe.kernels import KernelConfig  # noqa: E402
from mhar_probe.kernels.route.bwd_fold import backward_plan  # noqa: E402

from kernel_checks import poisoned, rel  # noqa: E402
from kernel_checks import split_e  # noqa: E402,F401 (the fixture applies here)
from test_kernels_collect import _chain, _leaves, f64_stack  # noqa: E402
from test_kernels_douts import _config, _grads, launches  # noqa: E402,F401 (the fixture applies here)


def _weights_cfg(path, D, heads, hw, fold_calls, gather_row, fold_row, weights, douts="slots"):
    """`_config` (the launch rows of test_kernels_douts) with `weights` (stack_weights)."""
    import dataclasses

    cfg = _config(path, D, heads, hw, fold_calls, gather_row, fold_row, douts)
    return dataclasses.replace(cfg, stack_weights=weights)


@pytest.fixture
def forms(monkeypatch):
    """The FORM constexpr of every dout-reading launch (0: stored weights read)."""
    seen: list[int] = []
    gather, fold = kad.STACK_GATHER, kad.STACK_FOLD

    def spy(launcher):
        def run(grid, args, consts, *rest):
            seen.append(consts.get("FORM", 0))
            launcher(grid, args, consts, *rest)
        return run

    monkeypatch.setattr(kad, "STACK_GATHER", spy(gather))
    monkeypatch.setattr(kad, "STACK_FOLD", spy(fold))
    return seen


# gather rows: (block_p, num_warps, prefetch, maxnreg, loads_first); fold rows: the same and sources
@pytest.mark.parametrize("hw,D,head_cycle,fold_calls,gather_row,fold_row,douts", [
    (0, 96, (32, 32, 32), 2, (2, 1, 1, 0, 1), (2, 1, 0, 0, 1, 2), "slots"),  # H = 32, d/H = 3; two sources a fold loop
    (0, 40, (8, 8, 8), 1, (2, 1, 0, 0, 0), (1, 1, 2, 0, 0, 1), "in_place"),  # d/H = 5; w/shift/S' prefetch; in place
    pytest.param(0, 40, (8, 8, 8), 0, (1, 1, 1, 0, 1), None, "slots", marks=pytest.mark.slow),  # the gather backward
])
def test_recomputed_weights_match_float64_and_the_stored_bitwise(tmp_path, forms, hw, D, head_cycle, fold_calls,
                                                                  gather_row, fold_row, douts):
    """fp32 model-shaped chain (the unfolded logit form, FORM 2): every gradient against float64
    autograd and bitwise the stored weights' design; no launch of the logits design reads W."""
    S = 6
    heads = [head_cycle[s % 3] for s in range(S)]
    leaves = _leaves(D, S, heads, hw, 3, torch.float32)

    def cfg(weights):
        return _weights_cfg(tmp_path / f"{weights}.json", D, heads, hw, fold_calls, gather_row, fold_row,
                            weights, douts)

    stacks = []
    logits = _grads(cfg("logits"), leaves, S, heads, stacks, need_weights=False)
    assert stacks[0]._w_flat is None and all(c.w is None for c in stacks[0]._calls)  # no weights stored
    assert set(forms) == {2}
    forms.clear()
    stored = _grads(cfg("stored"), leaves, S, heads)
    assert set(forms) == {0}
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b, t) in enumerate(zip(logits, stored, truth)):
        assert a.dtype == leaves[i].dtype and rel(a, t) < 2e-5, i
        assert torch.equal(a, b), i


@pytest.mark.parametrize("dtype,half_sources,form,gather_row,fold_row", [
    (torch.float32, True, 1, None, None),
    (torch.float32, True, 1, (2, 1, 1, 0, 0), (1, 1, 2, 0, 0, 2)),  # q*g loaded after the dl store; w prefetched
    (torch.float16, False, 2, None, None)])
def test_recomputed_weights_in_mixed_and_half_chains_are_the_stored_bitwise(tmp_path, forms, dtype, half_sources,
                                                                             form, gather_row, fold_row):
    """Autocast's layout (fp32 source 0 beside fp16 sublayer outputs: the forward's folded logit
    r <q*g, v>, FORM 1; under the built-in rows, and under rows that load q*g after the dl store
    and prefetch the next reader's weight in the fold, two sources at a time) and an fp16 chain
    (keys rounded to fp16 before and after g: FORM 2, RMODE 2, RK2), one head count per stack:
    bitwise the stored design's gradients."""
    S, D = 5, 16
    heads = [4] * S
    leaves = _leaves(D, S, heads, 0, 11, dtype)
    got = []
    for weights, launched in (("logits", {form}), ("stored", {0})):
        forms.clear()
        cfg = _weights_cfg(tmp_path / f"{weights}.json", D, heads, 0, 2, gather_row, fold_row, weights)
        got.append(_grads(cfg, leaves, S, heads, half_sources=half_sources, need_weights=False))
        assert set(forms) == launched
    for i, (a, b) in enumerate(zip(*got)):
        assert torch.isfinite(a).all() and torch.equal(a, b), i


def test_mixed_head_counts_are_within_fp32_rounding(forms):
    """mhar_hw (single-head reads beside H = 2 and 4: the logits' per-head sums regrouped across
    sub-heads, another order than the forward's): within fp32 rounding of float64 and of the
    stored design."""
    S, D = 6, 12
    heads = [2, 4, 2, 4, 2, 4]
    leaves = _leaves(D, S, heads, 2, 5, torch.float32)
    logits = _grads(poisoned(stack_weights="logits", fold_calls=2), leaves, S, heads, need_weights=False)
    assert set(forms) == {2}
    stored = _grads(poisoned(fold_calls=2), leaves, S, heads)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    truth = torch.autograd.grad(_chain(f64_stack, ref_leaves, S, heads)[0], ref_leaves)
    for i, (a, b, t) in enumerate(zip(logits, stored, truth)):
        assert rel(a, t) < 2e-5 and rel(a, b) < 2e-5, i


def test_weights_asked_for_are_the_stored_designs():
    """A route asked for its weights (a hook) gets them from the logits design too, bitwise the
    stored design's; not asked, it gets None and no weights are written."""
    S, D = 4, 12
    heads = [2] * S
    leaves = _leaves(D, S, heads, 0, 7, torch.float32)
    stacks = []

    def make(cfg):
        def build(cap, p):
            from kernel_checks import poisoned_stack
            stacks.append(poisoned_stack(cap, p, cfg))
            return stacks[-1]
        return build

    _, outs_l, w_l = _chain(make(poisoned(stack_weights="logits")), leaves, S, heads)
    _, outs_s, w_s = _chain(make(poisoned()), leaves, S, heads)
    _, _, none = _chain(make(poisoned(stack_weights="logits")), leaves, S, heads, need_weights=False)
    assert none == [None] * S
    for a, b in zip(outs_l + w_l, outs_s + w_s):
        assert torch.equal(a, b)


def test_stack_weights_is_a_checked_field_off_by_default():
    with pytest.raises(ValueError, match="stack_weights"):
        KernelConfig(stack_weights="normaliser")
    assert KernelConfig().stack_weights == "stored"  # the default until a GPU measurement


@pytest.mark.parametrize("method", ["mhar", "mhar_hw"])
def test_the_model_asks_for_weights_only_where_a_hook_reads_them(monkeypatch, method):
    """A model routing through triton with `stack_weights="logits"`: unhooked, no site asks its
    stack for weights (none stored); a hook on one site's `hook_weights` gets that site's weights,
    equal to eager's up to fp32 rounding, and only that site's calls ask."""
    from mhar_probe.model.config import MHARConfig
    from mhar_probe.model.modeling import MHARForCausalLM
    from mhar_probe.model.routing import set_routing_backend

    asked: list[bool] = []
    forward_call = kad._StackState._forward_call

    def spy(self, call, query, norm_weight, need_weights=True):
        asked.append(need_weights)
        return forward_call(self, call, query, norm_weight, need_weights)

    monkeypatch.setattr(kad._StackState, "_forward_call", spy)
    config = MHARConfig.from_preset("tiny", residual_method=method, hidden_size=32, num_hidden_layers=1,
                                    num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                                    vocab_size=61)
    torch.manual_seed(0)
    model = MHARForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids = torch.randint(0, config.vocab_size, (1, 3))
    sites = [m for name, m in model.named_modules() if name.endswith("sites.1")]
    assert len(sites) == 1
    seen = []
    sites[0].hook_weights.register_forward_hook(lambda mod, args, out: seen.append(args[0].detach().clone()))
    set_routing_backend(model, "eager")
    model(input_ids=ids, labels=ids).loss.backward()
    want = seen.pop()
    set_routing_backend(model, "triton", KernelConfig(stack_weights="logits"))
    asked.clear()
    model(input_ids=ids, labels=ids).loss.backward()
    assert rel(seen.pop(), want) < 1e-5
    assert asked.count(True) == 1 and len(asked) > 1  # site 1 (before the MLP): one H-head read


def test_the_bench_times_the_logits_variant(monkeypatch):
    """`mhar bench routing --backends triton,triton-weights-logits --check-grads` (device_run.sh
    weights): the variant's backend carries stack_weights="logits" over the run's configuration,
    in either order (device_run.sh alternates the arms' order by round)."""
    from kernel_checks import POISON

    from mhar_probe.bench.routing import check_arguments, variant_backend
    from mhar_probe.cli.bench import routing_parser

    cfg = variant_backend("triton-weights-logits", POISON).options
    assert (cfg.stack_weights, cfg.stack_douts, cfg.poison) == ("logits", "slots", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # check the arguments alone
    for arms in ("triton,triton-weights-logits", "triton-weights-logits,triton"):
        check_arguments(routing_parser().parse_args(["--backends", arms]))
