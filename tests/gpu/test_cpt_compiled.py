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


@pytest.mark.parametrize("control", [False, True])
def test_cpt_compiles_its_sublayers_by_default_and_follows_the_eager_curve(tmp_path, monkeypatch, control):
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
