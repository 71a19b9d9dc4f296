"""Conversion of pretrained causal LMs to the delta form, checked against the transformers models
themselves (Llama, Qwen3, Qwen2, Mistral built at random, tiny, on CPU) and against the
from-scratch `delta` method of `MHARForCausalLM`."""

from __future__ import annotations

import argparse
import copy
import json

import pytest
import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, MistralConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen3Config)

import mhar_probe  # noqa: F401
from mhar_probe.convert import (ConversionError, MHARDeltaConfig, MHARDeltaForCausalLM, convert_checkpoint,
                                convert_model, register)
from mhar_probe.cli.convert import add_convert_subparser
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model import routing

register()
V, D, L = 101, 64, 4
COMMON = dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=96, max_position_embeddings=64, rms_norm_eps=1e-6)


def base_config(arch: str, **kw):
    """Tiny GQA configs (4 query / 2 KV heads) exercising each family's own features."""
    if arch == "llama":  # untied embeddings, llama3 RoPE scaling
        return LlamaConfig(**COMMON, tie_word_embeddings=False, **kw, rope_parameters=dict(
            rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=16))
    if arch == "llama_tied":
        return LlamaConfig(**COMMON, tie_word_embeddings=True, **kw)
    if arch == "qwen3":  # q/k norms, tied embeddings
        return Qwen3Config(**COMMON, head_dim=16, tie_word_embeddings=True, **kw)
    if arch == "qwen2":  # q/k/v biases
        return Qwen2Config(**COMMON, tie_word_embeddings=False, **kw)
    if arch == "mistral":  # sliding-window attention shorter than the test sequences
        return MistralConfig(**COMMON, sliding_window=6, **kw)
    raise KeyError(arch)


