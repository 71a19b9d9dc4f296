"""The model family against independent references: transformers' Qwen3, a float64 loop over
heads, analytic properties of the routing and Hugging Face round trips."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM
from transformers.cache_utils import DynamicCache

import mhar_probe  # noqa: F401  (registers the Auto classes)
from mhar_probe.model import METHODS, ConfigError, MHARConfig, MHARForCausalLM, route_reference
from mhar_probe.model.routing import route

from generation_checks import greedy_without_cache

SMALL = dict(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64)


def make(method: str, seed: int = 0, **kw) -> MHARForCausalLM:
    torch.manual_seed(seed)
    return MHARForCausalLM(MHARConfig(residual_method=method, **{**SMALL, **kw})).eval()


def randomise_routing(model: MHARForCausalLM, seed: int = 1) -> None:
    """Give queries / key norms / gates non-trivial values so tests exercise real routing."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for site in model.sites:
            site.query.copy_(torch.randn(site.query.shape, generator=g))
            site.key_norm.weight.copy_(1 + 0.3 * torch.randn(site.key_norm.weight.shape, generator=g))
            if hasattr(site, "gate"):
                site.gate.fill_(0.7)


def test_baseline_matches_transformers_qwen3():
    torch.manual_seed(0)
    qcfg = Qwen3Config(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=12, intermediate_size=96, max_position_embeddings=64,
                       rms_norm_eps=1e-6, rope_theta=1e4, tie_word_embeddings=True, attention_bias=False,
                       attn_implementation="eager")
    ref = Qwen3ForCausalLM(qcfg).eval()
    ours = make("baseline")
    missing, unexpected = ours.load_state_dict(ref.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    ours.tie_weights()
    ids = torch.randint(0, 97, (2, 23))
    with torch.no_grad():
        a, b = ref(ids).logits, ours(ids).logits
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_mhar_h1_equals_attnres_output_and_gradients():
    single, multi = make("attnres"), make("mhar", routing_heads=1)
    multi.load_state_dict(single.state_dict())
    randomise_routing(single)
    multi.load_state_dict(single.state_dict())
    ids = torch.randint(0, 97, (2, 11))
    la, lb = single(ids, labels=ids).loss, multi(ids, labels=ids).loss
    la.backward(), lb.backward()
    assert torch.equal(la, lb)
    for (na, pa), (nb, pb) in zip(single.named_parameters(), multi.named_parameters()):
        assert na == nb and torch.equal(pa.grad, pb.grad), na


def test_parameter_counts():
    L, d = SMALL["num_hidden_layers"], SMALL["hidden_size"]
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    base, single, multi = count(make("baseline")), count(make("attnres")), count(make("mhar", routing_heads=4))
    assert single == multi == base + (2 * L + 1) * 2 * d


def route_float64_loop(sources, q, g, H, eps):
    """Independent reading of eq. (mh): explicit loops over heads and sources in float64."""
    N, B, T, D = sources.shape
    K = D // H
    s = sources.double()
    rms = torch.sqrt((s * s).mean(-1, keepdim=True) + eps)
    keys = g.double() * (s / rms)
    out = torch.zeros(B, T, D, dtype=torch.float64)
    weights = torch.zeros(N, B, T, H, dtype=torch.float64)
    for h in range(H):
        sl = slice(h * K, (h + 1) * K)
        logits = torch.stack([(keys[n][..., sl] * q.double()[sl]).sum(-1) for n in range(N)])  # [N, B, T]
        w = torch.exp(logits - logits.max(0).values)
        w = w / w.sum(0)
        weights[..., h] = w
        out[..., sl] = sum(w[n][..., None] * s[n][..., sl] for n in range(N))
    return out, weights


@pytest.mark.parametrize("N,D,H", [(1, 12, 1), (5, 48, 4), (7, 60, 3), (9, 160, 8), (4, 30, 5)])
def test_eager_route_matches_float64_loop(N, D, H):
    g = torch.Generator().manual_seed(N * D + H)
    sources = torch.randn(N, 2, 3, D, generator=g, dtype=torch.float64)
    q, w = torch.randn(D, generator=g, dtype=torch.float64), 1 + 0.2 * torch.randn(D, generator=g, dtype=torch.float64)
    out, weights = route_reference(sources, q, w, H, 1e-6)
    ref_out, ref_w = route_float64_loop(sources, q, w, H, 1e-6)
    torch.testing.assert_close(out, ref_out, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(weights.double(), ref_w, rtol=1e-6, atol=1e-6)


def test_delta_form_adds_gated_route_to_stream():
    g = torch.Generator().manual_seed(3)
    sources, partial = torch.randn(3, 1, 4, 24, generator=g), torch.randn(1, 4, 24, generator=g)
    q, w = torch.randn(24, generator=g), torch.ones(24)
    routed, _ = route(sources, q, w, 4)
    out, _ = route(sources, q, w, 4, partial=partial, gate=torch.tensor(0.25))
    torch.testing.assert_close(out, partial + 0.25 * routed)


@pytest.mark.parametrize("method", ["attnres", "mhar", "mhar_hw", "delta"])
def test_uniform_depth_softmax_at_init(method):
    model = make(method)
    ids = torch.randint(0, 97, (2, 9))
    weights = {}
    hooks = [site.hook_weights.register_forward_hook(
        lambda mod, args, out, s=site.index: weights.__setitem__(s, out)) for site in model.sites]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    assert len(weights) == len(model.sites) == 2 * SMALL["num_hidden_layers"] + 1
    for s, w in weights.items():
        torch.testing.assert_close(w, torch.full_like(w, 1.0 / w.shape[0]))


def test_delta_is_identity_at_init():
    base, delta = make("baseline"), make("delta", delta_num_blocks=2)
    delta.load_state_dict(base.state_dict(), strict=False)
    ids = torch.randint(0, 97, (2, 13))
    with torch.no_grad():
        assert torch.equal(base(ids).logits, delta(ids).logits)
    randomise_routing(delta)
    with torch.no_grad():
        assert not torch.allclose(base(ids).logits, delta(ids).logits)


@pytest.mark.parametrize("method", ["baseline", "hyper", "mhar", "mhar_hw", "delta"])
def test_save_load_auto_round_trip_and_generate(method, tmp_path):
    model = make(method)
    if method != "baseline" and method != "hyper":
        randomise_routing(model)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, MHARForCausalLM)
    ids = torch.randint(0, 97, (2, 10))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
        out = loaded.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert out.shape == (2, 15)


@pytest.mark.parametrize("method", METHODS)
def test_cached_generation_with_left_padding_equals_greedy_without_cache(method):
    """generate() on a left-padded batch (KV cache, attention mask, positions from the mask) gives,
    row by row, exactly the tokens of greedy decoding of that row alone without a cache, and every
    step's logits agree with the recomputation's (an untrained model's argmax can hide a lost cache)."""
    model = make(method, initializer_range=0.2)  # weights large enough that context moves the logits
    if method in ("attnres", "mhar", "mhar_hw", "delta"):
        randomise_routing(model)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 97, (1, n), generator=g) for n in (7, 3, 5)]
    width, steps = max(p.shape[1] for p in prompts), 6
    ids = torch.zeros(len(prompts), width, dtype=torch.long)  # pad id 0, on the left
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - p.shape[1]:], mask[row, width - p.shape[1]:] = p[0], 1
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=steps, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
        eos = model.generation_config.eos_token_id
        for row, p in enumerate(prompts):
            want_logits: list[Tensor] = []
            want = greedy_without_cache(model, p, steps, eos=eos, logits=want_logits)
            got = out.sequences[row, width:]
            assert torch.equal(got[:want.numel()], want) and bool((got[want.numel():] == 0).all())  # pads after eos
            got_logits = torch.stack([step[row] for step in out.logits[:want.numel()]])  # [steps, V]
            torch.testing.assert_close(got_logits, torch.stack(want_logits), rtol=1e-4, atol=1e-4)


