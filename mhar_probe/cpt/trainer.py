"""`CPTTrainer`: mid-training (continual pre-training) of a converted delta model or its control.

It is the from-scratch `Trainer` loop (data order from the seed alone, micro-batch
accumulation, global-norm clipping, evaluation, resumable checkpoints, metrics) with:

    model       `load_cpt_model(src, control)` in float32; tokenizer = the source's
    optimizer   cold-start AdamW, decay groups of `objective.param_groups` (0.05)
    schedule    `cpt_lr_at`: linear re-warm-up 0 -> peak, then decay to the floor
    objective   CE + z-loss (1e-4 * mean z^2); metrics log `loss` (= CE) and `z_loss`
    EMA         theta_ema <- 0.999 theta_ema + 0.001 theta after every step, checkpointed,
                saved as RUN/ema/ (a Hugging Face model) and evaluated at the end
    attention   SDPA on its causal path without a mask tensor (`attention.TRAINING_ATTENTION`:
                rows are packed, never padded), also while a CUDA graph is captured
    systems     bf16 autocast on GPU, activation checkpointing, DDP or FSDP2 (torchrun); on one
                CUDA process CUDA graphs, the fused loss and compiled sublayers (each layer's
                attention and MLP module, `mhar_probe.compiled`), as in `mhar train`

A converted model and its control run with the same seed, batch and schedule see the same
rows in the same order; with every gate at 0 their step-0 losses are identical.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from .. import __version__
from ..distributed import init_distributed, shutdown
from ..errors import UserError
from ..model.routing import choose_backend
from ..model.saved import position_limit
from ..parallel import enable_checkpointing, full_model_state, save_hf_dir
from ..tail import tail_of
from ..outputs import check_device, refuse_together
from ..train import Deadline, Trainer, check_backend_runs_on
from .attention import REPLACES, attention_implementation, check_training_rows, use_training_attention
from .config import CPTConfig, cpt_lr_at
from .models import flops_per_token, is_converted, load_cpt_model, read_config, text_config
from .objective import WeightEMA, decay_split, param_groups, z_loss


class CPTTrainer(Trainer):
    full_checkpoints = True  # name-keyed optimizer state + the EMA

    # ------------------------------------------------------------------ set-up
    def inputs(self) -> list[tuple[str, str | None]]:
        """The source model and the corpus: the output may not be or hold either."""
        cfg: CPTConfig = self.cfg  # type: ignore[assignment]
        corpus = cfg.corpus if cfg.corpus and Path(cfg.corpus).exists() else None
        return [("source model", cfg.src), ("corpus", corpus)]

    def setup(self) -> None:
        cfg: CPTConfig = self.cfg  # type: ignore[assignment]
        self.src = Path(cfg.src)
        if not self.src.is_dir():
            raise UserError(f"source model {self.src} does not exist")
        self.src_config = read_config(self.src)
        if not cfg.control and not is_converted(self.src_config):
            raise UserError(f"{self.src} is a plain {self.src_config.model_type} model, not a converted one; "
                            f"convert it with `mhar convert {self.src} DST` and train DST, "
                            f"or pass --control to train it as is")
        if not cfg.control:  # the control is a plain model: nothing in it routes
            cfg.routing_backend = choose_backend(self.device, cfg.routing_backend)
            check_backend_runs_on(cfg.routing_backend, self.device)
        limit = position_limit(self.src_config) or 1024
        self.seq_len = cfg.seq_len or min(1024, limit)
        if self.seq_len > limit:
            raise UserError(f"--seq-len {self.seq_len} is longer than the model's position limit ({limit})")
        # train_config.json records the length trained at (what `mhar eval` gives the model by default)
        cfg.seq_len = self.seq_len
        self.ema: WeightEMA | None = None

    @property
    def label(self) -> str:
        return "control" if self.cfg.control else "delta"

    def get_tokenizer(self, corpus):
        from ..data import load_tokenizer

        if not any((self.src / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            raise UserError(f"{self.src} has no tokenizer; save the base's tokenizer into it")
        tok = load_tokenizer(self.src)
        vocab = text_config(self.src_config).vocab_size
        if len(tok) > vocab:
            raise UserError(f"the tokenizer in {self.src} has {len(tok)} tokens but the model only {vocab}")
        return tok

    def build_model(self) -> torch.nn.Module:
        cfg = self.cfg
        model = load_cpt_model(self.src, cfg.control, cfg.routing_backend, self.kernels)
        # packed, unpadded rows: SDPA's causal path, the same in the graph step's warm-up and capture
        if use_training_attention(model):
            check_training_rows(model.config, self.seq_len)
        self.model_class = type(model)  # before any FSDP wrapping renames it
        if cfg.checkpointing:
            enable_checkpointing(model)
        return model if cfg.fsdp else model.to(self.device)  # FSDP2 moves it unit by unit

    def param_groups(self) -> list[dict[str, Any]]:
        return param_groups(self.model, self.cfg.weight_decay)

    def build_optimizer(self) -> torch.optim.Optimizer:
        optimizer = super().build_optimizer()
        if self.cfg.ema > 0:  # after wrapping: under FSDP2 the EMA is sharded like the parameters
            self.ema = WeightEMA(self.model, self.cfg.ema)
        return optimizer

    def count_flops(self) -> float:
        return flops_per_token(self.model, self.seq_len)

    # ------------------------------------------------------------------ training hooks
    def lr(self, step: int) -> float:
        return cpt_lr_at(step, self.cfg)

    def extra_loss(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"z_loss": z_loss(logits, self.cfg.z_loss)} if self.cfg.z_loss > 0 else {}

    def after_optimizer_step(self) -> None:
        if self.ema is not None:
            self.ema.update()

    def extra_state(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"ema": self.ema.full_state()} if self.ema is not None else {}

    def load_extra_state(self, extra: dict[str, dict[str, torch.Tensor]]) -> None:
        if self.ema is not None:
            if "ema" not in extra:
                raise UserError(f"the checkpoint in {self.out} has no EMA; resume with --ema 0 or --overwrite")
            self.ema.load(extra["ema"])

    # ------------------------------------------------------------------ results
    def evaluate_ema(self) -> float | None:
        if self.ema is None:
            return None
        self.ema.swap()
        try:
            return self.evaluate()
        finally:
            self.ema.swap()

    def summary(self, evals: list[float]) -> dict[str, Any]:
        cfg = self.cfg
        first = next((m["loss"] for m in self.metrics if m["step"] == 1 and "loss" in m), None)
        decay, keep = decay_split(self.model)
        tail = tail_of((m["step"], m["val_loss"]) for m in self.metrics if "val_loss" in m)
        return dict(
            finished=True, kind=self.label, src=str(self.src), steps=self.step, lr=cfg.lr,
            min_lr=cfg.floor, warmup=cfg.warmup_steps, decay=cfg.decay, seed=cfg.seed,
            batch_size=cfg.batch_size, seq_len=self.seq_len, tokens=self.tokens, flops=self.flops,
            first_step_loss=first, initial_val_loss=evals[0], final_val_loss=evals[-1],
            tail_mean_val_loss=tail.mean, tail_k=tail.k, tail_evaluations=tail.evaluations,
            ema=cfg.ema, final_ema_val_loss=self.evaluate_ema(), z_loss=cfg.z_loss,
            weight_decay=cfg.weight_decay, decayed_parameters=sum(p.numel() for _, p in decay),
            parameters=sum(p.numel() for _, p in decay + keep),
            routing_backend=None if cfg.control else cfg.routing_backend,
            checkpointing=cfg.checkpointing, fsdp=cfg.fsdp, world_size=self.info.world_size,
            cuda_graphs=self.cuda_graphs, overlap_steps=self.overlap_steps, loss_kernel=self.loss_kernel,
            compiled_sublayers=self.compiled, package_version=__version__, provenance=dict(sessions=self.sessions))

    def save_final(self) -> None:
        """RUN/ (raw weights) and RUN/ema/ (EMA weights + tokenizer), Hugging Face format."""
        state = full_model_state(self.model)
        ema = self.ema.full_state() if self.ema is not None else None
        if not self.info.is_main:
            return
        config = self.model.config
        tied = bool(getattr(text_config(config), "tie_word_embeddings", False))
        gen = getattr(self.model, "generation_config", None)

        def export(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v for k, v in tensors.items() if not (tied and k.endswith("lm_head.weight"))}

        with attention_implementation(self.model, REPLACES):  # a saved model attends as it was loaded
            save_hf_dir(self.out, config, export(state), self.model_class, gen)
            if ema is not None:
                save_hf_dir(self.out / "ema", config, export({**state, **ema}), self.model_class, gen,
                            self.tokenizer)


def cpt(cfg: CPTConfig, clock: Callable[[], float] = time.monotonic,
        deadline: Deadline | None = None) -> dict[str, Any]:
    """Mid-train one model end to end; returns the summary, or {"stopped_at": step, "reason": ...}
    when it stopped early (`stop_after`, or `deadline`: by default `time_limit` seconds on `clock`
    after this call; `mhar cpt` counts them from the start of the process)."""
    check_device(cfg.device)
    refuse_together(resume=cfg.resume, overwrite=cfg.overwrite)
    info = init_distributed(cfg.device)
    try:
        return CPTTrainer(cfg, info, deadline=deadline, clock=clock).run()  # type: ignore[arg-type]
    finally:
        shutdown(info)
