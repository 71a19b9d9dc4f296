"""`mhar cpt`'s attention under CUDA-graph capture, and `mhar eval` of what `mhar cpt` writes.

Issue 36's first GPU run: (1) the graph step's eager warm-up passed `attention_mask=None` into each
attention sublayer but the capture a materialised mask (transformers' mask code asks `is_tracing`,
which is true while a CUDA stream captures), so a compiled sublayer recompiled inside the capture;
(2) `mhar eval` of a converted model's cpt run could not tell its context length. There is no GPU
here: capture is emulated by making transformers' capture check answer True, as it does inside
`torch.cuda.graph`.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from mhar_probe.compiled import decoder_layers
from mhar_probe.convert import convert_checkpoint
from mhar_probe.cpt import CPTConfig, CPTTrainer, cpt
from mhar_probe.cpt.attention import TRAINING_ATTENTION, causal_without_mask
from mhar_probe.evaluate.errors import EvalError
from mhar_probe.evaluate.harness import EvalConfig, eval_max_length, run_eval
from mhar_probe.model import saved

RUN = dict(steps=2, batch_size=4, eval_every=1, eval_batches=1, corpus_max_bytes=150_000, lr=3e-3, warmup=1,
           progress=False, checkpoint_every=2)
LIMIT = 64  # the tiny base's max_position_embeddings: `mhar cpt`'s default length is min(1024, this)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny random Qwen3 (the embedded corpus's BPE tokenizer) and its converted delta form."""
    from mhar_probe.data import get_tokenizer, load_corpus

    root = tmp_path_factory.mktemp("cpt-attn-models")
    os.environ["MHAR_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "mhar-cache")
    tok = get_tokenizer(load_corpus(max_bytes=150_000), vocab_size=512)
    torch.manual_seed(0)
    base = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=LIMIT, tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id))
    base.save_pretrained(root / "qwen3")
    tok.save_pretrained(root / "qwen3")
    convert_checkpoint(root / "qwen3", root / "qwen3-delta", heads=4, num_blocks=1)
    return {"qwen3": root / "qwen3", "qwen3-delta": root / "qwen3-delta"}


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def _capturing(monkeypatch, on: bool) -> None:
    """What transformers sees inside `torch.cuda.graph`: its stream-capture check answers True
    (`is_tracing` reads it from its module at every call)."""
    import transformers.utils.import_utils as iu

    monkeypatch.setattr(iu, "is_cuda_stream_capturing", lambda: on)


def _masks_seen(model: torch.nn.Module, run) -> list:
    """The `attention_mask` every decoder layer's attention module received while `run()` ran."""
    seen: list = []
    hooks = [layer.self_attn.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("attention_mask")),
                                                       with_kwargs=True) for layer in decoder_layers(model)]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("kind", ["qwen3-delta", "qwen3"])
def test_capture_does_not_change_what_attention_receives(models, tmp_path, monkeypatch, kind):
    """The cpt objective's forward hands every attention sublayer the same thing (no mask: SDPA's
    is_causal path) whether or not a stream is capturing -- so a compiled sublayer's guards hold
    between the graph step's warm-up and its capture -- and the logits under "capture" equal the
    same model's SDPA given the causal mask as an explicit [B, 1, T, T] tensor (both float64:
    agreement to rounding, 1e-10)."""
    control = kind == "qwen3"
    trainer = CPTTrainer(CPTConfig(src=str(models[kind]), out=str(tmp_path / "run"), control=control,
                                   seq_len=32, **RUN))
    rows = trainer.train_rows[:2]  # [2, T+1]
    seen = {}
    for on in (False, True):
        _capturing(monkeypatch, on)
        seen[on] = _masks_seen(trainer.model, lambda: trainer._objective(rows))
    assert len(seen[False]) == len(seen[True]) == 2
    assert all(m is None for m in seen[False] + seen[True]), [type(m) for m in seen[True]]

    model64 = copy.deepcopy(trainer.model).double().eval()
    ref = copy.deepcopy(model64)  # the same weights and buffers, on plain "sdpa" given the causal
    ref.set_attn_implementation("sdpa")  # mask explicitly (transformers' eager softmax is float32)
    T = rows.shape[1] - 1
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None].expand(2, 1, T, T)  # [B, 1, T, T]
    with torch.no_grad():
        _capturing(monkeypatch, True)
        got = model64(rows[:, :-1], use_cache=False).logits  # [2, T, V]
        _capturing(monkeypatch, False)
        want = ref(rows[:, :-1], attention_mask=causal, use_cache=False).logits  # [2, T, V]
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    trainer.close()


def test_training_attention_refuses_what_is_not_a_plain_causal_row():
    """No mask is only right for whole unpadded rows: anything else is an error, not a wrong answer."""
    assert causal_without_mask(q_length=5, kv_length=5) is None
    with pytest.raises(ValueError, match="padding mask"):
        causal_without_mask(q_length=5, kv_length=5, attention_mask=torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="cache"):
        causal_without_mask(q_length=1, kv_length=5)
    assert causal_without_mask(q_length=5, kv_length=5, local_size=8) is None  # the window covers the row
    with pytest.raises(ValueError, match="sliding window"):
        causal_without_mask(q_length=5, kv_length=5, local_size=4)
    with pytest.raises(ValueError, match="bidirectional"):
        causal_without_mask(q_length=5, kv_length=5, config=Qwen3Config(is_causal=False))


