"""Loading what `mhar cpt` trains: a converted delta model, or (control) the plain base.

    converted dir (model_type mhar_delta), no --control  ->  MHARDeltaForCausalLM
    converted dir, --control                             ->  its base (weights under `base.`)
    plain Llama / Qwen3 dir, --control                   ->  that model
    plain dir, no --control                              ->  UserError (convert it first)

Weights are loaded in float32 (the optimizer's master weights; autocast gives bf16 compute
on GPU), so a converted model and its control start from bit-identical base weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModelForCausalLM

from ..errors import UserError
from ..model.routing import set_routing_backend
from ..parallel import decoder_layers
from ..model import saved


def read_config(src: Path) -> Any:
    """The model config of `src` (delta configs are registered by importing `convert`)."""
    from .. import convert  # noqa: F401  registers mhar_delta with the Auto classes

    if not (src / "config.json").is_file():
        raise UserError(f"{src} is not a Hugging Face model directory (no config.json)")
    return saved.read_config(src)


def is_converted(config: Any) -> bool:
    return getattr(config, "model_type", None) == "mhar_delta"


def text_config(config: Any) -> Any:
    """The base architecture's config (a converted model nests it as `text_config`)."""
    return config.text_config if is_converted(config) else config


def _read_weights(src: Path) -> dict[str, torch.Tensor]:
    index = src / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (src / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise UserError(f"{src} has no safetensors weights (model.safetensors)")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(src / name))
    return state


def load_base_of_converted(src: Path, config: Any) -> nn.Module:
    """The base model inside a converted directory, without the routing hooks."""
    saved.check_weights(src, config)
    base = AutoModelForCausalLM.from_config(config.text_config, dtype=torch.float32)
    state = {k[len("base."):]: v.float() for k, v in _read_weights(src).items() if k.startswith("base.")}
    missing, unexpected = base.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config.text_config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise UserError(f"{src}: the base weights do not match its config "
                        f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    saved.check_finite(base, src)
    return base


def load_cpt_model(src: Path, control: bool, routing_backend: str | None, kernels: object = None) -> nn.Module:
    """The model to continue-training, in float32 on CPU, in train mode (see module doc); a
    converted model routes with `routing_backend` and its options `kernels` (triton: a KernelConfig)."""
    config = read_config(src)
    if is_converted(config):
        if control:
            model = load_base_of_converted(src, config)
        else:
            model = saved.load_model(src, "converted model", config=config, dtype=torch.float32,
                                     local_files_only=True)
            set_routing_backend(model, routing_backend, kernels)
    elif control:
        model = saved.load_model(src, "model", config=config, dtype=torch.float32, local_files_only=True)
    else:
        raise UserError(f"{src} is a plain {config.model_type} model, not a converted one; convert it with "
                        f"`mhar convert {src} DST` and train DST, or pass --control to train it as is")
    model.config.use_cache = False
    return model.train()


def flops_per_token(model: nn.Module, seq_len: int) -> float:
    """Training FLOPs per token, Kaplan's convention as in `mhar_probe.flops`:

        6 N + 6 L T d_attn  (+ routing 3 * sum_s 4 d N_s for the delta form)

    N = matrix parameters of the decoder layers (embeddings / LM head excluded), d_attn =
    attention heads x head dim, N_s = sources read by delta site s."""
    cfg = text_config(model.config)
    layers = decoder_layers(model)
    n = sum(p.numel() for p in layers.parameters() if p.ndim >= 2)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    total = 6 * n + 6 * len(layers) * seq_len * cfg.num_attention_heads * head_dim
    if is_converted(model.config):
        from ..model.siteplan import site_plan_of

        total += 3 * sum(4 * cfg.hidden_size * site.num_sources for site in site_plan_of(model.config).sites)
    return float(total)
