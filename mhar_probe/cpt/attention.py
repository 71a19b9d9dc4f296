"""The attention `mhar cpt` trains with: SDPA on the causal path, whether or not a CUDA graph is
being captured.

Training rows are packed and never padded, and the trainer runs without a KV cache, so every
query attends to the keys at or before it and the mask is the plain causal one:

    softmax(Q K^T / sqrt(d_head) + M) V,    M[i, j] = 0 if j <= i else -inf     (T_q = T_kv)

which SDPA computes with `is_causal=True` and no mask tensor (flash / cuDNN / efficient kernels).

Why not transformers' own "sdpa" mask: it decides whether it may skip the mask (and let SDPA use
`is_causal`) through `transformers.utils.import_utils.is_tracing`, which is also true while a CUDA
stream is capturing (`is_cuda_stream_capturing`). 5.17's `_ignore_causal_mask_sdpa` asks it for
every mask; 5.24's asks it only with a padding mask, but its `find_packed_sequence_indices` asks it
of the position ids, and a detected "packing" forbids the skip. Either way the eager warm-up of the
CUDA-graph step passes `attention_mask=None` into each attention sublayer while the capture passes
a materialised [B, 1, T, T] mask: a compiled sublayer misses its guard and recompiles inside the
capture (which CUDA refuses), and an eager one takes the slower masked SDPA kernel.

`TRAINING_ATTENTION` is registered through transformers' public `AttentionInterface` (the SDPA
forward itself) and `AttentionMaskInterface` (a mask function that returns no mask), so the path
depends on nothing but the inputs. The trainer switches a model to it only while it trains
(`use_training_attention`); `_attn_implementation` is not written to config.json, and saving goes
through `attention_implementation(model, saved)` anyway, so a saved model says "sdpa".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

from ..errors import UserError

#: the registered name of the training attention
TRAINING_ATTENTION = "mhar_causal_sdpa"
#: the implementation it stands in for (the one a loaded model uses by default)
REPLACES = "sdpa"


def causal_without_mask(*, q_length: int | None = None, kv_length: int | None = None, attention_mask: Any = None,
                        local_size: int | None = None, config: Any = None, **_: Any) -> None:
    """The mask of `TRAINING_ATTENTION`: none (SDPA then applies `is_causal=True`). Only right for
    whole unpadded rows of a causal model without a cache (T_q = T_kv, no padding mask, a sliding
    window or chunk no shorter than the row); anything else is refused rather than attended to wrongly.
    (Called by transformers' `create_*_mask` with keywords; the others it passes are not needed.)"""
    why = None
    if attention_mask is not None:
        why = "a padding mask"
    elif q_length is not None and kv_length is not None and q_length != kv_length:
        why = f"a cache (q_length {q_length}, kv_length {kv_length})"
    elif local_size is not None and kv_length is not None and kv_length >= local_size:
        why = f"a sliding window or chunk of {local_size} within a row of {kv_length}"
    elif config is not None and not getattr(config, "is_causal", True):
        why = "a bidirectional model"
    if why is not None:
        raise UserError(f"{TRAINING_ATTENTION} attends causally over whole unpadded rows; it got {why}")
    return None


def check_training_rows(config: Any, seq_len: int) -> None:
    """Refuse (a `UserError`, before anything is trained or written) a model whose rows of `seq_len`
    tokens the training attention would attend to wrongly: a sliding window or attention chunk
    shorter than the row, or a bidirectional model. Reads the text config's `layer_types` as
    transformers' mask code does."""
    text = config.get_text_config()
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    windows = [getattr(text, name, None) for kind, name in (("sliding_attention", "sliding_window"),
                                                            ("chunked_attention", "attention_chunk_size"))
               if kind in kinds]
    local = min((w for w in windows if w is not None), default=None)
    if local is not None and seq_len >= local:  # (>=, as transformers' own mask skip decides)
        raise UserError(f"mhar cpt trains whole rows without a mask, and this model attends within a "
                        f"window of {local} tokens; pass a --seq-len below {local} (now {seq_len})")
    causal_without_mask(q_length=seq_len, kv_length=seq_len, config=text)  # a bidirectional model


def register_training_attention() -> str:
    """Register `TRAINING_ATTENTION` with transformers (idempotent); returns its name."""
    AttentionInterface.register(TRAINING_ATTENTION, sdpa_attention_forward)
    AttentionMaskInterface.register(TRAINING_ATTENTION, causal_without_mask)
    return TRAINING_ATTENTION


def current_attention(model: nn.Module) -> str | None:
    return getattr(model.config, "_attn_implementation", None)


def use_training_attention(model: nn.Module) -> bool:
    """Switch an SDPA model (and its sub-models: a converted model's base) to `TRAINING_ATTENTION`
    in place; returns whether it did (a model on another implementation is left as it is)."""
    if current_attention(model) != REPLACES:
        return False
    model.set_attn_implementation(register_training_attention())
    return True


@contextlib.contextmanager
def attention_implementation(model: nn.Module, impl: str) -> Iterator[nn.Module]:
    """The block runs with `model` on the attention implementation `impl` (e.g. to save it as
    "sdpa"); the one before is restored after."""
    before = current_attention(model)
    if before is None or before == impl:
        yield model
        return
    model.set_attn_implementation(impl)
    try:
        yield model
    finally:
        model.set_attn_implementation(before)