def make_base(arch: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(base_config(arch, **kw)).eval()


def tokens(batch: int = 2, length: int = 13, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


def randomise_routing(model: MHARDeltaForCausalLM, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for site in model.sites:
            site.query.copy_(torch.randn(site.query.shape, generator=g))
            site.key_norm.weight.copy_(1 + 0.3 * torch.randn(site.key_norm.weight.shape, generator=g))
            site.gate.fill_(0.5)
        model.null_source.copy_(torch.randn(model.null_source.shape, generator=g))


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, V)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


# ------------------------------------------------------------------ identity at step 0
@pytest.mark.parametrize("arch", ["llama", "llama_tied", "qwen3", "qwen2", "mistral"])
@pytest.mark.parametrize("num_blocks,heads", [(1, 1), (2, 8), (4, 4), (3, 64)])
def test_conversion_is_exactly_identity_at_step_0(arch, num_blocks, heads):
    base = make_base(arch)
    ids = tokens()
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding in the second row
    with torch.no_grad():
        ref, ref_masked = base(ids).logits, base(ids, attention_mask=mask).logits
        model = convert_model(base, num_blocks=num_blocks, heads=heads)
        out, out_masked = model(ids).logits, model(ids, attention_mask=mask).logits
    assert (out - ref).abs().max().item() == 0.0
    assert (out_masked - ref_masked).abs().max().item() == 0.0
    assert model.config.num_blocks == num_blocks and model.config.routing_heads == heads
    assert len(model.sites) == 2 * L + 1


def test_identity_in_bf16_and_default_blocks():
    base = make_base("qwen3").to(torch.bfloat16)
    ids = tokens()
    with torch.no_grad():
        ref = base(ids).logits
        model = convert_model(base)
        out = model(ids).logits
    assert model.config.num_blocks == max(1, L // 4) and model.config.routing_heads == 8
    assert model.null_source.dtype == torch.bfloat16 and torch.equal(out, ref)


def test_wrapping_keeps_the_base_weights_and_adds_only_routing_parameters():
    base = make_base("llama")
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = convert_model(base, num_blocks=2, heads=4)
    state = model.state_dict()
    assert {f"base.{k}" for k in before} <= set(state)
    assert all(torch.equal(state[f"base.{k}"], v) for k, v in before.items())
    new = set(state) - {f"base.{k}" for k in before}
    assert new == {"null_source"} | {f"sites.{s}.{p}" for s in range(2 * L + 1)
                                     for p in ("query", "gate", "key_norm.weight")}
    assert sum(state[k].numel() for k in new) == D + (2 * L + 1) * (2 * D + 1)


# ------------------------------------------------------------------ against the from-scratch delta method
def test_converted_qwen3_matches_from_scratch_delta_with_open_gates():
    """A Qwen3 converted with (num_blocks, H) computes what MHARForCausalLM(method=delta) computes
    with the same weights: same sources, sites and gating, independent decoder implementation."""
    base = make_base("qwen3", rope_theta=1e4)
    ids = tokens()
    with torch.no_grad():
        plain = base(ids).logits
    model = convert_model(base, num_blocks=2, heads=4)
    randomise_routing(model)
    ours = MHARForCausalLM(MHARConfig(
        vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=96, max_position_embeddings=64, residual_method="delta",
        delta_num_blocks=2, routing_heads=4, tie_word_embeddings=True)).eval()
    renamed = {}
    for key, value in model.state_dict().items():
        key = key.removeprefix("base.")
        renamed["model." + key if key == "null_source" or key.startswith("sites.") else key] = value
    missing, unexpected = ours.load_state_dict(renamed, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    ours.tie_weights()
    with torch.no_grad():
        converted, scratch = model(ids).logits, ours(ids).logits
    torch.testing.assert_close(converted, scratch, rtol=2e-5, atol=2e-5)
    assert not torch.allclose(converted, plain, atol=1e-3)  # the open gates did change the function


def test_deepcopy_routes_through_its_own_sites():
    """A copy (e.g. an EMA of the weights) carries hooks bound to the copy, not to the original."""
    model = convert_model(make_base("llama"), num_blocks=2, heads=4)
    ids = tokens()
    with torch.no_grad():
        ref = model(ids).logits
        twin = copy.deepcopy(model)
        randomise_routing(twin)
        assert torch.equal(model(ids).logits, ref) and not torch.allclose(twin(ids).logits, ref, atol=1e-3)


# ------------------------------------------------------------------ routing is trainable
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_few_adamw_steps_open_the_gates(arch):
    base = make_base(arch)
    ids = tokens(4, 16, seed=3)
    with torch.no_grad():
        ref = base(ids).logits.clone()
    model = convert_model(base, num_blocks=2, heads=8).train()
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    for _ in range(4):
        opt.zero_grad()
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, init[n])}
    assert all(site.gate.item() != 0.0 for site in model.sites)
    assert "null_source" in moved
    for s in range(len(model.sites)):
        if _num_sources(model, s) > 1:  # a one-source read (layer 0's attention reads only the null) has a constant softmax
            assert {f"sites.{s}.query", f"sites.{s}.key_norm.weight"} <= moved, s
    model.eval()
    with torch.no_grad():
        assert (model(ids).logits - ref).abs().max() > 1e-3


def _num_sources(model: MHARDeltaForCausalLM, site: int) -> int:
    from mhar_probe.model.residual import DeltaSources

    return DeltaSources(model.block_of_layer, model.null_source).num_sources(site)


def test_activation_checkpointing_gives_identical_gradients():
    model = convert_model(make_base("llama"), num_blocks=3, heads=4).train()
    randomise_routing(model)
    ids = tokens()

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(ids, labels=ids, use_cache=False).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain = grads()
    enable = getattr(model.base, "activation_checkpointing_enable", None)  # transformers >= 5.2x
    if enable is not None:
        enable({"use_reentrant": False})
    else:
        model.base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert model._checkpointing()
    checkpointed = grads()
    assert all(torch.equal(plain[n], checkpointed[n]) for n in plain)


def test_routing_goes_through_the_backend_registry(monkeypatch):
    """Every site routes through `get_backend(config.routing_backend).route` (so the fused kernel
    is picked up once registered): one call per site per forward."""
    calls = []
    eager = routing.get_backend("eager")

    def spy(*args, **kwargs):
        calls.append(args[0].shape[0])  # N sources
        return eager.route(*args, **kwargs)

    monkeypatch.setitem(routing._BACKENDS, "eager", routing.RoutingBackend("eager", spy, eager.new_stack))
    model = convert_model(make_base("qwen3"), num_blocks=2, heads=4)
    with torch.no_grad():
        model(tokens())
    # layers 0,1 form block 0 and layers 2,3 block 1: N = 1, 2 | 2, 2 | 2, 3 | 3, 3 | final 3
    assert calls == [1, 2, 2, 2, 2, 3, 3, 3, 3]


# ------------------------------------------------------------------ generation and the KV cache
def test_generate_matches_base_at_step_0_and_cache_is_consistent():
    base = make_base("llama")
    prompt = tokens(2, 5, seed=7)
    ref = base.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False,
                        pad_token_id=0)
    model = convert_model(base, num_blocks=2, heads=4)
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False,
                         pad_token_id=0)
    assert torch.equal(out, ref)

    randomise_routing(model)  # with open gates: incremental decoding == full forward
    ids = tokens(2, 9, seed=8)
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        prefix = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=prefix.past_key_values, use_cache=True).logits[:, -1]
    torch.testing.assert_close(step, full, rtol=1e-5, atol=1e-5)
    gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                         pad_token_id=0)
    assert gen.shape == (2, 9)