def test_forward_takes_the_cache_under_both_names():
    """The cache is read under `cache` (transformers >= 5.24) and `past_key_values` (earlier): the
    second step sees the first step's keys either way, and matches the full recomputation."""
    model = make("mhar")
    randomise_routing(model)
    ids = torch.randint(1, 97, (2, 9))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits[:, -1]
        for name in ("cache", "past_key_values"):
            first = model(ids[:, :-1], use_cache=True)
            cache = first.cache if hasattr(type(first), "cache") else first.past_key_values
            step = model(ids[:, -1:], use_cache=True, **{name: cache}).logits[:, -1]
            torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)
        with pytest.raises(TypeError, match="passed twice"):
            model(ids, cache=DynamicCache(), past_key_values=DynamicCache())


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(cache_params=None), TypeError, "cache_params"),
    (dict(bogus_option=1), TypeError, "bogus_option"),
    (dict(output_attentions=True), ValueError, "hook_weights"),
    (dict(output_hidden_states=True), ValueError, "hook_sources"),
])
def test_forward_refuses_keywords_it_does_not_understand(kwargs, error, needle):
    model = make("mhar")
    ids = torch.randint(1, 97, (1, 4))
    with pytest.raises(error, match=needle):
        model(ids, **kwargs)
    with pytest.raises(error, match=needle):
        model.model(ids, **kwargs)


