"""Synthetic run directories (metrics.jsonl, summary.json, train_config.json, corpus.json)
for tests and documentation of the figure generators. Not real training: the curves are a
decaying exponential towards `final_loss` plus seeded noise, written in the trainer's format.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from mhar_probe.model.methods import routing_heads_of
from mhar_probe.runfiles import CORPUS, METRICS, SUMMARY, TRAIN_CONFIG


def write_run(root: str | Path, name: str, *, method: str, H: int | None = None, kv: int = 2, lr: float = 5e-4,
              seed: int = 0, preset: str = "tiny", steps: int = 100, eval_every: int = 5,
              final_loss: float = 3.0, initial_loss: float = 8.0, noise: float = 0.01,
              tokens_per_step: int = 4096, flops_per_token: float = 1e6, hidden_size: int | None = None,
              corpus: str = "embedded", composition: list[dict[str, Any]] | None = None,
              finished: bool = True) -> Path:
    """Write one synthetic run; returns its directory."""
    run = Path(root) / name
    run.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(f"{name}:{seed}".encode()))
    tau = max(1.0, steps / 6)
    rows = []
    for step in range(steps + 1):
        base = final_loss + (initial_loss - final_loss) * math.exp(-step / tau)
        row: dict[str, Any] = dict(step=step, tokens=step * tokens_per_step,
                                   flops=step * tokens_per_step * flops_per_token, lr=lr)
        if step:
            row.update(loss=base + 0.05 + float(rng.normal(0, noise * 3)), grad_norm=1.0, tokens_per_s=1e4)
        if step % eval_every == 0 or step == steps:
            row["val_loss"] = base + float(rng.normal(0, noise))
        rows.append(row)
    (run / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = {"hidden_size": hidden_size} if hidden_size else {}
    (run / TRAIN_CONFIG).write_text(json.dumps(dict(
        out=str(run), preset=preset, method=method, heads=H, kv_heads=kv, steps=steps, lr=lr, seed=seed,
        eval_every=eval_every, corpus=None if corpus == "embedded" else corpus, extra=extra)))
    evals = [r["val_loss"] for r in rows if "val_loss" in r]
    if finished:
        (run / SUMMARY).write_text(json.dumps(dict(
            finished=True, method=method, preset=preset, steps=steps,
            routing_heads=routing_heads_of(method, {"routing_heads": H}, default=kv), kv_heads=kv, lr=lr,
            seed=seed, tokens=rows[-1]["tokens"], flops=rows[-1]["flops"], initial_val_loss=evals[0],
            final_val_loss=evals[-1], tail_mean_val_loss=float(np.mean(evals[-11:])), tail_k=min(11, len(evals)),
            parameters=1_000_000 + (2 * 4 + 1) * 2 * 128 * (method != "baseline"))))
    (run / CORPUS).write_text(json.dumps(dict(
        name=corpus, fingerprint="synthetic", meta={},
        composition=composition or [
            dict(split="train", source="docs", documents=10, bytes=6000, share=0.6),
            dict(split="train", source="code", documents=5, bytes=4000, share=0.4),
            dict(split="val", source="docs", documents=1, bytes=500, share=1.0)])))
    return run


def tail_mean_of(run: str | Path, k: int = 11) -> float:
    """Mean of the last k val_loss values of a run's metrics.jsonl (independent of analysis.runs)."""
    vals = [json.loads(line)["val_loss"] for line in Path(run, METRICS).read_text().splitlines()
            if "val_loss" in json.loads(line)]
    return float(np.mean(vals[-k:]))
