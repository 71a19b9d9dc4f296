"""Loading a training run (model, tokenizer, options) and its held-out text as capture batches."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..model.saved import load_model
from ..rundir import unfinished_hint
from ..runfiles import CONFIG, ROUTING, RunFiles
from .errors import CaptureError
from .schema import sha256_file

DEFAULT_DATASET = ROUTING  # RUN/routing.nc


def require_run(run_dir: str | Path) -> Path:
    run = Path(run_dir)
    if not run.is_dir():
        raise CaptureError(f"run directory {run} does not exist")
    if not RunFiles(run).config_path.is_file():
        hint = unfinished_hint(run)
        raise CaptureError(f"{run} has no final model ({CONFIG}): {hint}" if hint else
                           f"{run} is not a finished run directory (no {CONFIG}; train one with `mhar train`)")
    return run


def check_same_weights(ds: Any, dataset: Path, weights: Path) -> None:
    """A run's saved routing dataset was captured from the weights the run holds now (its
    `checkpoint_sha256`); else `CaptureError`: the weights changed or are damaged."""
    recorded = ds.attrs.get("checkpoint_sha256") or ""
    current = sha256_file(weights) if weights.is_file() else ""
    if recorded != current:
        raise CaptureError(f"{dataset} was captured from weights with sha256 {recorded[:12] or 'unknown'}, but "
                           f"{weights} {'has ' + current[:12] if current else 'is missing'}: the weights changed "
                           f"or are damaged; capture the run again")


def load_run(run_dir: str | Path, device: str | torch.device | None = None,
             backend: str | None = None) -> tuple[nn.Module, Any, dict[str, Any]]:
    """(model in eval mode on `device`, routing with `backend` (default: the device's, see
    `choose_backend`), tokenizer, train_config.json as a dict ({} if absent))."""
    import mhar_probe  # noqa: F401  (registers the Auto classes)
    from transformers import AutoTokenizer

    from ..model.routing import choose_backend, set_routing_backend

    run = require_run(run_dir)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backend = choose_backend(device, backend)  # an unknown backend fails before the weights load
    model = load_model(run, "model")
    set_routing_backend(model, backend).to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(run)
    except Exception as exc:  # tokenizers' own errors are plain Exceptions; a list for a dict is a TypeError
        raise CaptureError(f"{run} has no usable tokenizer files ({type(exc).__name__}: {exc})") from None
    return model, tokenizer, dict(RunFiles(run).train_config())


def heldout_rows(tokenizer: Any, train_cfg: dict[str, Any], seq_len: int, split: str = "val"
                 ) -> tuple[Tensor, Tensor]:
    """Packed rows [M, seq_len] of the run's corpus split (the same corpus and cap it trained on)
    and the document index of each of their tokens [M, seq_len] (see `data.document_index`)."""
    from ..data import EOS_TOKEN, document_index, load_packed, load_run_corpus

    if split not in ("train", "val"):
        raise CaptureError(f"--split must be 'train' or 'val', got {split!r}")
    corpus = load_run_corpus(train_cfg)
    packed = load_packed(corpus, tokenizer, seq_len, split)  # [M, seq_len + 1]
    documents = document_index(packed, tokenizer.convert_tokens_to_ids(EOS_TOKEN))
    return packed[:, :seq_len], documents[:, :seq_len]


def row_batches(rows: tuple[Tensor, Tensor] | Tensor, tokens: int | None, batch_size: int
                ) -> tuple[list[Any], int]:
    """Consecutive batches covering ceil(tokens / T) rows (all rows if tokens is None). Rows
    given with their document indices (`heldout_rows`) give batches {"input_ids", "document"},
    so that capture splits its halves by whole documents."""
    if batch_size < 1:
        raise CaptureError(f"--batch-size must be >= 1, got {batch_size}")
    ids, documents = rows if isinstance(rows, tuple) else (rows, None)
    M, T = ids.shape
    want = M if tokens is None else min(M, math.ceil(tokens / T))
    if want < 1:
        raise CaptureError(f"--tokens must be positive, got {tokens}")
    id_batches = ids[:want].split(batch_size)
    if documents is None:
        return list(id_batches), want * T
    return [{"input_ids": i, "document": d} for i, d in zip(id_batches, documents[:want].split(batch_size))], want * T
