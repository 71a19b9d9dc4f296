"""The mid-training objective's extras: logit z-loss, weight-decay groups and a weight EMA.

z-loss (PaLM, Chowdhery et al. 2022, sec. 5): with z = log sum_v exp(logit_v) per position,

    loss = CE + c * mean_positions(z^2),        c = 1e-4

which keeps the softmax normaliser near 1 (z near 0) without changing the argmax.

Weight decay (decoupled, AdamW) 0.05 on every matrix of the network *except* embedding
tables (the input embedding, and so also an LM head tied to it); norms, biases and every
routing parameter (per-site query [d], gate [], key-norm weight [d], null source [d]) are
vectors or scalars and are not decayed. Rule: decay <=> ndim >= 2 and not an embedding.
Routing is excluded on purpose: decay pulls a gate towards 0, i.e. back towards the base
model, and a query's scale is the routing softmax's temperature -- neither is a weight
whose norm should be penalised (the same reason norms' gains are excluded). An untied LM
head is a projection matrix and is decayed.

Weight EMA: theta_ema <- beta * theta_ema + (1 - beta) * theta after every optimizer step,
starting from the initial (pretrained / converted) weights; no bias correction.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..parallel import full_tensor, shard_like


def z_loss(logits: Tensor, coef: float) -> Tensor:
    """c * mean(logsumexp(logits)^2) over all positions; logits [..., V] (computed in fp32)."""
    z = torch.logsumexp(logits.float(), dim=-1)  # [...]
    return coef * z.square().mean()


def embedding_parameters(model: nn.Module) -> set[int]:
    """ids of the weights of every `nn.Embedding` (a tied LM head shares one of them)."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


def decay_split(model: nn.Module) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """(decayed, not decayed) named trainable parameters, by the rule in the module docstring."""
    embeddings = embedding_parameters(model)
    decay, keep = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and id(p) not in embeddings else keep).append((name, p))
    return decay, keep


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decayed matrices with `weight_decay`, the rest with 0."""
    decay, keep = decay_split(model)
    return [dict(params=[p for _, p in decay], weight_decay=weight_decay),
            dict(params=[p for _, p in keep], weight_decay=0.0)]


class WeightEMA:
    """Exponential moving average of the trainable parameters (kept in fp32, sharded like the
    parameters under FSDP2)."""

    def __init__(self, model: nn.Module, beta: float) -> None:
        self.beta = beta
        self.params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self.shadow = {n: p.detach().float().clone() for n, p in self.params.items()}

    @torch.no_grad()
    def update(self) -> None:
        """shadow <- beta * shadow + (1 - beta) * theta."""
        for name, p in self.params.items():
            self.shadow[name].lerp_(p.detach().float(), 1.0 - self.beta)

    @torch.no_grad()
    def swap(self) -> None:
        """Exchange parameter and EMA values in place (call twice to undo)."""
        for name, p in self.params.items():
            tmp = p.detach().float().clone()
            p.detach().copy_(self.shadow[name])
            self.shadow[name].copy_(tmp)

    def full_state(self) -> dict[str, Tensor]:
        """Full CPU tensors by parameter name (a collective per tensor under FSDP2)."""
        return {n: full_tensor(t).detach().cpu() for n, t in self.shadow.items()}

    @torch.no_grad()
    def load(self, state: dict[str, Tensor]) -> None:
        if set(state) != set(self.shadow):
            raise ValueError("EMA state does not match the model's parameters")
        for name, t in self.shadow.items():
            t.copy_(shard_like(state[name].float(), t))
