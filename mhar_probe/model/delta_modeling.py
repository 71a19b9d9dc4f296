"""`MHARDeltaForCausalLM`: a pretrained Llama / Qwen3-family causal LM with delta-form depth routing.

The base model (`AutoModelForCausalLM.from_config(config.text_config)`) runs unchanged; a
forward pre-hook on each of its 2L+1 pre-sublayer norms (every layer's `input_layernorm` and
`post_attention_layernorm`, and the final `norm`) replaces the norm's input h by

    x_s = h + gate_s * route_H(sources_s(h))          (routing.route, any backend)

while the decoder layer's residual add keeps reading h. `sources_s` is the shared
`DeltaSources` bookkeeping of the from-scratch `delta` method: a learnable null source, one
delta per completed block of consecutive layers, and the current block's partial delta.
gate_s, the query and the key-norm weight of every site are `DeltaSite` parameters (gate 0,
query 0, key norm 1 at init), so the converted model computes exactly the base at step 0.

Parameter names: the base's own under `base.` (e.g. `base.model.layers.0.mlp.up_proj.weight`),
the routing's under `sites.{s}.` and `null_source`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .delta_config import ConversionError, MHARDeltaConfig, supported_text
from .hf_compat import cache_field, one_cache
from .layers import RMSNorm
from .residual import ChainSources, DeltaSite, DeltaSources
from .siteplan import chain_layers_per_block, delta_block_of_layer, site_plan

try:  # transformers >= 5: init functions that skip weights already loaded from a checkpoint
    from transformers import initialization as _init
except ImportError:  # pragma: no cover - older transformers
    _init = nn.init


def decoder_of(base: PreTrainedModel) -> nn.Module:
    """The base's decoder stack (`.model` for Llama / Qwen3 / Qwen2 / Mistral), checked for the
    pre-norm layout the routing hooks rely on."""
    decoder = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    layers = getattr(decoder, "layers", None)
    ok = (layers is not None and isinstance(getattr(decoder, "norm", None), nn.Module) and len(layers) > 0
          and all(hasattr(layer, "input_layernorm") and hasattr(layer, "post_attention_layernorm")
                  for layer in layers))
    if not ok:
        raise ConversionError(f"{type(base).__name__} does not have the pre-norm decoder layout "
                              f"(layers with input_layernorm / post_attention_layernorm, final norm); "
                              f"{supported_text()}")
    return decoder


class MHARDeltaPreTrainedModel(PreTrainedModel):
    config_class = MHARDeltaConfig
    config: MHARDeltaConfig
    base_model_prefix = ""
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Routing parameters at their identity-preserving values: query 0, gate 0, key norm 1,
        null source 0. (The base's own modules are initialised by the base class.)"""
        if isinstance(module, DeltaSite):
            _init.zeros_(module.query)
            _init.zeros_(module.gate)
            if hasattr(module, "null"):
                _init.zeros_(module.null)
        elif isinstance(module, RMSNorm):
            _init.ones_(module.weight)
        elif isinstance(module, MHARDeltaForCausalLM) and hasattr(module, "null_source"):
            _init.zeros_(module.null_source)


class MHARDeltaForCausalLM(MHARDeltaPreTrainedModel, GenerationMixin):
    """A base causal LM plus 2L+1 delta routing sites around its pre-sublayer norms.

    `base` (optional) wraps an already-built base model in place instead of building a fresh
    one from `config.text_config` (how `convert_model` avoids a second copy of the weights).
    """

    def __init__(self, config: MHARDeltaConfig, base: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        if base is None:
            impl = getattr(config, "_attn_implementation", None)
            kwargs: dict[str, Any] = {"attn_implementation": impl} if impl else {}
            base = AutoModelForCausalLM.from_config(config.text_config, **kwargs)
        self.base = base
        decoder = decoder_of(base)
        L, d = config.num_hidden_layers, config.hidden_size
        if len(decoder.layers) != L:
            raise ConversionError(f"base has {len(decoder.layers)} layers but its config says {L}")
        self.block_of_layer = delta_block_of_layer(L, config.num_blocks)
        if not config.null_per_site:
            self.null_source = nn.Parameter(torch.zeros(d))  # learnable null source  [d]
        plan = site_plan("delta", L, routing_heads=config.routing_heads, delta_num_blocks=config.num_blocks,
                         delta_sources=config.delta_sources)
        self.sites = nn.ModuleList(DeltaSite(d, config.routing_heads, config.routing_eps, s.index, s.layer, s.kind,
                                             own_null=config.null_per_site) for s in plan.sites)
        norms = [n for layer in decoder.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
        for s, norm in enumerate([*norms, decoder.norm]):
            norm.register_forward_pre_hook(partial(self._route_into_norm, s))
        self._sources: DeltaSources | None = None  # the current forward pass's source list
        self.post_init()

    # ------------------------------------------------------------------ routing hook
    def _route_into_norm(self, site: int, norm: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """Pre-hook of norm s: its input h [B, T, d] becomes h + gate_s * route(sources_s(h))."""
        h = args[0]
        if site == 0:  # the first site of a pass (layer 0's attention) opens a new source list
            self._sources = self._new_sources()
        if self._sources is None:
            raise RuntimeError("delta routing hooks ran out of order: the decoder must be called from layer 0")
        return (self.sites[site](h, self._sources(site, h)), *args[1:])

    def _new_sources(self) -> DeltaSources | ChainSources:
        """The source bookkeeping of one forward pass, by the config's rule (siteplan.py)."""
        cfg = self.config
        nulls = [site.null for site in self.sites] if cfg.null_per_site else [self.null_source] * len(self.sites)
        if cfg.delta_sources == "boundary_chain":
            L = cfg.num_hidden_layers
            return ChainSources(L, chain_layers_per_block(L, cfg.num_blocks), nulls)
        return DeltaSources(self.block_of_layer, nulls[0])

    # ------------------------------------------------------------------ HF plumbing
    def get_input_embeddings(self) -> nn.Module:
        return self.base.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module | None:
        return self.base.get_output_embeddings()

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.base.set_output_embeddings(value)

    def get_decoder(self) -> nn.Module:
        return decoder_of(self.base)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None, cache: Any = None,
                inputs_embeds: Tensor | None = None, labels: Tensor | None = None,
                use_cache: bool | None = None, logits_to_keep: int | Tensor = 0,
                past_key_values: Any = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                ) -> CausalLMOutputWithPast | tuple:
        """The base model's forward (its loss, cache and masks); routing enters through the hooks.
        The KV cache comes as `cache` (transformers >= 5.24) or `past_key_values`; any other keyword
        is a TypeError, never silently dropped."""
        optional = {k: v for k, v in dict(output_attentions=output_attentions, return_dict=return_dict,
                                          output_hidden_states=output_hidden_states).items() if v is not None}
        try:
            return self.base(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache,
                             logits_to_keep=logits_to_keep, **cache_field(one_cache(cache, past_key_values)),
                             **optional)
        finally:
            # activation checkpointing re-runs layers in backward and needs the pass's sources
            if not (torch.is_grad_enabled() and self._checkpointing()):
                self._sources = None

    def _checkpointing(self) -> bool:
        """Whether the base re-runs its layers in backward (activation checkpointing)."""
        return any(getattr(m, "gradient_checkpointing", False) is True for m in self.base.modules())


MHARDeltaForCausalLM.register_for_auto_class("AutoModelForCausalLM")  # save_pretrained writes auto_map + code
