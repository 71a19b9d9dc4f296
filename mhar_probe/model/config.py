"""Model configuration: one Hugging Face config for every residual method.

The paper's presets (appendix "Architecture", Table "main") are in `PRESETS`; `tiny` trains
in minutes on two CPU cores.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from transformers import PretrainedConfig

from .methods import METHODS, method  # noqa: F401  (METHODS: re-exported, the benchmarks import it here)
from .methods import REPLACEMENT_METHODS as ROUTED_METHODS  # noqa: F401  (benchmarks/kernels/host_model_cpu.py)
from .errors import UserError

PRESETS: dict[str, dict[str, Any]] = {
    # name: d, L, heads, kv heads, FFN, context (T); head_dim = d / heads
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=384, seq_len=128),
    "100m": dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8,
                 num_key_value_heads=4, intermediate_size=1536, seq_len=2048),
    "124m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=4, intermediate_size=2304, seq_len=2048),
    "350m": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                 num_key_value_heads=8, intermediate_size=4096, seq_len=1024),
    "1b": dict(hidden_size=1280, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=8, intermediate_size=5120, seq_len=1024),
}


#: routing heads of `mhar` at the paper's scales: it adopts H = 8 for its models (Table main,
#: "MHAR (H=8)" at 100M with KV = 4). `tiny` and other methods keep H = KV (mhar_hw needs H = G).
PAPER_ROUTING_HEADS = {"100m": 8, "124m": 8, "350m": 8, "1b": 8}
#: the paper's vocabulary (the Qwen3 tokenizer, tied embeddings) at its presets; local runs train a
#: smaller BPE on their corpus (`mhar train --vocab-size`, 4,096 by default)
PAPER_VOCAB_SIZE = 151_936


def routing_heads_reason(config: "MHARConfig") -> str:
    """Why `config` routes with the heads it has, in words (for `mhar info`)."""
    H, kv, name = config.routing_heads, config.num_key_value_heads, config.residual_method
    props = method(name)
    if not props.has_routing_heads:
        return f"{name} does not route"
    if props.head_count == "one":
        return f"{name} routes with one head (MHAR at H = 1)"
    if name == "mhar" and PAPER_ROUTING_HEADS.get(config.preset) == H:
        other = "equal to KV here" if H == kv else f"--heads {kv} for H = KV"
        return f"H = {H}: the paper's choice at preset {config.preset}; {other}"
    if H == kv:
        return f"H = KV = {kv}" + (f"; {name} has one full-width query per KV group" if props.head_wise else "")
    return f"H = {H}, set by --heads (KV = {kv})"


def drop_saved_backend(kwargs: dict[str, Any]) -> None:
    """Remove the `routing_backend` a config written before the backend became a run-time setting
    (routing.set_routing_backend) names: read and ignored, never saved again. Any other than the
    default is worth a warning: the model routes with eager until it is set (a script that still
    passes routing_backend='triton' to the config would otherwise time the reference)."""
    name = kwargs.pop("routing_backend", None)
    if name not in (None, "eager"):
        warnings.warn(f"routing_backend={name!r} in a model config is ignored: the backend is a run-time "
                      f"setting, set it with mhar_probe.model.set_routing_backend(model, {name!r})", stacklevel=3)


class ConfigError(UserError):
    """A configuration the model cannot be built from; the message names the field to fix."""


#: the largest value of each size field a real decoder has (the largest released models stay
#: well inside: d 16384-25600, L 126-160, vocab 256K, FFN 53248-73728, context 1M-10M); a
#: config.json beyond them is damaged, and refused before anything that size is allocated or
#: looped over
SIZE_LIMITS: dict[str, int] = {
    "vocab_size": 1 << 22, "hidden_size": 1 << 16, "num_hidden_layers": 1 << 10, "num_attention_heads": 1 << 10,
    "num_key_value_heads": 1 << 10, "head_dim": 1 << 12, "intermediate_size": 1 << 18,
    "max_position_embeddings": 1 << 24, "routing_heads": 1 << 10, "hyper_streams": 64, "delta_num_blocks": 1 << 10,
}


def check_size(name: str, value: Any) -> int:
    """`value` of the size field `name` is an integer in [1, SIZE_LIMITS[name]], else `ConfigError`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name}={value!r:.80} must be a positive integer")
    if value > SIZE_LIMITS.get(name, value):
        raise ConfigError(f"{name}={value} is beyond any real model (at most {SIZE_LIMITS[name]})")
    return value


def check_positive_floats(config: Any, names: tuple[str, ...]) -> None:
    """Each of `names` on `config` is a finite number above 0 (an epsilon, a RoPE base)."""
    for name in names:
        value = getattr(config, name, None)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
            raise ConfigError(f"{name}={value!r:.80} must be a finite number above 0")


