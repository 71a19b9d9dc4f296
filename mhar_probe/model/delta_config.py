"""`MHARDeltaConfig`: a pretrained causal LM's config plus the delta-form routing it grafts on.

The base model's config is kept whole as a nested config (`text_config`, saved as a dict in
config.json), so the base architecture -- its RoPE variant, biases, tied or untied embeddings,
GQA layout -- is rebuilt exactly by `AutoModelForCausalLM.from_config(text_config)`.
"""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, PretrainedConfig

from .config import drop_saved_backend
from .errors import UserError
from .siteplan import DELTA_SOURCES

# model_type of the base -> what the wrapper relies on: decoder at `.model` with `.layers` (each
# with `input_layernorm` and `post_attention_layernorm` in front of attention / MLP, the
# residual add reading the *un-normed* stream) and a final `.norm` before the LM head.
class ConversionError(UserError):
    """A source checkpoint or option that cannot be converted; the message says what to fix and
    what is supported. The CLI prints it on one line and exits with status 2."""


SUPPORTED_MODEL_TYPES = ("llama", "qwen3", "qwen2", "mistral")
DEFAULT_ROUTING_HEADS = 8


def supported_text() -> str:
    return f"supported base architectures: {', '.join(SUPPORTED_MODEL_TYPES)} (Hugging Face causal LMs)"


def default_num_blocks(num_layers: int) -> int:
    """One block per four consecutive layers (8 blocks for a 32-layer model), at least one."""
    return max(1, num_layers // 4)


class MHARDeltaConfig(PretrainedConfig):
    """Base config + delta routing: `num_blocks` block-aggregated sources, `routing_heads` heads.

    Each of the 2L+1 sites (attention and MLP input of every layer, the final norm) computes

        x_s = h + gate_s * route_H([null, delta_0, ..., delta_{b-1}, (h - h_b)])
        sublayer_s(norm_s(x_s)),   with the residual add still reading h,

    so gate_s = 0 (its initial value) reproduces the base model exactly.

    `delta_sources` picks the source rule (siteplan.py): "block_deltas" (what `mhar convert`
    grafts, above) or "boundary_chain" (the paper's released checkpoints, `mhar import`), and
    `null_per_site` gives every site a null source of its own (the released layout) instead of
    one shared null.
    """

    model_type = "mhar_delta"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]

    def __init__(
        self,
        text_config: PretrainedConfig | dict[str, Any] | None = None,
        num_blocks: int | None = None,
        routing_heads: int = DEFAULT_ROUTING_HEADS,
        routing_eps: float | None = None,
        delta_sources: str = "block_deltas",
        null_per_site: bool = False,
        **kwargs: Any,
    ) -> None:
        if isinstance(text_config, dict):
            text_config = dict(text_config)
            model_type = text_config.pop("model_type", None)
            if model_type is None:
                raise ConversionError(f"text_config has no model_type; {supported_text()}")
            text_config = AutoConfig.for_model(model_type, **text_config)
        self.text_config = text_config
        self.num_blocks = num_blocks
        self.routing_heads = routing_heads
        self.routing_eps = routing_eps
        self.delta_sources = delta_sources
        self.null_per_site = null_per_site
        drop_saved_backend(kwargs)  # an old config.json's routing_backend
        if text_config is not None:
            if self.num_blocks is None:
                self.num_blocks = default_num_blocks(text_config.num_hidden_layers)
            if self.routing_eps is None:
                self.routing_eps = float(getattr(text_config, "rms_norm_eps", 1e-6))
            # the wrapper ties exactly what the base ties
            kwargs["tie_word_embeddings"] = bool(getattr(text_config, "tie_word_embeddings", False))
        super().__init__(**kwargs)
        if text_config is not None:
            self.validate()

    # ------------------------------------------------------------------ derived sizes
    @property
    def hidden_size(self) -> int:
        return self.text_config.hidden_size

    @property
    def num_hidden_layers(self) -> int:
        return self.text_config.num_hidden_layers

    @property
    def vocab_size(self) -> int:
        return self.text_config.vocab_size

    # what the capture and the site plan read of a model config (the names of `MHARConfig`)
    residual_method = "delta"
    preset = None

    @property
    def delta_num_blocks(self) -> int:
        return self.num_blocks

    @property
    def num_attention_heads(self) -> int:
        return self.text_config.num_attention_heads

    @property
    def num_key_value_heads(self) -> int:
        return getattr(self.text_config, "num_key_value_heads", None) or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return getattr(self.text_config, "head_dim", None) or self.hidden_size // self.num_attention_heads

    @property
    def num_sites(self) -> int:
        """2L + 1 routing sites: attention and MLP input of every layer, plus the final norm."""
        return 2 * self.num_hidden_layers + 1

    def validate(self) -> None:
        """Raise `ConversionError` naming the option to fix and what is supported."""
        base_type = getattr(self.text_config, "model_type", None)
        if base_type not in SUPPORTED_MODEL_TYPES:
            raise ConversionError(f"cannot convert model_type {base_type!r}; {supported_text()}")
        L, d, H = self.num_hidden_layers, self.hidden_size, self.routing_heads
        if not isinstance(self.num_blocks, int) or not 1 <= self.num_blocks <= L:
            raise ConversionError(f"num_blocks={self.num_blocks} is impossible for a {L}-layer model; "
                                  f"choose 1 <= num_blocks <= {L} (default L//4 = {default_num_blocks(L)})")
        if self.delta_sources not in DELTA_SOURCES:
            raise ConversionError(f"delta_sources={self.delta_sources!r}; choose one of {', '.join(DELTA_SOURCES)}")
        if not isinstance(self.null_per_site, bool):
            raise ConversionError(f"null_per_site={self.null_per_site!r} must be true or false")
        if not isinstance(H, int) or H < 1 or d % H:
            divisors = [h for h in (1, 2, 4, 8, 16, 32, 64) if d % h == 0]
            raise ConversionError(f"routing heads H={H} must divide the hidden size d={d}; "
                                  f"e.g. one of {', '.join(map(str, divisors))}")


MHARDeltaConfig.register_for_auto_class()  # save_pretrained writes auto_map and this code
