"""`CPTConfig` (every option of a mid-training run) and its learning-rate schedule.

Schedule (paper appendix "Training and reproducibility details", mid-training paragraph):
AdamW starts cold (no optimizer moments ship with a pretrained checkpoint), so the rate is
re-warmed linearly from 0, then decays to a floor over the remaining steps:

    eta(t) = eta_peak * t / W                                         t < W
    eta(t) = eta_min + (eta_peak - eta_min) * (1 - p)                 linear decay   (default)
    eta(t) = eta_min + (eta_peak - eta_min) * (1 + cos(pi p)) / 2     cosine decay
    with p = (t - W) / (S - W),  S = total steps,  W = warm-up steps.

The first update (t = 0) therefore has rate 0: it only fills AdamW's moments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UserError

DECAYS = ("linear", "cosine")


@dataclass
class CPTConfig:
    """Every option of a mid-training run (saved as train_config.json)."""

    src: str = ""  # converted model (`mhar convert`), or a plain base with control=True
    out: str = "runs/cpt"
    control: bool = False  # train the plain base model (the schedule-matched control)
    steps: int = 1000
    lr: float = 4e-4  # peak
    min_lr: float | None = None  # floor; default lr / 100 (the paper: 4e-4 -> 4e-6)
    warmup: int | None = None  # re-warm-up steps from 0; default 5% of steps
    decay: str = "linear"
    weight_decay: float = 0.05  # not on embeddings, norms, biases or routing parameters
    z_loss: float = 1e-4  # coefficient of mean(logsumexp(logits)^2)
    ema: float = 0.999  # weight EMA beta; 0 disables
    betas: tuple[float, float] = (0.9, 0.95)
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    batch_size: int = 16  # global batch in sequences
    micro_batch: int | None = None  # per-process micro-batch (default: global / world)
    seq_len: int | None = None  # default min(1024, the model's position limit)
    eval_every: int = 50
    eval_batches: int = 4
    checkpoint_every: int = 100
    seed: int = 42  # data order (identical for the converted run and its control)
    corpus: str | None = None  # None: the embedded corpus; or a file / directory
    corpus_max_bytes: int | None = 4_000_000
    routing_backend: str | None = None  # delta runs: default triton on CUDA, eager on CPU
    checkpointing: bool = False  # activation checkpointing per decoder layer
    fsdp: bool = False  # FSDP2 full sharding (torchrun) instead of DDP
    cuda_graphs: bool | None = None  # steps replayed from CUDA graphs (default: on for one CUDA process)
    loss_kernel: str | None = None  # the cross-entropy: "fused" (Triton; default on CUDA) or "torch"
    device: str | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    stop_after: int | None = None  # testing aid: stop (as if killed) after this many steps
    # the options set on the command line; on --resume only these are checked against the saved
    # run (None: every option is); not a setting, not saved
    explicit: tuple[str, ...] | None = None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "CPTConfig":
        from ..train import options_from_dict

        return options_from_dict(cls, values, "mid-training")

    @property
    def floor(self) -> float:
        return self.lr / 100 if self.min_lr is None else self.min_lr

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else max(1, self.steps // 20)

    def validate(self) -> None:
        """Raise `UserError` naming the option to fix."""
        if self.steps < 1:
            raise UserError(f"--steps must be at least 1, got {self.steps}")
        if not self.lr > 0:
            raise UserError(f"--lr must be positive, got {self.lr}")
        if not 0 <= self.floor <= self.lr:
            raise UserError(f"--min-lr {self.floor} must lie in [0, --lr {self.lr}]")
        if not 0 <= self.warmup_steps <= self.steps:
            raise UserError(f"--warmup {self.warmup_steps} must lie in [0, --steps {self.steps}]")
        if self.decay not in DECAYS:
            raise UserError(f"unknown --decay {self.decay!r}; choose one of {', '.join(DECAYS)}")
        if not 0 <= self.ema < 1:
            raise UserError(f"--ema {self.ema} must lie in [0, 1) (0 disables the weight EMA)")
        if self.z_loss < 0 or self.weight_decay < 0:
            raise UserError("--z-loss and --weight-decay must be non-negative")
        if self.batch_size < 1 or (self.micro_batch is not None and self.micro_batch < 1):
            raise UserError("--batch-size and --micro-batch must be positive")


def cpt_lr_at(step: int, cfg: CPTConfig) -> float:
    """The learning rate of update `step` (0-based): re-warm-up from 0, then decay (module doc)."""
    peak, floor, warmup = cfg.lr, cfg.floor, cfg.warmup_steps
    if step < warmup:
        return peak * step / warmup
    p = min(1.0, (step - warmup) / max(1, cfg.steps - warmup))
    shape = (1 - p) if cfg.decay == "linear" else 0.5 * (1 + math.cos(math.pi * p))
    return floor + (peak - floor) * shape
