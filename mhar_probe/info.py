"""`mhar info`: what a run (or a preset) is made of: parameters by part, FLOPs per token, config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .errors import UserError
from .model import MHARConfig, MHARForCausalLM
from .model.saved import check_config_values
from .model.config import PAPER_ROUTING_HEADS, PAPER_VOCAB_SIZE, routing_heads_reason
from .rundir import require_run_dir
from .runfiles import CONFIG, RunFiles, read_model_config

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


def preset_vocabulary(preset: str, vocab_size: int | None) -> tuple[int, str]:
    """The vocabulary a preset is counted with, and why: `vocab_size` if given, else the paper's
    151,936 at the paper's presets (so parameter counts match its tables), else the model default
    (`tiny`: the 4,096-word BPE `mhar train` trains locally)."""
    if vocab_size is not None:
        return vocab_size, "--vocab-size"
    if preset in PAPER_ROUTING_HEADS:
        return PAPER_VOCAB_SIZE, "the paper's Qwen3 tokenizer; --vocab-size 4096 for a local run's default"
    return MHARConfig().vocab_size, "mhar train's default BPE; --vocab-size to change"


def load_config(run: str | None, preset: str | None, method: str | None, heads: int | None,
                vocab_size: int | None = None) -> MHARConfig:
    if run is not None:
        path = require_run_dir(run)
        cfg_file = RunFiles(path).config_path
        if not cfg_file.exists():
            raise UserError(f"{path} has no {CONFIG} yet (the run has not finished)")
        read_model_config(cfg_file, check_config_values)  # its sizes checked before any loop
        try:
            return MHARConfig.from_pretrained(path)
        except Exception as exc:  # corrupt json
            raise UserError(f"cannot read {cfg_file}: {exc}") from exc
    if preset is None:
        raise UserError("give a run directory or --preset (and --method)")
    return MHARConfig.from_preset(preset, residual_method=method or "mhar", routing_heads=heads,
                                  vocab_size=preset_vocabulary(preset, vocab_size)[0])


def describe(run: str | None, *, preset: str | None = None, method: str | None = None,
             heads: int | None = None, vocab_size: int | None = None, as_text: bool = False) -> Any:
    """Parameters by part, training FLOPs per token and the config of a run, or of a preset
    (counted with `preset_vocabulary`); the vocabulary counted is stated (embedding = V x d)."""
    from .flops import flops_per_token

    if run is not None and vocab_size is not None:
        raise UserError("--vocab-size is for a preset; a run is counted with its own vocabulary")
    config = load_config(run, preset, method, heads, vocab_size)
    vocab_source = ("this run's tokenizer" if run is not None
                    else preset_vocabulary(str(config.preset), vocab_size)[1])
    with torch.device("meta"):
        model = MHARForCausalLM(config)
    seq_len = config.max_position_embeddings // 2
    info = dict(
        run=run, method=config.residual_method, preset=config.preset, routing_heads=config.routing_heads,
        routing_heads_reason=routing_heads_reason(config),
        vocab_size=config.vocab_size, vocab_source=vocab_source,
        parameters=parameters_by_part(model), flops_per_token=flops_per_token(config, seq_len),
        seq_len_for_flops=seq_len, config=json.loads(config.to_json_string()),
    )
    if run is not None and RunFiles(Path(run)).summary_path.exists():
        info["summary"] = RunFiles(Path(run)).summary()
    if not as_text:
        return info
    lines = [f"method {info['method']}  preset {info['preset']}  H {info['routing_heads']} "
             f"({info['routing_heads_reason']})"]
    lines.append(f"vocabulary {info['vocab_size']:,} ({vocab_source})")
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