def test_return_dict_false_gives_the_output_tuple():
    model = make("mhar")
    ids = torch.randint(1, 97, (1, 4))
    with torch.no_grad():
        assert torch.equal(model(ids, use_cache=False, return_dict=False)[0], model(ids, use_cache=False).logits)


def test_padding_mask_matches_unpadded():
    model = make("mhar")
    randomise_routing(model)
    ids = torch.randint(1, 97, (1, 7))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 7, dtype=torch.long)], dim=1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        a = model(ids, use_cache=False).logits
        b = model(padded, attention_mask=mask, position_ids=pos, use_cache=False).logits[:, 3:]
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw,needle", [
    (dict(routing_heads=5), "not divisible by routing heads"),
    (dict(residual_method="bogus"), "unknown residual method"),
    (dict(num_key_value_heads=3), "not a multiple"),
    (dict(residual_method="delta", delta_num_blocks=9), "delta_num_blocks"),
])
def test_bad_configs_raise_clear_errors(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        MHARConfig(**{**SMALL, "residual_method": "mhar", **kw})


def test_presets_have_paper_dimensions():
    c = MHARConfig.from_preset("1b", residual_method="mhar")
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
            c.intermediate_size, c.max_position_embeddings) == (1280, 36, 16, 8, 5120, 2048)
    assert c.routing_heads == 8 and c.head_dim == 80
    # the paper's routing-parameter overhead: (2L+1) * 2d = +100K at 350M, +187K at 1B
    for preset, expected in [("350m", 100e3), ("1b", 187e3)]:
        c = MHARConfig.from_preset(preset)
        assert math.isclose(c.num_sites * 2 * c.hidden_size, expected, rel_tol=0.02)
    with pytest.raises(ConfigError, match="unknown preset"):
        MHARConfig.from_preset("7b")


def test_sequence_longer_than_position_limit_is_refused():
    model = make("baseline")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.zeros(1, 65, dtype=torch.long))


@pytest.mark.parametrize("preset,kv", [("100m", 4), ("124m", 4), ("350m", 8), ("1b", 8)])
def test_mhar_at_the_papers_scales_routes_with_eight_heads(preset, kv):
    """The paper adopts H = 8 for its models (Table main: "MHAR (H=8)" at 100M with KV = 4); H = KV
    stays one flag away, and mhar_hw keeps H = G."""
    from mhar_probe.model.config import routing_heads_reason

    mhar = MHARConfig.from_preset(preset, residual_method="mhar")
    assert (mhar.routing_heads, mhar.num_key_value_heads) == (8, kv)
    assert "the paper's choice" in routing_heads_reason(mhar)
    assert MHARConfig.from_preset(preset, residual_method="mhar", routing_heads=kv).routing_heads == kv
    assert MHARConfig.from_preset(preset, residual_method="mhar_hw").routing_heads == kv
    assert MHARConfig.from_preset("tiny", residual_method="mhar").routing_heads == 2  # tiny: H = KV
