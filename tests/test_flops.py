"""FLOP counter: closed-form parts against independent counts and torch's flop counter."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mhar_probe.flops import flops_per_token, non_embedding_params
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.siteplan import site_plan_of

SMALL = dict(vocab_size=97, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64)


def cfg(method, **kw):
    return MHARConfig(**{**SMALL, "residual_method": method, **kw})


def test_dense_is_6n_of_independent_parameter_count():
    d, L, nq, nkv, ff = 64, 3, 4, 2, 96
    h = d // nq
    per_layer = d * nq * h + d * nkv * h + d * nkv * h + nq * h * d + d * ff * 3
    N = L * per_layer
    f = flops_per_token(cfg("baseline"), seq_len=32)
    assert f["non_embedding_params"] == N == non_embedding_params(cfg("baseline"))
    assert f["dense"] == 6 * N
    assert f["attention"] == 6 * L * 32 * nq * h  # Kaplan: 2 n_layer n_ctx d_attn, x3
    assert f["total"] == 6 * N + 6 * L * 32 * nq * h
    assert flops_per_token(cfg("baseline"), 32, count_lm_head=True)["total"] == f["total"] + 6 * d * 97


def test_n_matches_the_models_matmul_weights():
    model = MHARForCausalLM(cfg("baseline"))
    n = sum(m.weight.numel() for name, m in model.model.layers.named_modules() if isinstance(m, torch.nn.Linear))
    assert n == non_embedding_params(model.config)


def test_routing_terms():
    assert flops_per_token(cfg("baseline"), 32)["routing"] == 0
    assert flops_per_token(cfg("hyper"), 32)["routing"] == 0
    assert flops_per_token(cfg("hyper"), 32)["hyper"] > 0
    L, d = 3, 64
    pairs = (2 * L + 1) * (2 * L + 2) // 2
    r1 = flops_per_token(cfg("attnres"), 32)["routing"]
    assert r1 == 3 * 4 * d * pairs
    for H in (1, 2, 4, 8, 16):  # the head split is a reshape
        assert flops_per_token(cfg("mhar", routing_heads=H), 32)["routing"] == r1
    # mhar_hw: G = num_key_value_heads full-width queries at the L attention sites
    attn_sources = sum(2 * l + 1 for l in range(L))
    hw = flops_per_token(cfg("mhar_hw"), 32)["routing"]
    assert hw == r1 + 3 * 4 * d * (2 - 1) * attn_sources
    # delta sites read at most 1 + num_blocks sources
    for nb in (1, 2, 3):
        sites = site_plan_of(cfg("delta", delta_num_blocks=nb)).sites
        assert len(sites) == 2 * L + 1 and max(s.num_sources for s in sites) == 1 + nb


def _counted_forward(model, T):
    ids = torch.randint(0, model.config.vocab_size, (2, T))
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(input_ids=ids, use_cache=False)
    return fc.get_total_flops() / (2 * T)


def _uncounted(c):
    """Real FLOPs that torch's counter does not see in this eager model (forward, per token).

    * CPU scaled_dot_product_attention lowers to an op without a registered counter;
    * a routing site with a single source: einsum lowers the length-1 scoring contraction
      to an element-wise product (2d per query);
    * hyper-connections: `normed @ dynamic_beta_fn` is a matrix-vector product (aten.mv,
      2 d n) and the depth connection is an outer product lowered to a multiply (2 d n).
    """
    d, n = c.hidden_size, c.hyper_streams
    single = sum(s.num_queries for s in site_plan_of(c).sites if s.num_sources == 1)
    hyper = 2 * c.num_hidden_layers * 4 * d * n if c.residual_method == "hyper" else 0
    return 2 * d * single + hyper


@pytest.mark.parametrize("method,kw", [("baseline", {}), ("attnres", {}), ("mhar", {"routing_heads": 4}),
                                       ("mhar_hw", {}), ("hyper", {}), ("delta", {"delta_num_blocks": 2})])
def test_matches_torch_flop_counter_forward(method, kw):
    torch.manual_seed(0)
    c = cfg(method, **kw)
    model = MHARForCausalLM(c).eval()
    T = 16
    f = flops_per_token(c, T, count_lm_head=True, attention="full", training=False)
    expected = f["total"] - f["attention"] - _uncounted(c)
    assert _counted_forward(model, T) == pytest.approx(expected, rel=1e-12)


def test_attention_term_matches_counted_explicit_attention():
    """QK^T and softmax(.)V written as matmuls: the un-masked count is the 'full' term, and the
    causal average (Kaplan's 2 n_ctx d_attn) is half of it."""
    B, H, T, hd = 2, 4, 16, 16
    q, k, v = (torch.randn(B, H, T, hd) for _ in range(3))
    with FlopCounterMode(display=False) as fc:
        torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    c = cfg("baseline", num_hidden_layers=1, num_attention_heads=H, num_key_value_heads=H, hidden_size=H * hd)
    full = flops_per_token(c, T, attention="full", training=False)["attention"]
    assert fc.get_total_flops() / (B * T) == full
    assert flops_per_token(c, T, training=False)["attention"] == full / 2


def test_paper_presets_routing_share():
    # paper: routing adds 0.5-1.2% FLOPs at 100M-1B (at the paper's T)
    for preset in ("100m", "350m", "1b"):
        c = MHARConfig.from_preset(preset, residual_method="mhar", vocab_size=151936)
        share = flops_per_token(c, MHARConfig.preset_seq_len(preset))["routing_fraction"]
        assert 0.005 <= share <= 0.012, (preset, share)