# ------------------------------------------------------------------ save / load through the Auto classes
def test_round_trip_through_auto_classes(tmp_path):
    model = convert_model(make_base("qwen2"), num_blocks=2, heads=4)
    randomise_routing(model)
    model.save_pretrained(tmp_path / "m")
    assert AutoConfig.from_pretrained(tmp_path / "m").model_type == "mhar_delta"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    assert isinstance(loaded, MHARDeltaForCausalLM) and loaded.config.text_config.model_type == "qwen2"
    for a, b in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert a[0] == b[0] and a[1].dtype == b[1].dtype and torch.equal(a[1], b[1])
    # Same parameters, bit for bit; the logits then agree to fp32 rounding. Not bitwise: the CPU
    # BLAS may take another path for weights that live elsewhere in memory (measured here: 4.8e-8
    # between the loaded and the original model, 0 once the loaded parameters are cloned).
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model.eval()(ids).logits, rtol=1e-6, atol=1e-6)


def test_tied_embeddings_stay_tied_after_loading(tmp_path):
    model = convert_model(make_base("qwen3"), num_blocks=2, heads=4)
    model.save_pretrained(tmp_path / "m")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight


def test_convert_checkpoint_on_disk_with_tokenizer(tmp_path):
    base = make_base("llama")
    base.save_pretrained(tmp_path / "src")
    tiny_tokenizer().save_pretrained(tmp_path / "src")
    report = convert_checkpoint(tmp_path / "src", tmp_path / "dst", num_blocks=2, heads=8)
    assert report.max_logit_deviation == 0.0 and report.tokenizer_copied
    assert report.new_parameters == D + (2 * L + 1) * (2 * D + 1)
    tok = AutoTokenizer.from_pretrained(tmp_path / "dst")
    assert tok("w5 w7")["input_ids"] == [5, 7]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "dst").eval()
    ids = tokens()
    with torch.no_grad():
        assert (loaded(ids).logits - base(ids).logits).abs().max().item() == 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]  # no temporary leftovers


def test_missing_tokenizer_is_a_warning_not_a_failure(tmp_path):
    make_base("qwen3").save_pretrained(tmp_path / "src")
    with pytest.warns(UserWarning, match="no tokenizer"):
        report = convert_checkpoint(tmp_path / "src", tmp_path / "dst", num_blocks=1, heads=2)
    assert not report.tokenizer_copied and (tmp_path / "dst" / "config.json").is_file()


