"""Run directories: layout, atomic writes, checkpoints and metrics.

    RUN/
      config.json, model.safetensors   final model (Hugging Face format)
      tokenizer.json, ...              the tokenizer the run used
      train_config.json                every training option (`TrainConfig`)
      metrics.jsonl                    one line per step; val_loss on evaluation steps
      summary.json                     written last: tail-mean, final losses, finished flag
      checkpoint/                      latest resumable state (model + optimizer + step)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

import torch
from safetensors.torch import load_file, save_file

from .errors import UserError

CHECKPOINT = "checkpoint"


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def prepare_run_dir(out: Path, *, resume: bool, overwrite: bool) -> bool:
    """Create or validate the output directory; returns True when an existing run is resumed."""
    if out.exists() and not out.is_dir():
        raise UserError(f"output path {out} exists and is not a directory")
    has_content = out.exists() and any(out.iterdir())
    if resume:
        if not (out / CHECKPOINT / "state.json").exists():
            if has_content:
                raise UserError(f"cannot resume: {out} has no checkpoint ({out / CHECKPOINT}); "
                                f"use --overwrite to start over")
            out.mkdir(parents=True, exist_ok=True)
            return False
        return True
    if has_content:
        if not overwrite:
            raise UserError(f"output directory {out} already exists and is not empty; "
                            f"pass --overwrite to replace it or --resume to continue it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return False


def save_checkpoint(out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    state: dict[str, Any]) -> None:
    """Model weights (safetensors), optimizer state and trainer state, swapped in atomically."""
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=f".{CHECKPOINT}."))
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(_untie(tensors), tmp / "model.safetensors")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    atomic_write_json(tmp / "state.json", state)
    swap_in_checkpoint(out, tmp)


def swap_in_checkpoint(out: Path, tmp: Path) -> None:
    """Replace RUN/checkpoint by the fully written directory `tmp` (rename, never a partial copy)."""
    final, old = out / CHECKPOINT, out / f".{CHECKPOINT}.old"
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def _untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage: keep one copy of tied weights (reloaded by tying)."""
    seen: dict[int, str] = {}
    kept = {}
    for k, v in tensors.items():
        ptr = v.data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = k
        kept[k] = v
    return kept


def load_checkpoint(out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore model and optimizer in place; returns the trainer state. Clear errors if corrupt."""
    ckpt = out / CHECKPOINT
    try:
        state = json.loads((ckpt / "state.json").read_text())
        tensors = load_file(ckpt / "model.safetensors")
        opt_state = torch.load(ckpt / "optimizer.pt", weights_only=True, map_location="cpu")
    except FileNotFoundError as exc:
        raise UserError(f"checkpoint in {ckpt} is incomplete: {exc.filename} is missing") from exc
    except Exception as exc:  # corrupt json / safetensors / pickle
        raise UserError(f"checkpoint in {ckpt} is corrupt ({type(exc).__name__}: {exc}); "
                        f"use --overwrite to start over") from exc
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise UserError(f"checkpoint in {ckpt} does not match the model "
                        f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    optimizer.load_state_dict(opt_state)
    return state


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_metrics(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def require_run_dir(path: str | os.PathLike) -> Path:
    """A finished or checkpointed run directory, or a clear error."""
    run = Path(path)
    if not run.is_dir():
        raise UserError(f"run directory {run} does not exist")
    if not (run / "config.json").exists() and not (run / CHECKPOINT / "state.json").exists():
        raise UserError(f"{run} is not a run directory (no config.json and no {CHECKPOINT}/)")
    return run
