"""Training FLOPs per token for every residual method.

Convention (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Sec. 2.1 and
Table 1): a forward pass costs 2 FLOPs per multiply-accumulate of every weight matrix,
C_forward = 2N + 2 n_layer n_ctx d_attn per token, where N counts the non-embedding
parameters and the second term is attention's QK^T and (softmax)V products averaged over a
causal context of length n_ctx. Training (forward + backward) costs 3x the forward, so

    C_train / token = 6 N + 6 L T d_attn          (+ 6 d V if `count_lm_head`)

Here N is counted from our Qwen3-style layer, exactly the matmul weights:
    per layer  d*(n_q*h) + 2*d*(n_kv*h) + (n_q*h)*d   (q, k, v, o projections; GQA)
             + 3*d*d_ff                               (SwiGLU gate, up, down)
with d_attn = n_q * h. RMSNorm weights, RoPE, softmaxes and residual additions are
element-wise O(d) work and are not counted (as in Kaplan). The tied LM head (2 d V forward)
is excluded by default, following Kaplan's non-embedding convention, and reported in
`lm_head`; Hoffmann et al. 2022 (Chinchilla, App. F) include it: pass count_lm_head=True.
`attention="full"` counts the un-masked T x T products (4 L T d_attn forward), which is
what `torch.utils.flop_counter` reports for scaled_dot_product_attention.

Routing (attnres, mhar, mhar_hw, delta), same multiply-accumulate convention: a site s with
N_s sources and one d-wide query scores every source, q . (g * s_n) * rsqrt(ms(s_n)) (2d
FLOPs; q*g is per-site and the RMS statistic per source is shared), and mixes the sources
with the softmax weights (2d FLOPs):

    routing forward / token = sum_s  Q_s * 4 d N_s,   training = 3x

where Q_s is the number of full-width queries at the site. Splitting the query into H heads
is a reshape: the same 4 d N_s for every H (attnres = mhar). N_s and Q_s come from the model's
site plan (`mhar_probe.model.siteplan`; README "Definitions"): site 2l reads 2l+1 sources, site
2l+1 reads 2l+2, the final site reads 2L+1, so sum_s N_s = (2L+1)(2L+2)/2. `mhar_hw` attention sites hold one
full-width query per KV group (Q_s = G = num_key_value_heads). `delta` sites read a learnable
null source, the completed block deltas and, within a block, the running partial delta: at
most 1 + num_blocks.

Hyper-connections (Zhu et al. 2024, Alg. 2; `hyper-connections` package) with n streams,
one module around every sublayer (2L modules), per token and module:
    dynamic alpha  norm(H) @ W_alpha : 2 d n (n+1)     dynamic beta norm(H) @ W_beta : 2 d n
    width mix      alpha^T H         : 2 d n (n+1)     depth        beta (x) out     : 2 d n
i.e. 4 d n (n+2) forward; x3 for training.
"""

from __future__ import annotations

from typing import Any, Literal

from .model.methods import method
from .model.siteplan import site_plan_of


def non_embedding_params(config: Any) -> int:
    """N: matmul weights of the decoder layers (attention projections + SwiGLU MLP)."""
    d, L = config.hidden_size, config.num_hidden_layers
    h, n_q, n_kv = config.head_dim, config.num_attention_heads, config.num_key_value_heads
    attn = d * n_q * h + 2 * d * n_kv * h + n_q * h * d
    mlp = 3 * d * config.intermediate_size
    return L * (attn + mlp)


def flops_per_token(
    config: Any,
    seq_len: int,
    *,
    count_lm_head: bool = False,
    attention: Literal["causal", "full"] = "causal",
    training: bool = True,
) -> dict[str, float]:
    """FLOPs per token, by part; `total` is what a run's `metrics.jsonl` accumulates.

    Keys: `dense` (6N), `attention` (6 L T d_attn), `lm_head` (6 d V, in `total` only if
    `count_lm_head`), `routing`, `hyper`, `total`, `routing_fraction` (routing + hyper over
    the rest of `total`), `non_embedding_params` (N). `training=False` gives forward FLOPs
    (everything / 3).
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if attention not in ("causal", "full"):
        raise ValueError(f"attention must be 'causal' or 'full', got {attention!r}")
    mult = 3.0 if training else 1.0
    d, L = config.hidden_size, config.num_hidden_layers
    N = non_embedding_params(config)
    d_attn = config.num_attention_heads * config.head_dim
    dense = mult * 2.0 * N
    attn = mult * (2.0 if attention == "causal" else 4.0) * L * seq_len * d_attn
    lm_head = mult * 2.0 * d * config.vocab_size
    routing = mult * sum(s.num_queries * 4.0 * d * s.num_sources for s in site_plan_of(config).sites)
    hyper = 0.0
    if method(config.residual_method).hyper_streams:
        n = config.hyper_streams
        hyper = mult * 2 * L * 4.0 * d * n * (n + 2)
    base = dense + attn + (lm_head if count_lm_head else 0.0)
    total = base + routing + hyper
    return dict(dense=dense, attention=attn, lm_head=lm_head, routing=routing, hyper=hyper, total=total,
                routing_fraction=(routing + hyper) / base, non_embedding_params=float(N))


def routing_fraction(config: Any, seq_len: int, **kw: Any) -> float:
    """Extra FLOPs of the method's residual mechanism relative to the same model's baseline."""
    return flops_per_token(config, seq_len, **kw)["routing_fraction"]


def preset_flops_per_token(preset: str, vocab_size: int, seq_len: int | None = None) -> float:
    """Training FLOPs per token of `preset`'s baseline at `vocab_size` (at the preset's sequence length
    unless `seq_len`): what a corpus's vocabulary costs the model (`mhar corpus image` chooses by it)."""
    from .model.config import MHARConfig

    config = MHARConfig.from_preset(preset, vocab_size=vocab_size)
    return float(flops_per_token(config, seq_len or MHARConfig.preset_seq_len(preset))["total"])