def test_existing_dst_is_kept_unless_overwrite_and_survives_a_failed_write(tmp_path, monkeypatch):
    make_base("qwen3").save_pretrained(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "keep.txt").write_text("mine")
    with pytest.raises(ConversionError, match="already exists; pass --overwrite"):
        convert_checkpoint(tmp_path / "src", tmp_path / "dst")
    # --overwrite replaces only what `mhar convert` wrote: a folder of the user's files stays
    with pytest.raises(ConversionError, match="not a converted model"):
        convert_checkpoint(tmp_path / "src", tmp_path / "dst", overwrite=True)
    assert [p.name for p in (tmp_path / "dst").iterdir()] == ["keep.txt"]
    with pytest.warns(UserWarning):
        convert_checkpoint(tmp_path / "src", tmp_path / "conv", num_blocks=2)
    before = {p.name: p.read_bytes() for p in (tmp_path / "conv").iterdir()}

    def broken_save(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(MHARDeltaForCausalLM, "save_pretrained", broken_save)
    with pytest.raises(OSError, match="disk full"):
        convert_checkpoint(tmp_path / "src", tmp_path / "conv", num_blocks=1, overwrite=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "conv").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv", "dst", "src"]
    monkeypatch.undo()
    with pytest.warns(UserWarning):
        convert_checkpoint(tmp_path / "src", tmp_path / "conv", num_blocks=1, overwrite=True)
    assert json.loads((tmp_path / "conv" / "config.json").read_text())["num_blocks"] == 1
    assert (tmp_path / "conv" / "model.safetensors").is_file()


# ------------------------------------------------------------------ clear errors
def test_unsupported_architecture_is_a_clear_error(tmp_path):
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, bos_token_id=0,
                                      eos_token_id=0))
    with pytest.raises(ConversionError, match="cannot convert model_type 'gpt2'; supported base "
                                              "architectures: llama, qwen3, qwen2, mistral") as err:
        convert_model(gpt2)
    assert "\n" not in str(err.value)
    gpt2.save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ConversionError, match="supported base architectures"):
        convert_checkpoint(tmp_path / "gpt2", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_blocks=0), r"num_blocks=0 is impossible for a 4-layer model; choose 1 <= num_blocks <= 4"),
    (dict(num_blocks=5), r"num_blocks=5 is impossible for a 4-layer model"),
    (dict(heads=3), r"routing heads H=3 must divide the hidden size d=64"),
    (dict(heads=0), r"routing heads H=0 must divide"),
    (dict(routing_backend="cuda"), r"unknown routing backend 'cuda'; choose one of eager, compile, triton"),
])
def test_impossible_options_are_clear_errors(kwargs, match):
    with pytest.raises(ConversionError, match=match) as err:
        convert_model(make_base("llama"), **kwargs)
    assert "\n" not in str(err.value)


def test_converting_a_converted_model_is_refused():
    with pytest.raises(ConversionError, match="already a converted"):
        convert_model(convert_model(make_base("qwen3"), num_blocks=1, heads=1))


# ------------------------------------------------------------------ CLI
def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mhar")
    add_convert_subparser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_converts_and_reports(tmp_path, capsys):
    make_base("qwen3").save_pretrained(tmp_path / "src")
    tiny_tokenizer().save_pretrained(tmp_path / "src")
    assert run_cli(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--num-blocks", "2",
                    "--heads", "4"]) == 0
    out = capsys.readouterr().out
    assert "mhar_delta (num_blocks=2, H=4" in out and "max |logit deviation| at step 0 = 0;" in out
    assert "tokenizer copied" in out
    assert run_cli(["convert", str(tmp_path / "src"), str(tmp_path / "dst")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhar convert: error: ") and err.count("\n") == 1 and "--overwrite" in err
    assert run_cli(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--overwrite", "--heads", "5"]) == 2
    assert "H=5 must divide the hidden size d=64" in capsys.readouterr().err
    assert AutoConfig.from_pretrained(tmp_path / "dst").routing_heads == 4  # untouched by the failed run


def test_config_serialises_the_base_config_as_a_dict():
    config = MHARDeltaConfig(text_config=base_config("llama"), num_blocks=2, routing_heads=4)
    d = config.to_dict()
    assert d["text_config"]["model_type"] == "llama" and d["num_blocks"] == 2
    again = MHARDeltaConfig(**copy.deepcopy({k: v for k, v in d.items() if k != "model_type"}))
    assert again.text_config.model_type == "llama" and again.hidden_size == D and again.num_sites == 2 * L + 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_identity_and_a_training_step_on_cuda(arch, dtype):
    base = make_base(arch).to("cuda", dtype)
    ids = tokens().cuda()
    with torch.no_grad():
        ref = base(ids).logits
    model = convert_model(base, num_blocks=2, heads=8)
    assert model.null_source.device.type == "cuda" and model.null_source.dtype == dtype
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref)
    model.train()
    model(ids, labels=ids).loss.backward()
    # every gate but layer 0's attention one (which reads only the null source, still 0) has a gradient
    assert all(site.gate.grad.abs().item() > 0 for site in model.sites[1:])
