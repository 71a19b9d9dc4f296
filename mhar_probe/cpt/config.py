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

from ..errors import UserError
from ..options import non_negative, option
from ..runoptions import RunOptions

DECAYS = ("linear", "cosine")


def _ema(value: float) -> str | None:
    return None if 0 <= value < 1 else "must lie in [0, 1) (0 disables the weight EMA)"


_like = RunOptions.default_of


@dataclass
class CPTConfig(RunOptions):
    """Every option of a mid-training run (saved as train_config.json): the shared `RunOptions`
    with mid-training's defaults, and its own source, control, schedule, z-loss, EMA and
    activation checkpointing."""

    src: str = option("", "converted model directory (`mhar convert`), or with --control a plain Llama/Qwen3 "
                          "directory or a converted one (its base)", flag="SRC")
    out: str = _like("out", "runs/cpt")
    control: bool = option(False, "train the plain base model: the schedule-matched control (same seed, data, "
                                  "schedule)", group="basics")
    steps: int = _like("steps", 1000)
    seed: int = _like("seed", 42, "fixes the data order (pair a run with its control)")
    seq_len: int | None = _like("seq_len", None, "sequence length (default min(1024, the model's position limit))")
    lr: float = _like("lr", 4e-4)
    min_lr: float | None = option(None, "floor of the decay (default lr/100; the paper: 4e-4 -> 4e-6)",
                                  check=non_negative, group="schedule")
    warmup: int | None = _like("warmup", None, "linear re-warm-up steps from 0 (default 5%% of steps)")
    decay: str = option("linear", "decay shape after warm-up", choices=DECAYS, group="schedule")
    weight_decay: float = _like("weight_decay", 0.05, "AdamW decay of matrices (not embeddings, norms, biases or "
                                                      "routing parameters)")
    z_loss: float = option(1e-4, "coefficient of mean(logsumexp(logits)^2)", check=non_negative, group="schedule")
    ema: float = option(0.999, "weight EMA beta (0: off)", check=_ema, group="schedule")
    eval_every: int = _like("eval_every", 50)
    routing_backend: str | None = _like("routing_backend", None, "delta routing backend (default: triton on "
                                                                 "CUDA, eager on CPU)")
    checkpointing: bool = option(False, "activation checkpointing per decoder layer", group="GPU step")

    WHAT = "mid-training"

    def check(self) -> None:
        """The floor lies in [0, peak], the warm-up within the run."""
        if not 0 <= self.floor <= self.lr:
            raise UserError(f"--min-lr {self.floor} must lie in [0, --lr {self.lr}]")
        if not 0 <= self.warmup_steps <= self.steps:
            raise UserError(f"--warmup {self.warmup_steps} must lie in [0, --steps {self.steps}]")

    @property
    def floor(self) -> float:
        return self.lr / 100 if self.min_lr is None else self.min_lr

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else max(1, self.steps // 20)


def cpt_lr_at(step: int, cfg: CPTConfig) -> float:
    """The learning rate of update `step` (0-based): re-warm-up from 0, then decay (module doc)."""
    peak, floor, warmup = cfg.lr, cfg.floor, cfg.warmup_steps
    if step < warmup:
        return peak * step / warmup
    p = min(1.0, (step - warmup) / max(1, cfg.steps - warmup))
    shape = (1 - p) if cfg.decay == "linear" else 0.5 * (1 + math.cos(math.pi * p))
    return floor + (peak - floor) * shape
