"""`mhar cpt` on one CUDA process compiles its sublayers by default, as `mhar train` does
(pytest -m gpu tests/gpu): a converted (delta) Qwen3 and its plain control train with inductor-
compiled attention and MLP modules inside the CUDA-graph step, and follow the curve of the same
run with --no-compile-sublayers (bf16 autocast: the same curve, not the same bits)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

from mhar_probe.convert import convert_checkpoint  # noqa: E402
from mhar_probe.cpt import CPTConfig, cpt  # noqa: E402
from mhar_probe.runfiles import read_metrics  # noqa: E402

RUN = dict(steps=12, seq_len=64, batch_size=8, eval_every=4, eval_batches=1, corpus_max_bytes=300_000,
           lr=3e-3, warmup=1, progress=False, checkpoint_every=100, device="cuda")


def _models(tmp_path, monkeypatch) -> None:
    """A tiny random Qwen3 in tmp_path/base and its converted form in tmp_path/delta."""
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    from mhar_probe.data import get_tokenizer, load_corpus

    tok = get_tokenizer(load_corpus(max_bytes=300_000), vocab_size=512)
    torch.manual_seed(0)
    base = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256,
                                        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                        head_dim=32, max_position_embeddings=256, tie_word_embeddings=True,
                                        eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id))
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    convert_checkpoint(tmp_path / "base", tmp_path / "delta", heads=4, num_blocks=2)


def test_the_captured_attention_gets_no_mask(tmp_path, monkeypatch):
    """Issue 36's capture failure: inside `torch.cuda.graph` transformers' stream-capture check made
    the "sdpa" mask code materialise a [B, 1, T, T] mask that the eager warm-up did not pass, and
    the compiled attention recompiled inside the capture. Every attention call -- warm-up, capture,
    evaluation -- now gets no mask (SDPA's is_causal path), and some of them ran under capture."""
    from mhar_probe.compiled import decoder_layers
    from mhar_probe.cpt import CPTTrainer

    _models(tmp_path, monkeypatch)
    trainer = CPTTrainer(CPTConfig(src=str(tmp_path / "delta"), out=str(tmp_path / "run"), **{**RUN, "steps": 3}))
    seen: list[tuple[bool, bool]] = []  # (capturing, got a mask)
    for layer in decoder_layers(trainer.model):  # (the layer is not compiled; its self_attn is)
        layer.register_forward_pre_hook(
            lambda m, a, kw: seen.append((torch.cuda.is_current_stream_capturing(),
                                          kw.get("attention_mask") is not None)), with_kwargs=True)
    summary = trainer.run()
    assert summary["cuda_graphs"] is True and summary["compiled_sublayers"] is True
    assert any(capturing for capturing, _ in seen) and not any(mask for _, mask in seen)


@pytest.mark.parametrize("control", [False, True])
def test_cpt_compiles_its_sublayers_by_default_and_follows_the_eager_curve(tmp_path, monkeypatch, control):
    _models(tmp_path, monkeypatch)
    src = str(tmp_path / ("base" if control else "delta"))
    compiled = cpt(CPTConfig(src=src, out=str(tmp_path / "compiled"), control=control, **RUN))
    eager = cpt(CPTConfig(src=src, out=str(tmp_path / "eager"), control=control, compile_sublayers=False, **RUN))
    assert (compiled["compiled_sublayers"], eager["compiled_sublayers"]) == (True, False)
    assert compiled["cuda_graphs"] is True
    curves = [[m["loss"] for m in read_metrics(tmp_path / run / "metrics.jsonl") if "loss" in m]
              for run in ("compiled", "eager")]
    assert len(curves[0]) == len(curves[1]) == 12
    for a, b in zip(*curves):
        assert a == pytest.approx(b, abs=0.05)
    assert compiled["final_val_loss"] == pytest.approx(eager["final_val_loss"], abs=0.05)
