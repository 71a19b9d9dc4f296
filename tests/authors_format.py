"""A float64 reference of the paper authors' forward, for the tiny authors-format checkpoints that
`mhar_probe.convert.tiny_authors` writes (re-exported here for the tests).

`reference_logits` computes the forward from the paper's equations and the authors' layout in
float64, with nothing from mhar_probe's models or importer (the checkpoint writer names the tensors
itself): RMSNorm, RoPE (Llama 3 frequency scaling included), grouped-query causal attention
(per-head q/k RMSNorm on Qwen3), SwiGLU, and per mode

    delta_mh / delta_block   x_s = h + g_s * sum_n softmax_n(q_s[h] . RMSNorm(v_n)[h]) v_n[h],
                             v = [null_s, c_0 .. c_{j-1}], c_0 = h_0, c_k = h_{kp} - c_{k-1},
                             c_k written after layer kp's attention site reads; h += sublayer(x)
    full / full_mh           x_s = route_H([emb, attn_0, mlp_0, ...][:s+1]); final site routes all
    full_hw                  attention sites: one full-width single-head read per KV group g,
                             whose mix feeds group g's Q/K/V projections
"""

from __future__ import annotations

import math

import torch

from mhar_probe.convert.tiny_authors import (LLAMA, QWEN3, authors_config, base_weights, plain_config,  # noqa: F401
                                             random_weights, write_checkpoint)


# ---------------------------------------------------------------------------- the reference
def rms(x, w, eps):
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def inv_frequencies(cfg: dict) -> torch.Tensor:
    """RoPE inverse frequencies; Llama 3 scaling: long wavelengths divided by `factor`, short ones
    kept, the band between interpolated smoothly."""
    hd = cfg["head_dim"]
    inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    scaling = cfg.get("rope_scaling")
    if not scaling:
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    mid = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)


def rope(x, pos, inv):  # x [heads, T, hd]
    ang = pos[:, None].double() * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def attention(cfg, w, l, xs, pos):
    """Causal GQA attention of layer l; xs [G, T, d]: group g's input feeds its heads' Q/K/V."""
    p = f"model.layers.{l}.self_attn."
    nh, nkv, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    per = nh // nkv
    T = xs.shape[1]
    inv = inv_frequencies(cfg)
    heads = []
    for i in range(nh):
        g = i // per
        x = xs[g if xs.shape[0] > 1 else 0]
        q = x @ w[p + "q_proj.weight"][i * hd:(i + 1) * hd].T  # [T, hd]
        k = x @ w[p + "k_proj.weight"][g * hd:(g + 1) * hd].T
        v = x @ w[p + "v_proj.weight"][g * hd:(g + 1) * hd].T
        if p + "q_norm.weight" in w:
            q, k = rms(q, w[p + "q_norm.weight"], eps), rms(k, w[p + "k_norm.weight"], eps)
        q, k = rope(q[None], pos, inv)[0], rope(k[None], pos, inv)[0]
        scores = q @ k.T / math.sqrt(hd)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        heads.append(scores.softmax(-1) @ v)
    return torch.cat(heads, -1) @ w[p + "o_proj.weight"].T


def mlp(w, l, x):
    p = f"model.layers.{l}.mlp."
    a = x @ w[p + "gate_proj.weight"].T
    return (a * torch.sigmoid(a) * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def route(sources, q, g, heads, eps):
    """sources [N, T, d]; q [d] split into `heads` heads; one softmax over n per head."""
    N, T, d = sources.shape
    K = rms(sources, g, eps).view(N, T, heads, d // heads)
    alpha = torch.einsum("hk,nthk->nth", q.view(heads, -1), K).softmax(0)
    return torch.einsum("nth,nthk->thk", alpha, sources.view(N, T, heads, -1)).reshape(T, d)


def gated(cfg, w, key, h, routed):
    """The authors' _apply_gate on h_attn = h + routed."""
    gate, h_attn = cfg["attnres_gate_type"], h + routed
    if gate == "sigmoid_scalar":
        s = torch.sigmoid(w[key + "res_gate_logit"])
        return (1 - s) * h + s * h_attn
    if gate == "learnable_alpha":
        a = w[key + "res_alpha"].reshape(())
        return (1 - a) * h + a * h_attn
    return h_attn


def reference_hidden(cfg: dict, w: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Final-normed hidden states [T, d] of one sequence `ids` [T], float64."""
    L, eps, mode = cfg["num_hidden_layers"], cfg["rms_norm_eps"], cfg["attnres_mode"]
    H = cfg["attnres_num_heads"] if mode in ("delta_mh", "full_mh", "full_hw") else 1
    pos = torch.arange(ids.shape[0])
    e = w["model.embed_tokens.weight"][ids]
    ln = lambda l, name, x: rms(x, w[f"model.layers.{l}.{name}.weight"], eps)  # noqa: E731
    if mode.startswith("delta"):
        p = max(1, -(-L // cfg["attnres_num_blocks"]))
        chain: list[torch.Tensor] = []
        h = e
        for l in range(L):
            k = f"model.layers.{l}.attn_"
            x = gated(cfg, w, k, h, route(torch.stack([w[k + "null_source"].expand_as(h), *chain]),
                                          w[k + "res_proj.weight"].reshape(-1), w[k + "res_norm.weight"], H, eps))
            a = attention(cfg, w, l, ln(l, "input_layernorm", x)[None], pos)
            if l % p == 0:
                chain.append(h if not chain else h - chain[-1])
            h = h + a
            k = f"model.layers.{l}.mlp_"
            x = gated(cfg, w, k, h, route(torch.stack([w[k + "null_source"].expand_as(h), *chain]),
                                          w[k + "res_proj.weight"].reshape(-1), w[k + "res_norm.weight"], H, eps))
            h = h + mlp(w, l, ln(l, "post_attention_layernorm", x))
        return rms(h, w["model.norm.weight"], eps)
    sources = [e]
    for l in range(L):
        k = f"model.layers.{l}.attn_"
        stack = torch.stack(sources)
        if mode == "full_hw":
            xs = torch.stack([route(stack, q, w[k + "res_norm.weight"], 1, eps) for q in w[k + "res_proj.weight"]])
        else:
            xs = route(stack, w[k + "res_proj.weight"].reshape(-1), w[k + "res_norm.weight"], H, eps)[None]
        sources.append(attention(cfg, w, l, ln(l, "input_layernorm", xs), pos))
        k = f"model.layers.{l}.mlp_"
        x = route(torch.stack(sources), w[k + "res_proj.weight"].reshape(-1), w[k + "res_norm.weight"], H, eps)
        sources.append(mlp(w, l, ln(l, "post_attention_layernorm", x)))
    out = route(torch.stack(sources), w["model.final_res_proj.weight"].reshape(-1),
                w["model.final_res_norm.weight"], H, eps)
    return rms(out, w["model.norm.weight"], eps)


def reference_logits(cfg: dict, w: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of `ids` [B, T], float64."""
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return torch.stack([reference_hidden(cfg, w, row) @ head.T for row in ids])


def reference_greedy(cfg: dict, w: dict[str, torch.Tensor], ids: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy continuation of `ids` [1, T] by `steps` tokens, recomputing the whole prefix each step."""
    out = ids
    for _ in range(steps):
        nxt = reference_logits(cfg, w, out)[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], 1)
    return out
