"""`mhar info`: what a run (or a preset) is made of: parameters by part, FLOPs per token, config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .errors import UserError
from .model import MHARConfig, MHARForCausalLM
from .model.config import routing_heads_reason
from .model.saved import check_config_values
from .rundir import require_run_dir
from .runfiles import read_json_object, read_summary

PARTS = (  # (part, predicate on the parameter name), first match wins
    ("embedding", lambda n: "embed_tokens" in n or n.startswith("lm_head")),
    ("routing", lambda n: ".sites." in n or "null_source" in n),
    ("hyper_connections", lambda n: ".hyper." in n),
    ("attention", lambda n: ".self_attn." in n and "_norm" not in n),
    ("mlp", lambda n: ".mlp." in n),
    ("norms", lambda n: "norm" in n),
)


def parameters_by_part(model: torch.nn.Module) -> dict[str, int]:
    counts = {part: 0 for part, _ in PARTS}
    for name, p in model.named_parameters():  # tied weights are listed once
        part = next(part for part, match in PARTS if match(name))
        counts[part] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


def load_config(run: str | None, preset: str | None, method: str | None, heads: int | None) -> MHARConfig:
    if run is not None:
        path = require_run_dir(run)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise UserError(f"{path} has no config.json yet (the run has not finished)")
        check_config_values(read_json_object(cfg_file, "a model config"), str(cfg_file))  # before any loop
        try:
            return MHARConfig.from_pretrained(path)
        except Exception as exc:  # corrupt json
            raise UserError(f"cannot read {cfg_file}: {exc}") from exc
    if preset is None:
        raise UserError("give a run directory or --preset (and --method)")
    return MHARConfig.from_preset(preset, residual_method=method or "mhar", routing_heads=heads)


def describe(run: str | None, *, preset: str | None = None, method: str | None = None,
             heads: int | None = None, as_text: bool = False) -> Any:
    from .flops import flops_per_token

    config = load_config(run, preset, method, heads)
    with torch.device("meta"):
        model = MHARForCausalLM(config)
    seq_len = config.max_position_embeddings // 2
    info = dict(
        run=run, method=config.residual_method, preset=config.preset, routing_heads=config.routing_heads,
        routing_heads_reason=routing_heads_reason(config),
        parameters=parameters_by_part(model), flops_per_token=flops_per_token(config, seq_len),
        seq_len_for_flops=seq_len, config=json.loads(config.to_json_string()),
    )
    if run is not None and (Path(run) / "summary.json").exists():
        info["summary"] = read_summary(Path(run) / "summary.json")
    if not as_text:
        return info
    lines = [f"method {info['method']}  preset {info['preset']}  H {info['routing_heads']} "
             f"({info['routing_heads_reason']})"]
    lines.append("parameters:")
    lines += [f"  {k:<20} {v:>14,}" for k, v in info["parameters"].items()]
    lines.append(f"training FLOPs per token (T={seq_len}):")
    lines += [f"  {k:<20} {v:>14.3%}" if k.endswith("fraction") else f"  {k:<20} {v:>14,.0f}"
              for k, v in info["flops_per_token"].items()]
    if "summary" in info:
        s = info["summary"]
        if s.get("tail_mean_val_loss") is not None:
            lines.append(f"tail-mean val loss {s['tail_mean_val_loss']:.4f} after {s.get('steps')} steps")
    return "\n".join(lines)
