"""The MHAR decoder: a Qwen3-style pre-norm Transformer whose residual method is one config field.

    baseline  h' = h + f(LN(h)),  h = h' + g(LN(h'))                       (eq. resid)
    hyper     n = 4 hyper-connection streams (Zhu et al. 2024), `hyper-connections` package
    attnres   x_s = route_{H=1}(sources[0:N_s]);  sources.append(f(LN(x_s)))   (eq. route)
    mhar      the same with H heads                                          (eq. mh)
    mhar_hw   attention sites: one full-width query per KV group feeds that group's Q/K/V
    delta     x_s = h + gate_s * route([null, block deltas]);  h += f(LN(x_s))
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from .config import MHARConfig
from .hf_compat import CACHE_NAME, cache_field, one_cache, refuse_unsupported_outputs
from .layers import MLP, Attention, RMSNorm, RotaryEmbedding, causal_mask
from .methods import method
from .residual import DeltaSite, DeltaSources, RoutingSite
from .routing import DEFAULT_BACKEND, get_backend
from .siteplan import delta_block_of_layer, site_plan_of


class DecoderLayer(nn.Module):
    """Attention and MLP sublayers with their input norms; the residual wiring lives in the model."""

    def __init__(self, config: MHARConfig, layer_idx: int) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Attention(d, config.num_attention_heads, config.num_key_value_heads,
                                   config.head_dim, eps, layer_idx)
        self.mlp = MLP(d, config.intermediate_size)
        self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)

    def attn(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache) -> Tensor:
        return self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)

    def ffn(self, x: Tensor) -> Tensor:
        return self.mlp(self.post_attention_layernorm(x))


def hyper_sublayer(hc: nn.Module, sublayer: Callable[..., Tensor], streams: Tensor, *args) -> Tensor:
    """One sublayer inside its hyper-connection `hc` (the `hyper-connections` package's
    `HyperConnections`; Zhu et al. 2024, Alg. 2 with its dynamic alpha and beta), streams
    H = [h_1 .. h_n] [(B n), T, d] -> H' [(B n), T, d]:

        Hn = RMSNorm(H)                                               # per stream, [B, T, n, d]
        A  = A_static + s_a tanh(Hn W_a)                              # [B, T, n, 1 + n]
        b  = b_static + s_b tanh(Hn w_b)                              # [B, T, n]
        x  = sum_r A[r, 0] h_r                                        # the branch input [B, T, d]
        h'_s = sum_r A[r, 1 + s] h_r + b_s sublayer(x)                # width and depth connection

    The package computes all of it (`x, add = hc(streams)`; `add` is the depth connection)."""
    x, add = hc(streams)  # x [B, T, d]
    return add(sublayer(x, *args))  # [(B n), T, d]


class MHARPreTrainedModel(PreTrainedModel):
    config_class = MHARConfig
    config: MHARConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["DecoderLayer"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """N(0, 0.02^2) for linear and embedding weights; norms, queries and gates keep their
        constructor values (ones, zeros, zeros); hyper-connection parameters keep the package's."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(mean=0.0, std=std)


