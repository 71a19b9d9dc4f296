"""Identity-preserving conversion of a pretrained Llama / Qwen3-family causal LM to the delta form.

    convert_model(base, ...)            wrap an in-memory base model (no weight copy)
    convert_checkpoint(src, dst, ...)   read a Hugging Face checkpoint directory, convert, check
                                        max |logits_converted - logits_base| == 0 on a probe
                                        batch, and save model + tokenizer atomically to dst
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from ..atomic import build_dir
from ..model.config import ConfigError
from ..model.delta_config import DEFAULT_ROUTING_HEADS, MHARDeltaConfig, supported_text
from ..model.delta_modeling import MHARDeltaForCausalLM
from ..model.routing import check_backend, set_routing_backend
from ..outputs import OutputKind, check_output
from ..model.saved import check_config_values, check_finite, check_weights
from ..rundir import load_pretrained
from ..runfiles import read_json_object
from .errors import ConversionError


def delta_config_for(base_config, num_blocks: int | None = None, heads: int = DEFAULT_ROUTING_HEADS,
                     eps: float | None = None, routing_backend: str = "eager") -> MHARDeltaConfig:
    """The converted model's config; raises `ConversionError` before any weight is read, also for
    a `routing_backend` that is unknown, unavailable here or cannot route H heads of width d
    (the backend is not part of the config: `convert_model` sets it on the model)."""
    if getattr(base_config, "model_type", None) == MHARDeltaConfig.model_type:
        raise ConversionError("the source is already a converted (mhar_delta) model")
    config = MHARDeltaConfig(text_config=base_config, num_blocks=num_blocks, routing_heads=heads,
                             routing_eps=eps)
    try:  # every delta site makes one read of width d with H heads
        check_backend(routing_backend, [(config.hidden_size, config.routing_heads)])
    except ConfigError as exc:
        raise ConversionError(str(exc)) from None
    return config


def convert_model(base: PreTrainedModel, num_blocks: int | None = None, heads: int = DEFAULT_ROUTING_HEADS,
                  eps: float | None = None, routing_backend: str = "eager") -> MHARDeltaForCausalLM:
    """Wrap `base` in place (its modules become `model.base`); routing parameters get the base's
    dtype and device, and it routes with `routing_backend`. The result computes exactly what
    `base` computed (gates are zero)."""
    config = delta_config_for(base.config, num_blocks, heads, eps, routing_backend)
    impl = getattr(base.config, "_attn_implementation", None)
    if impl:
        config._attn_implementation = impl
    param = next(base.parameters())
    model = set_routing_backend(MHARDeltaForCausalLM(config, base=base), routing_backend)
    with torch.no_grad():  # only the new routing parameters move; base weights are untouched
        for p in [model.null_source, *model.sites.parameters()]:
            p.data = p.data.to(device=param.device, dtype=param.dtype)
    if getattr(base, "generation_config", None) is not None:
        model.generation_config = base.generation_config
    model.train(base.training)
    return model


@dataclass(frozen=True)
class ConversionReport:
    dst: Path
    base_type: str
    num_layers: int
    num_blocks: int
    routing_heads: int
    dtype: str
    new_parameters: int
    max_logit_deviation: float | None  # on the probe batch; None when not checked
    tokenizer_copied: bool


def _probe_ids(vocab_size: int, batch: int = 2, length: int = 16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=g)


def convert_checkpoint(src: str | Path, dst: str | Path, num_blocks: int | None = None,
                       heads: int = DEFAULT_ROUTING_HEADS, eps: float | None = None,
                       routing_backend: str = "eager", overwrite: bool = False,
                       verify: bool = True) -> ConversionReport:
    """Convert the checkpoint directory `src` and save it (with its tokenizer) to `dst`.

    Written to a temporary directory beside `dst` and renamed into place; an existing `dst` is
    replaced only with `overwrite=True`. With `verify`, the converted model's logits on a probe
    batch must equal the base's exactly (max deviation 0), else `ConversionError`.
    """
    src, dst = Path(src), Path(dst)
    if not (src / "config.json").is_file():
        raise ConversionError(f"{src} is not a Hugging Face model directory (no config.json); "
                              f"save the base with save_pretrained first")
    check_output(dst, CONVERTED_MODEL, overwrite=overwrite, inputs=[("model", src)])
    check_config_values(read_json_object(src / "config.json", "a model config"), str(src / "config.json"))
    try:  # sizes checked above: a config with 10^9 layers is not looped over here
        base_config = AutoConfig.from_pretrained(src)
    except (ValueError, KeyError, OSError, TypeError) as exc:
        raise ConversionError(f"cannot read {src / 'config.json'} ({type(exc).__name__}: {exc}); "
                              f"{supported_text()}") from exc
    delta_config_for(base_config, num_blocks, heads, eps, routing_backend)  # fail fast, before the weights
    check_weights(src, base_config, extra_ok=True)  # names, shapes, floating dtypes; nothing loaded yet

    base = load_pretrained(AutoModelForCausalLM.from_pretrained, src, "base model", dtype="auto").eval()
    check_finite(base, src)
    ids = _probe_ids(base.config.vocab_size)
    with torch.no_grad():
        reference = base(ids).logits if verify else None
    model = convert_model(base, num_blocks, heads, eps, routing_backend).eval()
    deviation = None
    if reference is not None:
        with torch.no_grad():
            deviation = (model(ids).logits.float() - reference.float()).abs().max().item()
        if deviation != 0.0:
            raise ConversionError(f"converted model deviates from the base by {deviation:g} at step 0 "
                                  f"(expected exactly 0); nothing was written")

    tokenizer_copied = False

    def fill(tmp: Path) -> None:
        nonlocal tokenizer_copied
        model.save_pretrained(tmp)
        tokenizer_copied = _copy_tokenizer(src, tmp)

    # mode 0755: an ordinary directory (staging is private otherwise); an existing dst is
    # moved aside and removed only once the new one is in place
    build_dir(dst, fill, replace=True, mode=0o755)
    cfg = model.config
    return ConversionReport(
        dst=dst, base_type=cfg.text_config.model_type, num_layers=cfg.num_hidden_layers,
        num_blocks=cfg.num_blocks, routing_heads=cfg.routing_heads, dtype=str(next(base.parameters()).dtype),
        new_parameters=sum(p.numel() for p in [model.null_source, *model.sites.parameters()]),
        max_logit_deviation=deviation, tokenizer_copied=tokenizer_copied)


def is_converted_dir(path: Path) -> bool:
    """A directory `mhar convert` wrote: its config.json says model_type mhar_delta."""
    try:
        return json.loads((path / "config.json").read_text()).get("model_type") == MHARDeltaConfig.model_type
    except (OSError, ValueError, AttributeError):
        return False


#: what `mhar convert` writes: --overwrite replaces only one of these
CONVERTED_MODEL = OutputKind("converted model", directory=True, is_own=is_converted_dir,
                             marker=f"config.json with model_type {MHARDeltaConfig.model_type}", error=ConversionError)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def _copy_tokenizer(src: Path, out: Path) -> bool:
    """Save the source's tokenizer beside the converted weights; warn (not fail) if it has none.

    Called from `convert_checkpoint`'s fill through `atomic.build_dir`: the warning's stacklevel
    names `convert_checkpoint`'s caller."""
    if not any((src / name).is_file() for name in TOKENIZER_FILES):
        warnings.warn(f"{src} has no tokenizer ({', '.join(TOKENIZER_FILES)}); the converted model is "
                      f"saved without one -- copy the base's tokenizer into it before training", stacklevel=5)
        return False
    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
    except Exception as exc:  # a tokenizer is there but broken: the user must fix it
        raise ConversionError(f"the tokenizer in {src} does not load ({type(exc).__name__}: {exc}); "
                              f"nothing was written") from exc
    tokenizer.save_pretrained(out)
    return True
