"""The independent reference for generation tests: greedy decoding by full recomputation."""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def greedy_without_cache(model, prompt: Tensor, steps: int, eos: int | None = None,
                         logits: list[Tensor] | None = None) -> Tensor:
    """Greedy continuation [<= steps] of one unpadded prompt [T] or [1, T]: every step recomputes
    the whole sequence with no KV cache and no attention mask; stops after `eos`. Each step's
    next-token logits [V] are appended to `logits` when it is given."""
    seq = prompt.reshape(1, -1)
    for _ in range(steps):
        last = model(seq, use_cache=False).logits[0, -1]
        if logits is not None:
            logits.append(last)
        nxt = last.argmax().reshape(1, 1)
        seq = torch.cat([seq, nxt], dim=1)
        if eos is not None and int(nxt) == eos:
            break
    return seq[0, prompt.numel():]