class MHARConfig(PretrainedConfig):
    """Qwen3-style decoder with a selectable residual method.

    Sources and sites (replacement forms `attnres`, `mhar`, `mhar_hw`): source 0 is the token
    embedding, layer l appends its attention output as source 2l+1 and its MLP output as
    source 2l+2 (N = 2L+1). Site 2l (attention input of layer l) reads sources [0, 2l+1),
    site 2l+1 (MLP input) reads [0, 2l+2), site 2L (before the final norm) reads all 2L+1.
    """

    model_type = "mhar"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 128,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        num_key_value_heads: int = 2,
        head_dim: int | None = None,
        intermediate_size: int = 384,
        max_position_embeddings: int = 256,
        rms_norm_eps: float = 1e-6,
        rope_theta: float = 1e4,
        initializer_range: float = 0.02,
        tie_word_embeddings: bool = True,
        residual_method: str = "baseline",
        routing_heads: int | None = None,
        hyper_streams: int = 4,
        delta_num_blocks: int = 2,
        preset: str | None = None,
        bos_token_id: int | None = None,
        eos_token_id: int | None = 0,
        pad_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim  # None: d / heads, set by validate once both are known to be integers
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.initializer_range = initializer_range
        self.residual_method = residual_method
        self.routing_heads = routing_heads if routing_heads is not None else num_key_value_heads
        drop_saved_backend(kwargs)  # an old config.json's routing_backend
        self.hyper_streams = hyper_streams
        self.delta_num_blocks = delta_num_blocks
        self.preset = preset
        # what transformers' generation / attention utilities look for
        self.hidden_act = "silu"
        self.use_cache = kwargs.pop("use_cache", True)
        super().__init__(
            tie_word_embeddings=tie_word_embeddings, bos_token_id=bos_token_id,
            eos_token_id=eos_token_id, pad_token_id=pad_token_id, **kwargs,
        )
        self.validate()

    # ------------------------------------------------------------------ helpers
    @property
    def num_sources(self) -> int:
        """N = 2L + 1 sources of the replacement forms."""
        return 2 * self.num_hidden_layers + 1

    @property
    def num_sites(self) -> int:
        """2L + 1 routing sites: attention and MLP of every layer, plus the final site."""
        return 2 * self.num_hidden_layers + 1

    #: fields that must be positive integers (a config.json edited by hand may hold anything)
    POSITIVE_INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "num_key_value_heads", "head_dim", "intermediate_size", "max_position_embeddings",
                           "routing_heads", "hyper_streams", "delta_num_blocks")

    def validate(self) -> None:
        """Raise `ConfigError` naming the field to fix: types and the ranges a real model can
        have (`SIZE_LIMITS`), checked before anything is allocated or looped over."""
        for name in self.POSITIVE_INT_FIELDS:
            if name == "head_dim" and self.head_dim is None:
                continue
            check_size(name, getattr(self, name, 1))
        check_positive_floats(self, ("rms_norm_eps", "rope_theta"))
        if not isinstance(self.initializer_range, (int, float)) or isinstance(self.initializer_range, bool) \
                or not 0 <= self.initializer_range < math.inf:
            raise ConfigError(f"initializer_range={self.initializer_range!r} must be a finite number >= 0")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"tie_word_embeddings={self.tie_word_embeddings!r} must be true or false")
        if not isinstance(self.residual_method, str):
            raise ConfigError(f"residual_method={self.residual_method!r} must be a method name (a string)")
        if self.preset is not None and not isinstance(self.preset, str):
            raise ConfigError(f"preset={self.preset!r} must be a preset name (a string) or null")
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        try:
            props = method(self.residual_method)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                              f"num_key_value_heads={self.num_key_value_heads}")
        if self.routing_heads < 1 or self.hidden_size % self.routing_heads:
            raise ConfigError(f"hidden size d={self.hidden_size} is not divisible by routing heads "
                              f"H={self.routing_heads}; pick H that divides d")
        if props.head_count == "one" and self.routing_heads != 1:
            self.routing_heads = 1  # attnres is MHAR at H=1 by definition
        if props.delta and not 1 <= self.delta_num_blocks <= self.num_hidden_layers:
            raise ConfigError(f"delta_num_blocks={self.delta_num_blocks} must be between 1 and the number "
                              f"of layers ({self.num_hidden_layers})")

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "MHARConfig":
        """Build the paper's preset (`tiny`, `100m`, `124m`, `350m`, `1b`) with overrides."""
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
        values = dict(PRESETS[preset])
        seq_len = values.pop("seq_len")
        values["max_position_embeddings"] = 2 * seq_len  # paper: max_position_embeddings = 2T
        if values.get("num_hidden_layers", 0) and "delta_num_blocks" not in overrides:
            values["delta_num_blocks"] = max(1, values["num_hidden_layers"] // 4)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values.get("residual_method") == "mhar" and values.get("routing_heads") is None:
            values["routing_heads"] = PAPER_ROUTING_HEADS.get(preset)  # None: H = KV
        return cls(preset=preset, **values)

    @staticmethod
    def preset_seq_len(preset: str) -> int:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
        return int(PRESETS[preset]["seq_len"])


MHARConfig.register_for_auto_class()  # save_pretrained writes auto_map and this code
