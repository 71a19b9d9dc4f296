"""What differs between the transformers 5.x releases this model supports, in one place.

The KV cache: transformers >= 5.24 passes it to `forward` as `cache=` and returns it in the
model outputs' `cache` field; earlier 5.x releases use `past_key_values` for both. The model
takes either name and returns the cache under the field the installed release declares, so
`generate()` finds it on every release.

This module is part of the code a saved run carries (`auto_map`), so it imports only
transformers and torch.
"""

from __future__ import annotations

from typing import Any

from transformers.modeling_outputs import BaseModelOutputWithPast

#: the name the installed transformers gives the KV cache (forward argument and output field)
CACHE_NAME = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


def one_cache(cache: Any, past_key_values: Any) -> Any:
    """The KV cache passed under either name; both at once is refused."""
    if cache is not None and past_key_values is not None:
        raise TypeError("the KV cache was passed twice, as `cache` and as `past_key_values`; pass one "
                        "(`past_key_values` is the name before transformers 5.24)")
    return cache if cache is not None else past_key_values


def cache_field(cache: Any) -> dict[str, Any]:
    """Keyword arguments that put `cache` into a transformers model output of this release."""
    return {CACHE_NAME: cache}


def refuse_unsupported_outputs(output_attentions: bool | None, output_hidden_states: bool | None) -> None:
    """The decoder returns neither attention maps nor per-layer hidden states; say where they are."""
    if output_attentions:
        raise ValueError("output_attentions=True is not supported: attention runs through SDPA, which "
                         "returns no weights; depth-routing weights are at the hook points "
                         "(`sites.{s}.hook_weights`, see mhar_probe.capture)")
    if output_hidden_states:
        raise ValueError("output_hidden_states=True is not supported: read the residual sources at the "
                         "hook points instead (`sites.{s}.hook_sources`, see mhar_probe.capture)")