def test_cpt_of_a_converted_model_then_eval_at_its_training_length(models, tmp_path):
    """The GPU run's chain without --seq-len (the CPU midtrain test always passed one, so eval read
    it from train_config.json): cpt trains at min(1024, the position limit) and records that length;
    the saved model says "sdpa"; `mhar eval` of the converted model's run works and uses it."""
    out = tmp_path / "cpt-mhar"
    summary = cpt(CPTConfig(src=str(models["qwen3-delta"]), out=str(out), **RUN))
    assert summary["seq_len"] == LIMIT
    assert json.loads((out / "train_config.json").read_text())["seq_len"] == LIMIT
    for d in (out, out / "ema"):
        assert TRAINING_ATTENTION not in (d / "config.json").read_text()
        assert saved.load_model(d, "model", local_files_only=True).config._attn_implementation == "sdpa"
    res = run_eval(EvalConfig(run=str(out), tasks=["mhar_heldout_ppl"], limit=2, batch_size=2, device="cpu"),
                   log=lambda *a: None)
    assert res.provenance["max_length"] == LIMIT
    assert res.provenance["train"]["seq_len"] == LIMIT
    assert "mhar_heldout_ppl" in res.metrics


def test_eval_length_of_a_converted_model_without_settings(models):
    """A converted model's config nests its base's (max_position_embeddings under text_config): with
    no training length recorded, eval falls back to that limit instead of refusing."""
    model = saved.load_model(models["qwen3-delta"], "model", local_files_only=True)
    assert getattr(model.config, "max_position_embeddings", None) is None  # the nesting the bug missed
    assert eval_max_length(models["qwen3-delta"], {}, model, None) == LIMIT
    with pytest.raises(EvalError, match="exceeds the model's position limit 64"):
        eval_max_length(models["qwen3-delta"], {}, model, LIMIT + 1)


def test_compiled_sublayers_do_not_recompile_when_capture_begins(models, tmp_path, monkeypatch):
    """The GPU failure's mechanism: the attention sublayers compiled (`compile_sublayers`, as the
    trainer does on CUDA) trace once in the graph step's eager warm-up; the same forward under
    "capture" must hit the graphs already made -- a recompilation there is what CUDA refused.
    The backend only counts the graphs dynamo hands it (no code generation on the CPU)."""
    from mhar_probe.compiled import compile_sublayers

    compiled: list[int] = []

    def counting(gm, example_inputs):
        compiled.append(len(example_inputs))
        return gm.forward

    torch._dynamo.reset()
    trainer = CPTTrainer(CPTConfig(src=str(models["qwen3-delta"]), out=str(tmp_path / "run"), seq_len=32, **RUN))
    compile_sublayers(trainer.model, backend=counting)
    rows = trainer.train_rows[:2]  # [2, T+1]
    _capturing(monkeypatch, False)
    trainer._objective(rows)[0].backward()  # the warm-up
    warm = len(compiled)
    assert warm >= 2  # the attention and the MLP graph (shared by the layers)
    _capturing(monkeypatch, True)
    trainer._objective(rows)[0].backward()  # the capture
    assert len(compiled) == warm, f"{len(compiled) - warm} graph(s) compiled inside the capture"
    torch._dynamo.reset()
    trainer.close()


def test_a_window_shorter_than_the_row_is_one_line_before_anything_is_written(models, tmp_path, capsys):
    """A base whose layers attend within a sliding window shorter than the training row would be
    trained on the wrong attention by the mask-free path: `mhar cpt` refuses it with one line and
    exit status 2, before the output directory exists; at a --seq-len below the window it trains."""
    from mhar_probe.cli.cpt import main as cpt_main

    base = Qwen3ForCausalLM.from_pretrained(models["qwen3"])
    base.config.use_sliding_window, base.config.sliding_window, base.config.max_window_layers = True, 16, 0
    base.config.layer_types = ["sliding_attention"] * base.config.num_hidden_layers
    src = tmp_path / "windowed"
    base.save_pretrained(src)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (models["qwen3"] / f).exists():
            (src / f).write_bytes((models["qwen3"] / f).read_bytes())
    args = ["--control", "--steps", "1", "--batch-size", "4", "--eval-every", "1", "--eval-batches", "1",
            "--corpus-max-bytes", "150000", "--no-progress"]
    out = tmp_path / "refused"
    capsys.readouterr()
    assert cpt_main([str(src), "--out", str(out), "--seq-len", "32", *args]) == 2
    # (transformers' weight-loading progress bar comes first: the refusal is after the model is read)
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("mhar cpt: error: "), lines
    assert "window of 16 tokens" in lines[0] and "--seq-len below 16" in lines[0], lines
    assert not out.exists()
    assert cpt_main([str(src), "--out", str(tmp_path / "ok"), "--seq-len", "8", *args]) == 0