class MHARModel(MHARPreTrainedModel):
    def __init__(self, config: MHARConfig) -> None:
        super().__init__(config)
        d, L = config.hidden_size, config.num_hidden_layers
        self.method = config.residual_method
        props = method(self.method)
        if props.replaces:  # the source stack's backend; routing.set_routing_backend sets it
            self.routing_backend = DEFAULT_BACKEND
            self.routing_kernels: object = None  # the backend's options (triton: a KernelConfig)
        self.embed_tokens = nn.Embedding(config.vocab_size, d)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(L))
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta)
        self.sites = nn.ModuleList(self._make_sites(config))
        if props.hyper_streams:
            try:  # only this method needs the package (a saved run's code does not require it)
                from hyper_connections import HyperConnections
            except ImportError as exc:
                raise ImportError("residual_method='hyper' needs the hyper-connections package: "
                                  "pip install hyper-connections") from exc
            n = config.hyper_streams
            self.hyper = nn.ModuleList(HyperConnections(n, dim=d, layer_index=i) for i in range(2 * L))
        if props.delta:
            self.null_source = nn.Parameter(torch.zeros(d))
            self.block_of_layer = delta_block_of_layer(L, config.delta_num_blocks)
        self.post_init()

    @staticmethod
    def _make_sites(config: MHARConfig) -> list[nn.Module]:
        """One module per site of the config's site plan (siteplan.py), in call order."""
        d, H, eps = config.hidden_size, config.routing_heads, config.rms_norm_eps
        plan = site_plan_of(config)
        if method(config.residual_method).delta:
            return [DeltaSite(d, H, eps, s.index, s.layer, s.kind) for s in plan.sites]
        return [RoutingSite(d, H, eps, s.index, s.layer, s.kind, num_sources=s.num_sources,
                            num_queries=s.num_queries) for s in plan.sites]

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    # ------------------------------------------------------------------ forward
    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None, cache: Cache | None = None,
                inputs_embeds: Tensor | None = None, use_cache: bool | None = None,
                past_key_values: Cache | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                ) -> BaseModelOutputWithPast | tuple:
        """Final-normed hidden states [B, T, d]. The KV cache comes as `cache` (transformers >= 5.24)
        or `past_key_values` (earlier); any other keyword is a TypeError, never silently dropped."""
        refuse_unsupported_outputs(output_attentions, output_hidden_states)
        cache = one_cache(cache, past_key_values)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # [B, T, d]
        B, T, _ = inputs_embeds.shape
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None and not self.training:
            cache = DynamicCache(config=self.config)
        cache = cache if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0
        if T + past > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {T + past} exceeds max_position_embeddings="
                             f"{self.config.max_position_embeddings}")
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=inputs_embeds.device).expand(B, T)
        cos, sin = self.rotary_emb(inputs_embeds, position_ids)
        mask = _attention_mask(attention_mask, T, past, inputs_embeds.device)
        h = self._wiring(inputs_embeds, cos, sin, mask, cache)
        out = BaseModelOutputWithPast(last_hidden_state=self.norm(h), **cache_field(cache))
        return out if return_dict is not False else out.to_tuple()

    def _wiring(self, h: Tensor, cos, sin, mask, cache) -> Tensor:
        """The residual wiring of the model's method: routed, delta, hyper-connections or additive."""
        props = method(self.method)
        wiring = (self._routed if props.replaces else self._delta if props.delta
                  else self._hyper if props.hyper_streams else self._additive)
        return wiring(h, cos, sin, mask, cache)

    def _additive(self, h: Tensor, cos, sin, mask, cache) -> Tensor:
        for layer in self.layers:
            h = h + layer.attn(h, cos, sin, mask, cache)
            h = h + layer.ffn(h)
        return h

    #: one sublayer inside its hyper-connection; `compiled.compile_sublayers` shadows it on the
    #: instance with one compiled region (hyper-connection, sublayer and depth connection fused)
    hyper_sublayer = staticmethod(hyper_sublayer)

    def _hyper(self, h: Tensor, cos, sin, mask, cache) -> Tensor:
        """n streams, each starting as the embedding; every sublayer reads and writes them through its
        hyper-connection (`hyper_sublayer`); the output is their sum."""
        n = self.config.hyper_streams
        streams = h.repeat_interleave(n, dim=0)  # [(B n), T, d]
        for i, layer in enumerate(self.layers):
            streams = self.hyper_sublayer(self.hyper[2 * i], layer.attn, streams, cos, sin, mask, cache)
            streams = self.hyper_sublayer(self.hyper[2 * i + 1], layer.ffn, streams)
        return streams.view(-1, n, *streams.shape[1:]).sum(dim=1)  # [B, T, d]

    def _routed(self, emb: Tensor, cos, sin, mask, cache) -> Tensor:
        params = [(site.query, site.key_norm.weight) for site in self.sites]  # in call order
        backend = get_backend(self.routing_backend, self.routing_kernels)  # with the model's kernel config
        stack = backend.new_stack(self.config.num_sources, params=params)
        stack.append(emb)  # source 0
        for i, layer in enumerate(self.layers):
            stack.append(layer.attn(self.sites[2 * i](stack), cos, sin, mask, cache))  # source 2l+1
            stack.append(layer.ffn(self.sites[2 * i + 1](stack)))  # source 2l+2
        return self.sites[-1](stack)

    def _delta(self, h: Tensor, cos, sin, mask, cache) -> Tensor:
        sources = DeltaSources(self.block_of_layer, self.null_source)  # null + block deltas
        for i, layer in enumerate(self.layers):
            h = h + layer.attn(self.sites[2 * i](h, sources(2 * i, h)), cos, sin, mask, cache)
            h = h + layer.ffn(self.sites[2 * i + 1](h, sources(2 * i + 1, h)))
        return self.sites[-1](h, sources(len(self.sites) - 1, h))


def _attention_mask(attention_mask: Tensor | None, T: int, past: int, device) -> Tensor | None:
    """None when no key is padding (the attention applies the causal mask itself); else a bool
    [B, 1, T, past+T]: query t sees key j iff j <= past + t (`causal_mask`) and key j is not padding.

    `attention_mask` covers the cached and the new tokens ([B, past+T], transformers' convention).
    """
    if attention_mask is None:
        return None
    if attention_mask.shape[-1] < past + T:
        raise ValueError(f"attention_mask covers {attention_mask.shape[-1]} tokens, but the cache holds {past} "
                         f"and {T} are new: pass the mask of all {past + T}")
    if bool(attention_mask.all()):
        return None
    keys = attention_mask[:, -(past + T):].bool()  # [B, S]
    mask = causal_mask(T, past + T, device)[None, None] & keys[:, None, None, :]
    return mask | ~mask.any(-1, keepdim=True)  # fully padded query rows attend anywhere (ignored)


class MHARForCausalLM(MHARPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MHARConfig) -> None:
        super().__init__(config)
        self.model = MHARModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    @property
    def sites(self) -> nn.ModuleList:
        return self.model.sites

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None, cache: Cache | None = None,
                inputs_embeds: Tensor | None = None, labels: Tensor | None = None,
                use_cache: bool | None = None, logits_to_keep: int = 0,
                past_key_values: Cache | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                ) -> CausalLMOutputWithPast | tuple:
        """Logits [B, T, V] (the last `logits_to_keep` positions when it is set) and, with `labels`,
        the mean next-token cross-entropy. Arguments as `MHARModel.forward`."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         cache=one_cache(cache, past_key_values), inputs_embeds=inputs_embeds,
                         use_cache=use_cache, output_attentions=output_attentions,
                         output_hidden_states=output_hidden_states)
        h = out.last_hidden_state
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            # transformers' convention: labels align with input_ids and are shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                                   ignore_index=-100)
        result = CausalLMOutputWithPast(loss=loss, logits=logits, **cache_field(getattr(out, CACHE_NAME)))
        return result if return_dict is not False else result.to_tuple()


MHARForCausalLM.register_for_auto_class("AutoModelForCausalLM")  # save_pretrained writes auto_map + code
