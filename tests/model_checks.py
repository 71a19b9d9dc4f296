"""Shared by the tests that compare two forms of one model (compiled against eager): the
next-token loss of some rows and every parameter's gradient."""

from __future__ import annotations

import torch


def loss_and_grads(model: torch.nn.Module, rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Cross-entropy of predicting rows[:, 1:] from rows[:, :-1] ([B, T] token ids), and each
    parameter's gradient of it (cloned; parameters without one are left out)."""
    model.zero_grad(set_to_none=True)
    logits = model(rows[:, :-1], use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
