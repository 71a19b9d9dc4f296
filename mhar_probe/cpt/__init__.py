"""Mid-training (`mhar cpt`): continue training a converted delta model, or its schedule-matched
control, with the paper's recipe (cold-start AdamW with re-warm-up, z-loss, weight EMA, decay
groups, bf16, activation checkpointing, DDP / FSDP2 under torchrun)."""

from .config import CPTConfig, cpt_lr_at
from .objective import WeightEMA, decay_split, param_groups, z_loss
from .trainer import CPTTrainer, cpt

__all__ = ["CPTConfig", "CPTTrainer", "WeightEMA", "cpt", "cpt_lr_at", "decay_split", "param_groups", "z_loss"]
