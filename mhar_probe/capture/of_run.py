"""Capture a trained run's routing dataset from its held-out text (what `mhar capture RUN` and
the demo do): `capture_run(RunCapture(run=...))` writes RUN/routing.nc by default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import xarray as xr

from ..model.saved import position_limit
from .capture import capture_routing
from ..outputs import check_device
from .errors import CaptureError
from .io import check_output
from .runs import DEFAULT_DATASET, heldout_rows, load_run, row_batches


#: rows captured when neither --seq-len nor the run's training length says (a converted or
#: imported model has no train_config.json; half its position limit would be 65,536 at 8B)
DEFAULT_SEQ_LEN = 2048


@dataclass
class RunCapture:
    """Options of one capture of a run (the defaults are `mhar capture`'s)."""

    run: str
    out: str | None = None  # default: RUN/routing.nc
    tokens: int = 65536  # held-out tokens to stream
    batch_size: int = 8  # sequences per forward pass
    seq_len: int | None = None  # default: the run's (else min(half the position limit, DEFAULT_SEQ_LEN))
    split: str = "val"
    per_token: bool = False  # also stream every token's weights to the file
    probes: bool = True  # source-based probe sums besides the token means
    slices: int = 4  # query slices S for width-disagreement
    draws: int = 8  # matched-norm random-query draws
    seed: int = 0  # seed of the random-query draws
    backend: str | None = None  # routing backend (default: triton on CUDA, eager on CPU)
    device: str | None = None  # default: cuda if available
    overwrite: bool = False
    progress: bool = True

    def out_path(self) -> Path:
        return Path(self.out) if self.out else Path(self.run) / DEFAULT_DATASET


def capture_run(cfg: RunCapture) -> xr.Dataset:
    """Stream the run's held-out text through it and write the dataset to `cfg.out_path()`;
    returns the dataset (close it when done)."""
    out = cfg.out_path()
    check_output(out, cfg.overwrite, inputs=[("run", cfg.run)])  # fail before loading anything
    check_device(cfg.device)
    model, tokenizer, train_cfg = load_run(cfg.run, cfg.device, cfg.backend)
    limit = position_limit(model.config) or 2 * DEFAULT_SEQ_LEN  # a converted / imported model nests it
    seq_len = cfg.seq_len or train_cfg.get("seq_len") or min(limit // 2, DEFAULT_SEQ_LEN)
    if seq_len > limit:
        raise CaptureError(f"--seq-len {seq_len} exceeds the model's position limit ({limit})")
    rows = heldout_rows(tokenizer, train_cfg, seq_len, cfg.split)
    batches, _ = row_batches(rows, cfg.tokens, cfg.batch_size)
    return capture_routing(
        model, batches, probes=cfg.probes, slices=cfg.slices, draws=cfg.draws, seed=cfg.seed,
        per_token=cfg.per_token, out=out, overwrite=cfg.overwrite, split=cfg.split,
        run_path=cfg.run, progress=cfg.progress, total=len(batches),
        attrs={"seq_len": int(seq_len), "tokens_requested": int(cfg.tokens) if cfg.tokens else -1,
               "corpus": str(train_cfg.get("corpus") or "embedded"),
               "train_preset": str(train_cfg.get("preset", ""))})


def capture_summary(ds: xr.Dataset, out: str | Path) -> str:
    """One line on what a capture wrote (and, when --tokens asked for more than the split holds,
    that it read the whole split instead)."""
    asked, seen = int(ds.attrs.get("tokens_requested", -1)), int(ds.attrs["tokens_seen"])
    short = (f" (all the {ds.attrs.get('split', 'held-out')} split holds; --tokens asked for {asked})"
             if asked > seen else "")
    return (f"wrote {out}: {seen} tokens{short}, {ds.sizes['site']} sites x "
            f"{ds.sizes['source']} sources x {ds.sizes['head']} heads ({ds.attrs['method']}, "
            f"{ds.attrs['capture_seconds']:.1f} s)")
