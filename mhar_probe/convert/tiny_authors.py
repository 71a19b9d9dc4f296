"""Tiny checkpoints in the paper authors' format, written without a GPU or a download: the offline
demo of the recipe "Probe the paper's released 8B pair" (notebooks/08_released_8b_pair.ipynb) and
the inputs of the importer's tests.

The layout is the authors' (modeling_{llama,qwen3}_attnres.py): a config.json of model_type
`llama_attnres` / `qwen3_attnres` with the `attnres_*` fields, and per layer l the tensors
`model.layers.{l}.{attn,mlp}_res_proj.weight` [Q, d] (Q = KV heads for full_hw's attention site,
else 1), `{attn,mlp}_res_norm.weight` [d], `{attn,mlp}_null_source` [d] (delta modes with null
sources), `{attn,mlp}_res_gate_logit` [] (sigmoid_scalar) or `{attn,mlp}_res_alpha` ([1] Llama,
[] Qwen3; learnable_alpha); the replacement modes add `model.final_res_{proj,norm}.weight`.
The names are written out here, not taken from `authors.py`, so that a test reading a checkpoint
written here checks the importer's names against a second spelling of the layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: a Llama-3.1-style base (Llama 3 RoPE scaling, untied head), tiny
LLAMA = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-5,
             rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
             tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu",
             bos_token_id=None, eos_token_id=None, pad_token_id=None)
#: a Qwen3 base (per-head q/k norm, tied head), tiny
QWEN3 = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-6,
             rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False, hidden_act="silu",
             bos_token_id=None, eos_token_id=None, pad_token_id=None)


def authors_config(base: str, mode: str, heads: int = 4, blocks: int = 4, null: bool = True,
                   gate: str = "bias", **overrides) -> dict:
    """The config.json of an authors' checkpoint on the tiny `base` ("llama" or "qwen3")."""
    fields = dict(LLAMA if base == "llama" else QWEN3)
    fields.update(overrides)
    return {"model_type": f"{base}_attnres", "architectures": [f"{base.capitalize()}AttnResForCausalLM"],
            "attnres_mode": mode, "attnres_num_blocks": blocks, "attnres_num_heads": heads,
            "attnres_use_null_source": null, "attnres_gate_type": gate, **fields}


def plain_config(cfg: dict) -> dict:
    """The config.json of the plain control of the authors' checkpoint `cfg`: the same base, no routing."""
    plain = {k: v for k, v in cfg.items() if not k.startswith("attnres")}
    base = cfg["model_type"].removesuffix("_attnres")
    plain.update(model_type=base, architectures=[f"{base.capitalize()}ForCausalLM"])
    return plain


def random_weights(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Float64 weights under the authors' names; queries and nulls large enough that routing is
    far from uniform, norms away from one so that each weight is seen."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.2, mean=0.0):
        return mean + scale * torch.randn(tuple(shape), generator=g, dtype=torch.float64)

    d, f, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    mode, qwen3 = cfg["attnres_mode"], cfg["model_type"] == "qwen3_attnres"
    w = {"model.embed_tokens.weight": rand(V, d, scale=0.2), "model.norm.weight": rand(d, mean=1.0)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(V, d, scale=0.2)
    for l in range(L):
        p = f"model.layers.{l}."
        w.update({p + "self_attn.q_proj.weight": rand(nh * hd, d), p + "self_attn.k_proj.weight": rand(nkv * hd, d),
                  p + "self_attn.v_proj.weight": rand(nkv * hd, d), p + "self_attn.o_proj.weight": rand(d, nh * hd),
                  p + "mlp.gate_proj.weight": rand(f, d), p + "mlp.up_proj.weight": rand(f, d),
                  p + "mlp.down_proj.weight": rand(d, f), p + "input_layernorm.weight": rand(d, mean=1.0),
                  p + "post_attention_layernorm.weight": rand(d, mean=1.0)})
        if qwen3:
            w[p + "self_attn.q_norm.weight"] = rand(hd, mean=1.0)
            w[p + "self_attn.k_norm.weight"] = rand(hd, mean=1.0)
        for kind in ("attn", "mlp"):
            rows = nkv if (mode == "full_hw" and kind == "attn") else 1
            w[p + f"{kind}_res_proj.weight"] = rand(rows, d, scale=0.25)
            w[p + f"{kind}_res_norm.weight"] = rand(d, mean=1.0)
            if mode.startswith("delta") and cfg["attnres_use_null_source"]:
                w[p + f"{kind}_null_source"] = rand(d, scale=1.0)
            if cfg["attnres_gate_type"] == "sigmoid_scalar":
                w[p + f"{kind}_res_gate_logit"] = rand(scale=1.0)
            elif cfg["attnres_gate_type"] == "learnable_alpha":
                w[p + f"{kind}_res_alpha"] = rand(*(() if qwen3 else (1,)), scale=0.5, mean=0.5)
    if not mode.startswith("delta"):
        w["model.final_res_proj.weight"] = rand(1, d, scale=0.25)
        w["model.final_res_norm.weight"] = rand(d, mean=1.0)
    return w


def base_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of `weights` a plain model has: every one but the routing's."""
    return {k: v for k, v in weights.items() if "_res_" not in k and "null_source" not in k}


def write_checkpoint(folder: Path, cfg: dict, weights: dict[str, torch.Tensor], shards: int = 1,
                     dtype: torch.dtype = torch.float32) -> Path:
    """config.json + model.safetensors (or `shards` files and their index) in `folder`."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    names = list(weights)
    tensors = {k: v.to(dtype).contiguous() for k, v in weights.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return folder
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(folder / file))
        weight_map.update({k: file for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def write_tiny_pair(root: Path, *, seed: int = 3, vocab_size: int = 512, corpus_max_bytes: int = 150_000
                    ) -> tuple[Path, Path]:
    """(root/mhar-src, root/plain-src): a released-pair stand-in in the authors' format, on a tiny
    Llama base (6 layers, d 32): a `delta_mh` model (4 blocks, H = 4, null sources) and its plain
    control with the same base weights, both with the embedded corpus's BPE tokenizer, so that
    `capture` and `eval` read text through them."""
    from ..data import get_tokenizer, load_corpus

    tok = get_tokenizer(load_corpus(max_bytes=corpus_max_bytes), vocab_size=vocab_size)
    cfg = authors_config("llama", "delta_mh", vocab_size=len(tok), max_position_embeddings=128,
                         eos_token_id=tok.eos_token_id)
    weights = random_weights(cfg, seed=seed)
    mhar = write_checkpoint(root / "mhar-src", cfg, weights)
    plain = write_checkpoint(root / "plain-src", plain_config(cfg), base_weights(weights))
    tok.save_pretrained(mhar)
    tok.save_pretrained(plain)
    return mhar, plain
