"""Qwen3 building blocks: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP.

Parameter names follow transformers' Qwen3 so that a Qwen3ForCausalLM state dict loads into
the `baseline` method unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """y = g * (x / sqrt(mean(x^2) + eps)); statistic in fp32, rounded to x.dtype before * g."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE with theta (1e4): cos/sin [B, T, head_dim] for the given positions.

    The inverse frequencies are recomputed per call (head_dim/2 values) rather than kept in a
    buffer, so meta-device initialisation in `from_pretrained` cannot leave them unset.
    """

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.float, device=x.device) / self.head_dim
        inv_freq = 1.0 / (self.theta ** exponent)
        freqs = position_ids[..., None].float() * inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, hd]
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: [B, heads, T, hd]; cos/sin: [B, T, hd]."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def causal_mask(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """Bool [q_len, k_len]: the new queries are the last q_len of the k_len positions (a KV cache
    holds the first k_len - q_len), so query t sees key j iff j <= (k_len - q_len) + t.

    SDPA's `is_causal` aligns the triangle top-left (query t sees keys j <= t), which is this
    mask only when q_len == k_len; with a cache and several new tokens it hides the cached keys
    from all but the first queries, hence this bottom-right alignment.
    """
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len)


class Attention(nn.Module):
    """Grouped-query causal attention with per-head q/k RMSNorm, no biases.

    softmax(q k^T / sqrt(hd) + M) v, where M hides key j from query t unless j <= past + t
    (`causal_mask`; past = the cached length) and, with `attn_mask` (bool [B, 1, T, S], True =
    visible, built by the model from the padding mask), every key it marks invisible.

    `forward` takes either one input [B, T, d] (every method) or, for head-aligned routing
    (`mhar_hw`), one input per KV group [G, B, T, d]: group g's routed mixture feeds the
    Q/K/V projections of the heads in group g.
    """

    def __init__(self, d: int, n_heads: int, n_kv: int, head_dim: int, eps: float, layer_idx: int) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim, self.layer_idx = n_heads, n_kv, head_dim, layer_idx
        self.q_proj = nn.Linear(d, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d, n_kv * head_dim, bias=False)
        self.v_proj = nn.Linear(d, n_kv * head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * head_dim, d, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q [B, T, nh, hd], K and V [B, T, nkv, hd] from one input or per-group inputs."""
        hd = self.head_dim
        if x.dim() == 3:
            B, T, _ = x.shape
            q = self.q_proj(x).view(B, T, self.n_heads, hd)
            k = self.k_proj(x).view(B, T, self.n_kv, hd)
            v = self.v_proj(x).view(B, T, self.n_kv, hd)
            return q, k, v
        G, B, T, d = x.shape  # one routed input per KV group
        per = self.n_heads // self.n_kv
        wq = self.q_proj.weight.view(G, per * hd, d)
        wk = self.k_proj.weight.view(G, hd, d)
        wv = self.v_proj.weight.view(G, hd, d)
        q = torch.einsum("gbtd,ged->btge", x, wq).reshape(B, T, self.n_heads, hd)
        k = torch.einsum("gbtd,ged->btge", x, wk)
        v = torch.einsum("gbtd,ged->btge", x, wv)
        return q, k, v

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attn_mask: Tensor | None = None,
                cache=None) -> Tensor:
        q, k, v = self._project(x)
        B, T = q.shape[:2]
        q = apply_rope(self.q_norm(q).transpose(1, 2), cos, sin)  # [B, nh, T, hd]
        k = apply_rope(self.k_norm(k).transpose(1, 2), cos, sin)  # [B, nkv, T, hd]
        v = v.transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # [B, nkv, S, hd], S = past + T
        S = k.shape[2]
        causal = False
        if attn_mask is None and T > 1:  # no padding: the causal mask alone
            if S == T:
                causal = True  # no cache before these tokens: SDPA's own (fused) causal mask
            else:
                attn_mask = causal_mask(T, S, q.device)  # [T, S], after a KV cache
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                           enable_gqa=self.n_heads != self.n_kv)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
