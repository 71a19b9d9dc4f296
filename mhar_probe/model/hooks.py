"""TransformerLens-style hook points.

A `HookPoint` is an identity module placed where an activation is worth reading; users attach
ordinary forward hooks to it (see `mhar_probe.capture`). Routing sites expose
`hook_sources` [N, B, T, d], `hook_weights` [N, B, T, H] and `hook_out` [B, T, d].
"""

from __future__ import annotations

from torch import Tensor, nn


class HookPoint(nn.Module):
    """Identity; `active` says whether any forward hook is attached (so callers can skip
    materialising an expensive activation, e.g. the stacked sources, when nobody listens)."""

    def __init__(self) -> None:
        super().__init__()
        self.name: str = ""

    @property
    def active(self) -> bool:
        return bool(self._forward_hooks) or bool(self._forward_pre_hooks)

    def forward(self, x: Tensor) -> Tensor:
        return x
