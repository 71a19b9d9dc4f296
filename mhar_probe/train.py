"""From-scratch training: the paper's recipe at any preset, resumable, paired across methods.

Recipe (appendix "Optimization"): AdamW (0.9, 0.95, eps 1e-8, weight decay 0.1 on every
parameter), global-norm clipping 1.0, linear warm-up then cosine decay to 0.1x peak, bf16
autocast on GPU (fp32 on CPU). Evaluation every `eval_every` steps on fixed held-out
batches; the reported number is the tail-mean of the last 11 evaluations.

Pairing: row order comes from `seed` alone (a permutation of the packed training rows per
epoch), so every method sees the same data in the same order.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from . import __version__
from .distributed import DistInfo, all_reduce_mean, barrier, init_distributed, shutdown
from .errors import UserError
from .model import MHARConfig, MHARForCausalLM
from .rundir import (atomic_write_json, load_checkpoint, prepare_run_dir, read_metrics,
                     save_checkpoint, write_metrics)

TAIL_K = 11


@dataclass
class TrainConfig:
    """Every option of a training run (saved as train_config.json)."""

    out: str = "runs/tiny-mhar"
    preset: str = "tiny"
    method: str = "mhar"
    heads: int | None = None  # routing heads H (default: number of KV heads)
    kv_heads: int | None = None
    steps: int = 300
    lr: float = 5e-4
    warmup: int | None = None  # default: 5% of steps (the paper: 1000 of 20K)
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    batch_size: int = 16  # global batch in sequences
    micro_batch: int | None = None  # per-process micro-batch (default: global / world)
    seq_len: int | None = None  # default: the preset's T (tiny: 128)
    eval_every: int = 25
    eval_batches: int = 4
    checkpoint_every: int = 100
    seed: int = 42
    corpus: str | None = None  # None: the embedded corpus; or a file / directory
    corpus_max_bytes: int | None = 4_000_000
    tokenizer: str | None = None  # a tokenizer saved in Hugging Face format
    vocab_size: int = 4096
    routing_backend: str | None = None  # default: triton on CUDA, eager on CPU
    device: str | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    stop_after: int | None = None  # testing aid: stop (as if killed) after this many steps
    extra: dict[str, Any] = field(default_factory=dict)  # extra MHARConfig overrides

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise UserError(f"unknown training options: {', '.join(sorted(unknown))}")
        if "betas" in values:
            values = {**values, "betas": tuple(values["betas"])}
        return cls(**values)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to the peak over `warmup` steps, then cosine to min_lr_ratio * peak."""
    warmup = cfg.warmup if cfg.warmup is not None else max(1, cfg.steps // 20)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def batch_indices(step: int, global_batch: int, num_rows: int, seed: int) -> torch.Tensor:
    """Row indices of the global batch at `step`: a fresh seeded permutation per epoch."""
    per_epoch = num_rows // global_batch
    if per_epoch == 0:
        raise UserError(f"the training split has {num_rows} rows, fewer than one global batch "
                        f"of {global_batch}; lower --batch-size or use more text")
    epoch, within = divmod(step, per_epoch)
    perm = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return perm[within * global_batch:(within + 1) * global_batch]


def build_model_config(cfg: TrainConfig, vocab_size: int, eos_id: int) -> MHARConfig:
    seq_len = cfg.seq_len or MHARConfig.preset_seq_len(cfg.preset)
    overrides: dict[str, Any] = dict(residual_method=cfg.method, routing_heads=cfg.heads,
                                     num_key_value_heads=cfg.kv_heads, vocab_size=vocab_size,
                                     routing_backend=cfg.routing_backend, eos_token_id=eos_id,
                                     pad_token_id=eos_id, **cfg.extra)
    mc = MHARConfig.from_preset(cfg.preset, **overrides)
    if seq_len > mc.max_position_embeddings:
        raise UserError(f"--seq-len {seq_len} is longer than the model's position limit "
                        f"({mc.max_position_embeddings}); use at most that")
    return mc


def default_backend(device: torch.device) -> str:
    return "triton" if device.type == "cuda" else "eager"


class Trainer:
    """Owns one run: data, model, optimizer, evaluation, checkpoints and metrics."""

    def __init__(self, cfg: TrainConfig, info: DistInfo | None = None) -> None:
        self.cfg = cfg
        self.info = info or init_distributed(cfg.device)
        self.out = Path(cfg.out)
        self.device = self.info.device
        if cfg.routing_backend is None:
            cfg.routing_backend = default_backend(self.device)
        build_model_config(cfg, cfg.vocab_size, 0)  # config errors before any data work
        self.resumed = False
        if self.info.is_main:
            self.resumed = prepare_run_dir(self.out, resume=cfg.resume, overwrite=cfg.overwrite)
        barrier(self.info)
        self.resumed = (self.out / "checkpoint" / "state.json").exists() and cfg.resume
        self._load_data()
        self.model_config = build_model_config(cfg, len(self.tokenizer), self.tokenizer.eos_token_id)
        self.seq_len = cfg.seq_len or MHARConfig.preset_seq_len(cfg.preset)
        torch.manual_seed(cfg.seed)
        self.model = MHARForCausalLM(self.model_config).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, betas=cfg.betas,
                                           eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
        world = self.info.world_size
        if cfg.batch_size % world:
            raise UserError(f"--batch-size {cfg.batch_size} is not divisible by the {world} processes")
        self.local_batch = cfg.batch_size // world
        self.micro = min(cfg.micro_batch or self.local_batch, self.local_batch)
        if self.local_batch % self.micro:
            raise UserError(f"per-process batch {self.local_batch} is not a multiple of --micro-batch {self.micro}")
        self.ddp = None
        if world > 1:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        from .flops import flops_per_token

        self.flops_per_token = float(flops_per_token(self.model_config, self.seq_len)["total"])
        self.step, self.tokens, self.flops = 0, 0, 0.0
        self.metrics: list[dict[str, Any]] = []
        if self.resumed:
            state = load_checkpoint(self.out, self.model, self.optimizer)
            self.step, self.tokens, self.flops = state["step"], state["tokens"], state["flops"]
            self.metrics = [m for m in read_metrics(self.out / "metrics.jsonl") if m["step"] <= self.step]

    # ------------------------------------------------------------------ data
    def _load_data(self) -> None:
        from .data import get_tokenizer, load_corpus, load_packed

        cfg = self.cfg
        seq_len = cfg.seq_len or MHARConfig.preset_seq_len(cfg.preset)
        # rank 0 builds caches first (tokenizer training, token arrays); the others then read them
        for turn in ((0,) if self.info.world_size == 1 else (0, 1)):
            if (turn == 0) == self.info.is_main:
                self.corpus = load_corpus(cfg.corpus, max_bytes=cfg.corpus_max_bytes)
                self.tokenizer = get_tokenizer(self.corpus, vocab_size=cfg.vocab_size, path=cfg.tokenizer)
                self.train_rows = load_packed(self.corpus, self.tokenizer, seq_len, "train")  # [M, T+1]
                self.val_rows = load_packed(self.corpus, self.tokenizer, seq_len, "val")
            barrier(self.info)
        need = cfg.eval_batches * cfg.batch_size
        self.val_rows = self.val_rows[: min(need, len(self.val_rows))]

    # ------------------------------------------------------------------ steps
    def _autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    def _loss(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(self.device)
        model = self.ddp or self.model
        with self._autocast():
            logits = model(rows[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten())

    def train_step(self) -> dict[str, Any]:
        cfg, info = self.cfg, self.info
        t0 = time.perf_counter()
        lr = lr_at(self.step, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        idx = batch_indices(self.step, cfg.batch_size, len(self.train_rows), cfg.seed)
        mine = idx[info.rank * self.local_batch:(info.rank + 1) * self.local_batch]
        chunks = mine.split(self.micro)
        total = 0.0
        for i, chunk in enumerate(chunks):
            sync = i == len(chunks) - 1
            ctx = self.ddp.no_sync() if (self.ddp is not None and not sync) else _null()
            with ctx:
                loss = self._loss(self.train_rows[chunk]) / len(chunks)
                loss.backward()
            total += float(loss.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        step_tokens = cfg.batch_size * self.seq_len
        self.step += 1
        self.tokens += step_tokens
        self.flops += self.flops_per_token * step_tokens
        dt = time.perf_counter() - t0
        return dict(step=self.step, tokens=self.tokens, flops=self.flops, lr=lr,
                    loss=all_reduce_mean(total, info), grad_norm=grad_norm,
                    tokens_per_s=step_tokens / dt)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean token cross-entropy over the fixed held-out rows, averaged across ranks."""
        self.model.eval()
        rows = self.val_rows[self.info.rank::self.info.world_size]
        losses = [float(self._loss(chunk)) for chunk in rows.split(self.micro)]
        self.model.train()
        return all_reduce_mean(sum(losses) / max(1, len(losses)), self.info)

    # ------------------------------------------------------------------ loop
    def run(self) -> dict[str, Any]:
        cfg, info = self.cfg, self.info
        if info.is_main and not self.resumed:
            atomic_write_json(self.out / "train_config.json", _jsonable(asdict(cfg)))
            self.tokenizer.save_pretrained(self.out)
            comp = self.corpus.composition
            atomic_write_json(self.out / "corpus.json", dict(
                name=self.corpus.name, fingerprint=self.corpus.fingerprint,
                composition=comp.to_rows(), meta=_jsonable(comp.meta)))
        if self.step == 0:
            self.metrics.append(dict(step=0, tokens=0, flops=0.0, lr=0.0, val_loss=self.evaluate()))
        bar = tqdm(total=cfg.steps, initial=self.step, disable=not (cfg.progress and info.is_main),
                   desc=f"{cfg.method}", unit="step", dynamic_ncols=True)
        self.model.train()
        while self.step < cfg.steps:
            row = self.train_step()
            if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                row["val_loss"] = self.evaluate()
            self.metrics.append(row)
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:.0f}")
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
                self._checkpoint()
            if cfg.stop_after is not None and self.step >= cfg.stop_after and self.step < cfg.steps:
                self._checkpoint()
                bar.close()
                return {"stopped_at": self.step}
        bar.close()
        return self._finish()

    def _checkpoint(self) -> None:
        if self.info.is_main:
            write_metrics(self.out / "metrics.jsonl", self.metrics)
            save_checkpoint(self.out, self.model, self.optimizer,
                            dict(step=self.step, tokens=self.tokens, flops=self.flops))
        barrier(self.info)

    def _finish(self) -> dict[str, Any]:
        evals = [m["val_loss"] for m in self.metrics if "val_loss" in m]
        summary = dict(
            finished=True, method=self.cfg.method, preset=self.cfg.preset, steps=self.step,
            routing_heads=(self.model_config.routing_heads
                           if self.cfg.method in ("attnres", "mhar", "mhar_hw", "delta") else None),
            kv_heads=self.model_config.num_key_value_heads,
            lr=self.cfg.lr, seed=self.cfg.seed, tokens=self.tokens, flops=self.flops,
            initial_val_loss=evals[0], final_val_loss=evals[-1],
            tail_mean_val_loss=sum(evals[-TAIL_K:]) / len(evals[-TAIL_K:]), tail_k=min(TAIL_K, len(evals)),
            parameters=sum(p.numel() for p in self.model.parameters()),
            world_size=self.info.world_size, package_version=__version__,
        )
        if self.info.is_main:
            self.model.save_pretrained(self.out)
            atomic_write_json(self.out / "summary.json", summary)
        barrier(self.info)
        return summary


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train one run end to end (or until `stop_after`); returns the summary."""
    info = init_distributed(cfg.device)
    try:
        return Trainer(cfg, info).run()
    finally:
        shutdown(info)
