"""A forward over several new tokens after a KV cache equals the uncached forward, for every
method (issue 32, item 1: the new chunk attended non-causally, 1.4-1.7 off in the logits, and an
all-ones attention mask was dropped). Float64 tiny models; transformers' own Qwen3 passes the same
checks (the control that the checks themselves are sound), and so does the converted delta model
(`model/delta_modeling.py`, whose attention is the base model's)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM
from transformers.cache_utils import DynamicCache

import mhar_probe  # noqa: F401  (registers the Auto classes)
from mhar_probe.convert import convert_checkpoint
from mhar_probe.model import METHODS, MHARConfig, MHARForCausalLM
from mhar_probe.model.layers import causal_mask

from generation_checks import greedy_without_cache

SMALL = dict(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64, initializer_range=0.2)
QWEN3 = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, intermediate_size=64, initializer_range=0.2)
# float64 weights, but the norms' statistic and the routing run in float32 by design (their
# reductions block differently for another T): up to ~3e-5 apart here; the defect was 1.4-1.7
TOL = dict(rtol=1e-4, atol=1e-4)
PAD = 3  # left padding of row 0


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and much faster on a shared, busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomise_routing(model, seed: int = 1) -> None:
    """Non-trivial routing: random queries, key norms off one, open gates."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for site in model.sites:
            site.query.copy_(torch.randn(site.query.shape, generator=g, dtype=site.query.dtype))
            if hasattr(site, "key_norm"):
                w = site.key_norm.weight
                w.copy_(1 + 0.3 * torch.randn(w.shape, generator=g, dtype=w.dtype))
            if hasattr(site, "gate"):
                site.gate.fill_(0.7)


def mhar_model(method: str):
    torch.manual_seed(0)
    model = MHARForCausalLM(MHARConfig(residual_method=method, **SMALL))
    if method not in ("baseline", "hyper"):
        randomise_routing(model)
    return model.double().eval()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A Qwen3 converted to the delta form (`MHARDeltaForCausalLM`), its routing made non-trivial."""
    root = tmp_path_factory.mktemp("delta")
    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config(**QWEN3)).save_pretrained(root / "qwen3")
    with pytest.warns(UserWarning, match="no tokenizer"):
        convert_checkpoint(root / "qwen3", root / "converted", num_blocks=2, heads=4)
    model = AutoModelForCausalLM.from_pretrained(root / "converted")
    randomise_routing(model)
    return model.double().eval()


def qwen3():
    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(**QWEN3)).double().eval()


MODELS = [*METHODS, "converted_delta", "transformers_qwen3"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    if request.param == "converted_delta":
        return request.getfixturevalue("converted")
    if request.param == "transformers_qwen3":
        return qwen3()
    return mhar_model(request.param)


def ids_and_mask(padded: bool) -> tuple[Tensor, Tensor, Tensor]:
    """ids [2, 12 (+ PAD)], the attention mask and positions counted from the first real token."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(1, 97, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    if padded:  # row 0 is left-padded by PAD tokens (id 0), row 1 is not
        ids = torch.cat([torch.zeros(2, PAD, dtype=torch.long), ids], dim=1)
        ids[1, :PAD] = torch.randint(1, 97, (PAD,), generator=g)
        mask = torch.ones_like(ids)
        mask[0, :PAD] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def chunked(model, ids: Tensor, chunks: list[int], mask: Tensor | None, pos: Tensor | None) -> Tensor:
    """Logits [B, T, V] of feeding `ids` chunk by chunk through one KV cache; each call gets the
    attention mask of every token so far (transformers' convention) and the chunk's positions."""
    cache, out, start = DynamicCache(), [], 0
    for n in chunks:
        end = start + n
        kw = {}
        if mask is not None:
            kw["attention_mask"] = mask[:, :end]
        if pos is not None:
            kw["position_ids"] = pos[:, start:end]
        res = model(ids[:, start:end], past_key_values=cache, use_cache=True, **kw)
        cache = res.past_key_values
        out.append(res.logits)
        start = end
    assert start == ids.shape[1]
    return torch.cat(out, dim=1)


CHUNKS = ([7, 5], [3, 4, 5], [1, 6, 5], [5, 1, 1, 5])  # after a cache of 7, of 3 then 7, ...; of 12 tokens
PADDED_CHUNKS = ([PAD + 7, 5], [PAD + 2, 4, 6], [PAD, 7, 5])


@pytest.mark.parametrize("mask_kind", ["none", "all_ones"])
def test_cached_chunks_equal_the_uncached_forward(model, mask_kind):
    """Unpadded: no mask at all, or an all-ones mask (which the model may drop, never the causality)."""
    ids, mask, _ = ids_and_mask(padded=False)
    mask = mask if mask_kind == "all_ones" else None
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=False).logits
        for chunks in CHUNKS:
            got = chunked(model, ids, chunks, mask, None)
            torch.testing.assert_close(got, full, **TOL, msg=lambda m: f"{chunks}: {m}")


@pytest.mark.parametrize("positions", ["from_mask", "default"])
def test_cached_chunks_equal_the_uncached_forward_with_left_padding(model, positions):
    """Left padding: every real position's logits agree (padded positions are free)."""
    ids, mask, pos = ids_and_mask(padded=True)
    pos = pos if positions == "from_mask" else None
    real = mask.bool()
    with torch.no_grad():
        full = model(ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        for chunks in PADDED_CHUNKS:
            got = chunked(model, ids, chunks, mask, pos)
            torch.testing.assert_close(got[real], full[real], **TOL, msg=lambda m: f"{chunks}: {m}")


def test_generate_continues_from_a_cached_prefix_and_with_an_assistant(model):
    """generate() after a cached prefix feeds the rest of the prompt as one multi-token chunk, and
    assisted generation verifies several drafted tokens per call: both give the tokens of greedy
    decoding without a cache."""
    ids, _, _ = ids_and_mask(padded=False)
    prompt = ids[:1]  # [1, 12]
    with torch.no_grad():
        want = greedy_without_cache(model, prompt, 6, eos=None)
        prefix = model(prompt[:, :5], use_cache=True).past_key_values
        cont = model.generate(prompt, past_key_values=prefix, max_new_tokens=6, min_new_tokens=6,
                              do_sample=False, pad_token_id=0)
        assert torch.equal(cont[0, prompt.shape[1]:], want)
        if isinstance(model, MHARForCausalLM):  # a draft model of another method (the same vocabulary)
            draft = mhar_model("baseline" if model.config.residual_method != "baseline" else "mhar")
            assisted = model.generate(prompt, assistant_model=draft, max_new_tokens=6, min_new_tokens=6,
                                      do_sample=False, pad_token_id=0)
            assert torch.equal(assisted[0, prompt.shape[1]:], want)


def test_causal_mask_is_aligned_bottom_right():
    m = causal_mask(3, 5)
    assert m.tolist() == [[True, True, True, False, False],
                          [True, True, True, True, False],
                          [True, True, True, True, True]]
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_a_mask_shorter_than_cache_plus_chunk_is_refused():
    model = mhar_model("mhar")
    ids, mask, _ = ids_and_mask(padded=True)
    with torch.no_grad():
        cache = model(ids[:, :6], attention_mask=mask[:, :6], use_cache=True).past_key_values
        with pytest.raises(ValueError, match="pass the mask of all"):
            model(ids[:, 6:], attention_mask=mask[:, 6:], past_key_values=cache, use_cache=True)
