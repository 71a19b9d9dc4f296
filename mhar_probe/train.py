"""From-scratch training: the paper's recipe at any preset, resumable, paired across methods.

Recipe (appendix "Optimization"): AdamW (0.9, 0.95, eps 1e-8, weight decay 0.1 on every
parameter), global-norm clipping 1.0, linear warm-up then cosine decay to 0.1x peak, bf16
autocast on GPU (fp32 on CPU). Evaluation every `eval_every` steps on fixed held-out
batches; the reported number is the tail-mean of the last 11 evaluations.

Pairing: row order comes from `seed` alone (a permutation of the packed training rows per
epoch), so every method sees the same data in the same order.

The options (`TrainConfig`, and `RunOptions` that mid-training shares) live in `runoptions`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from tqdm.auto import tqdm

from . import __version__, atomic
from .distributed import (DistInfo, all_reduce_loss_and_stop, all_reduce_mean, barrier, init_distributed,
                          shutdown)
from .cputhreads import ThreadChoice, choose_threads
from .errors import UserError
from .options import finite_above_zero
from .kernels.config import ROUTING_DOUTS
from .model import MHARConfig, MHARForCausalLM, methods
from .model.routing import choose_backend, set_routing_backend
from .parallel import (apply_fsdp, clip_grad_norm, full_model_state, full_optimizer_state, grad_sync,
                       load_full_checkpoint, load_full_model_state, load_full_optimizer_state,
                       save_full_checkpoint, save_hf_dir, sync_replicated_grads, wrap_ddp)
from .tail import tail_of
from .compiled import choose_compile_sublayers, compile_sublayers
from .loss import choose_loss_kernel, next_token_cross_entropy
from .step import EagerStep, GraphStep, PendingStep, choose_cuda_graphs, choose_overlap_steps
from .outputs import check_device
from .provenance import session_record
from .runfiles import CORPUS, METRICS, SESSIONS, SUMMARY, TRAIN_CONFIG, RunFiles
from .runoptions import (NOT_SETTINGS, RESUME_MAY_CHANGE, TrainConfig, jsonable, saved_settings,  # noqa: F401
                         settings_for_resume)
#   (TrainConfig and its resume rules are declared in `runoptions`; imported from here too)
from .rundir import (RunLock, check_run_dir, load_checkpoint, prepare_run_dir, read_checkpoint_state,
                     save_checkpoint, write_metrics)


#: a run planned past this many epochs of its training split says so when it starts
MANY_EPOCHS = 10


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
    return epoch_permutation(num_rows, seed, epoch)[within * global_batch:(within + 1) * global_batch]


@functools.lru_cache(maxsize=2)
def epoch_permutation(num_rows: int, seed: int, epoch: int) -> torch.Tensor:
    """The seeded order of the training rows in `epoch` (computed once per epoch, not per step:
    a permutation of millions of rows takes milliseconds of host time)."""
    return torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))


def check_backend_runs_on(backend: str, device: torch.device) -> None:
    """The triton backend routes CUDA tensors, and CPU tensors only in Triton's interpreter
    (TRITON_INTERPRET=1 set before triton was imported); refused here, before any work."""
    if backend != "triton" or device.type == "cuda":
        return
    from .kernels.launch import is_interpreted
    from .kernels.route.fwd import route_fwd_kernel

    if not is_interpreted(route_fwd_kernel):
        raise UserError(f"--routing-backend triton needs a CUDA device (on {device.type} only under Triton's "
                        f"interpreter, TRITON_INTERPRET=1); use --routing-backend eager")


def build_model_config(cfg: TrainConfig, vocab_size: int, eos_id: int) -> MHARConfig:
    seq_len = cfg.seq_len or MHARConfig.preset_seq_len(cfg.preset)
    overrides: dict[str, Any] = dict(residual_method=cfg.method, routing_heads=cfg.heads,
                                     num_key_value_heads=cfg.kv_heads, vocab_size=vocab_size,
                                     eos_token_id=eos_id, pad_token_id=eos_id, **cfg.extra)
    mc = MHARConfig.from_preset(cfg.preset, **overrides)
    if seq_len > mc.max_position_embeddings:
        raise UserError(f"--seq-len {seq_len} is longer than the model's position limit "
                        f"({mc.max_position_embeddings}); use at most that")
    return mc


@dataclass(frozen=True)
class Deadline:
    """A wall-clock deadline, `at` on the scale of `clock` (default `time.monotonic`, seconds).

    A run with one stops cleanly before it (`Trainer`): after step s it stops when
        now + t_step + t_eval + t_checkpoint > at,
    t_step the wall time of step s, t_eval and t_checkpoint the longest evaluation and checkpoint
    write this process measured (0 until it did one), so that one more step, its evaluation and
    the checkpoint that ends the run still fit. A sweep makes one and passes it to every run."""

    at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> "Deadline":
        """The deadline `seconds` from now (a finite number above 0, else a UserError)."""
        return cls(clock() + _checked_limit(seconds), clock)

    @classmethod
    def after_start(cls, seconds: float) -> "Deadline":
        """The deadline `seconds` after this process started (its imports and setup count; on
        `time.monotonic`), for a command's --time-limit."""
        return cls(process_started() + _checked_limit(seconds))

    def passed(self, reserve: float = 0.0) -> bool:
        """Whether `reserve` seconds from now lie past the deadline."""
        return self.clock() + reserve > self.at


def _checked_limit(seconds: Any) -> float:
    """`seconds` of a time limit, refused in one line unless a finite number above 0."""
    problem = (finite_above_zero(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
               else "must be a number of seconds")
    if problem:
        raise UserError(f"--time-limit {seconds!r} {problem}")
    return float(seconds)


def process_started() -> float:
    """When this process started, on `time.monotonic`'s scale: Linux's /proc/self/stat start time
    (clock ticks since boot) against CLOCK_BOOTTIME; now where that cannot be read."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:  # the command name (field 2) may hold spaces: split after it
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - max(0.0, age)


class Interrupts:
    """Ctrl-C while a run trains: the first SIGINT is noted (`seen`), and the trainer stops after
    the step it interrupted, with a checkpoint and the metrics so far, as at a time limit; a
    second one, `ABORT_AFTER` seconds or more later, aborts at once (KeyboardInterrupt). One that
    follows within that time is the same interrupt delivered twice: torchrun's agent passes the
    terminal's SIGINT on to ranks that received it already.

    Only in the main thread, and only where SIGINT still has Python's default handler (a host
    application's own handler is left alone)."""

    ABORT_AFTER = 1.0

    def __init__(self) -> None:
        self.seen: bool = False
        self._first = 0.0

    @contextlib.contextmanager
    def caught(self, say: bool = True) -> Iterator[None]:
        """Catch SIGINT in the `with` block (`say`: print one line on stderr at the first)."""
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            now = time.monotonic()
            if not self.seen:
                self.seen, self._first = True, now
                if say:
                    print("\ninterrupted: finishing this step, then writing a checkpoint (Ctrl-C again to abort "
                          "at once)", file=sys.stderr, flush=True)
            elif now - self._first >= self.ABORT_AFTER:
                raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class LaunchedStep:
    """A step the trainer has launched (`Trainer.launch_step`): its report, its counts after it,
    its learning rate, and when it was launched (perf_counter, and the trainer's clock)."""

    pending: PendingStep
    step: int
    tokens: int
    flops: float
    lr: float
    started: float
    clock_started: float


class Trainer:
    """Owns one run: data, model, optimizer, evaluation, checkpoints and metrics.

    deadline: stop cleanly before it (`Deadline`), a checkpoint at the step it stops at; by default
    `cfg.time_limit` seconds from construction on `clock`. Only rank 0's deadline counts."""

    #: checkpoints as full name-keyed tensors (`parallel.save_full_checkpoint`); always so
    #: under FSDP, where the optimizer holds shards
    full_checkpoints = False

    def __init__(self, cfg: TrainConfig, info: DistInfo | None = None, *, deadline: Deadline | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if info is None:
            check_device(cfg.device)
        if deadline is None and cfg.time_limit is not None:
            deadline = Deadline.after(cfg.time_limit, clock)
        self.deadline = deadline
        self.clock = deadline.clock if deadline is not None else clock
        self.slowest = dict(evaluate=0.0, checkpoint=0.0)  # the longest of each, in seconds on `clock`
        self.time_up = False  # rank 0's deadline is near (the same on every rank)
        self.interrupts = Interrupts()  # Ctrl-C while the run trains (`_run`)
        self.interrupted = False  # some rank was interrupted (the same on every rank)
        self._last_done = (0.0, float("-inf"))  # when the last step read back ended (perf_counter, clock)
        self.info = info or init_distributed(cfg.device)
        self.out = Path(cfg.out)
        self.threads: tuple[ThreadChoice, int] | None = None
        # one writer per run directory; a second one is refused here, before any work
        self.lock = RunLock(self.out).acquire() if self.info.is_main else None
        try:
            self.threads = self._set_threads(cfg.threads)  # (this machine's now: not a resumed run's setting)
            self._build(settings_for_resume(cfg))
        except BaseException:
            self.close()
            raise

    def _build(self, cfg: TrainConfig) -> None:
        """Check every input, then (and only then) empty or recover the run directory."""
        self.cfg = cfg
        self.device = self.info.device
        self.fsdp = cfg.fsdp
        self.setup()  # option errors before any data work
        try:
            self.cuda_graphs = choose_cuda_graphs(cfg.cuda_graphs, self.device, self.fsdp)
            self.overlap_steps = choose_overlap_steps(cfg.overlap_steps, self.device, self.info.world_size)
            self.loss_kernel = choose_loss_kernel(cfg.loss_kernel, self.device)
            self.compiled = choose_compile_sublayers(cfg.compile_sublayers, self.device)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        inputs = self.inputs()
        will_resume = check_run_dir(self.out, resume=cfg.resume, overwrite=cfg.overwrite, inputs=inputs)
        self._load_data()
        batch_indices(0, cfg.batch_size, len(self.train_rows), cfg.seed)  # enough rows for one batch
        torch.manual_seed(cfg.seed)
        self.model = self.build_model()
        world = self.info.world_size
        if cfg.batch_size % world:
            raise UserError(f"--batch-size {cfg.batch_size} is not divisible by the {world} processes")
        self.local_batch = cfg.batch_size // world
        self.micro = min(cfg.micro_batch or self.local_batch, self.local_batch)
        if self.local_batch % self.micro:
            raise UserError(f"per-process batch {self.local_batch} is not a multiple of --micro-batch {self.micro}")
        self.ddp = None
        # a DDP step captured in graphs warms up and captures on the stream DDP is built on
        self.capture_stream = torch.cuda.Stream(self.device) if self.cuda_graphs and world > 1 else None
        if self.fsdp:
            self.model = apply_fsdp(self.model, self.info)
        elif world > 1:
            self.ddp = wrap_ddp(self.model, self.info, for_graphs=self.cuda_graphs, stream=self.capture_stream)
        self.optimizer = self.build_optimizer()
        if self.compiled:
            compile_sublayers(self.model)
        self.stepper: EagerStep | GraphStep | None = None  # built at the first step, after any restore
        self.flops_per_token = self.count_flops()
        if self.info.is_main:  # every input is checked: only now is anything removed
            prepare_run_dir(self.out, resume=cfg.resume, overwrite=cfg.overwrite, inputs=inputs)
        barrier(self.info)
        self.resumed = will_resume
        self.step, self.tokens, self.flops = 0, 0, 0.0
        self.metrics: list[dict[str, Any]] = []
        self.sessions: list[dict[str, Any]] = []  # rank 0's record of who trained it (`_run`)
        if self.resumed:
            state = self.restore()
            self.step, self.tokens, self.flops = state["step"], state["tokens"], state["flops"]
            self.metrics = [m for m in RunFiles(self.out).metrics() if m["step"] <= self.step]
        self._warn_about_data()  # last: after every refusal (a damaged checkpoint too), a refused run says one line

    def close(self) -> None:
        """Release the run directory's lock and give the process its thread count back (the end of
        `run`, or a failed start)."""
        if self.lock is not None:
            self.lock.release()
        if self.threads is not None:
            torch.set_num_threads(self.threads[1])

    def _set_threads(self, requested: int | None) -> tuple[ThreadChoice, int] | None:
        """On a CPU (or with --threads): set the intra-op threads (`mhar_probe.cputhreads`);
        (the choice, the count before) to say and restore, None where left alone."""
        if self.info.device.type != "cpu" and requested is None:
            return None
        choice = choose_threads(requested)
        before = torch.get_num_threads()
        torch.set_num_threads(choice.threads)
        return choice, before

    # ------------------------------------------------------------------ hooks (subclasses override)
    def setup(self) -> None:
        """Resolve defaults and check options; sets `self.seq_len`."""
        cfg = self.cfg
        cfg.routing_backend = choose_backend(self.device, cfg.routing_backend)  # a run option, not the model's
        check_backend_runs_on(cfg.routing_backend, self.device)
        build_model_config(cfg, cfg.vocab_size, 0)  # config errors before any data work
        self.seq_len = cfg.seq_len or MHARConfig.preset_seq_len(cfg.preset)

    def inputs(self) -> list[tuple[str, str | None]]:
        """What the run reads from disk, (what, path): the output may not be or hold one of them."""
        cfg = self.cfg
        corpus = cfg.corpus if cfg.corpus and Path(cfg.corpus).exists() else None  # (not a corpus name)
        return [("corpus", corpus), ("tokenizer", cfg.tokenizer)]

    @property
    def label(self) -> str:
        return self.cfg.method

    def get_tokenizer(self, corpus):
        from .data import get_tokenizer

        return get_tokenizer(corpus, vocab_size=self.cfg.vocab_size, path=self.cfg.tokenizer)

    def build_model(self) -> torch.nn.Module:
        """The model to train, on `self.device` (seeded with cfg.seed just before)."""
        self.model_config = build_model_config(self.cfg, len(self.tokenizer), self.tokenizer.eos_token_id)
        return set_routing_backend(MHARForCausalLM(self.model_config), self.cfg.routing_backend,
                                   self.kernels).to(self.device)

    def param_groups(self) -> list[dict[str, Any]] | Any:
        """What AdamW optimizes: every parameter with `cfg.weight_decay`."""
        return self.model.parameters()

    def build_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.cfg
        return torch.optim.AdamW(self.param_groups(), lr=cfg.lr, betas=cfg.betas,
                                 eps=cfg.adam_eps, weight_decay=cfg.weight_decay)

    def count_flops(self) -> float:
        from .flops import flops_per_token

        return float(flops_per_token(self.model_config, self.seq_len)["total"])

    def lr(self, step: int) -> float:
        return lr_at(step, self.cfg)

    def extra_loss(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        """Terms added to the cross-entropy in training (name -> scalar); none by default."""
        return {}

    def after_optimizer_step(self) -> None:
        """Called after every optimizer step (e.g. a weight EMA update)."""

    def extra_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """Extra tensor dicts saved in the checkpoint beside the model (full tensors, rank 0)."""
        return {}

    def load_extra_state(self, extra: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore what `extra_state` saved."""

    # ------------------------------------------------------------------ data
    def _load_data(self) -> None:
        from .data import load_packed, load_run_corpus, resolve_cap

        cfg = self.cfg
        seq_len = self.seq_len
        cfg.corpus_max_bytes = resolve_cap(cfg.corpus, cfg.corpus_max_bytes)  # saved as resolved: 0 is no cap
        # rank 0 builds caches first (tokenizer training, token arrays); the others then read them
        for turn in ((0,) if self.info.world_size == 1 else (0, 1)):
            if (turn == 0) == self.info.is_main:
                self.corpus = load_run_corpus(vars(cfg))
                self.tokenizer = self.get_tokenizer(self.corpus)
                self.train_rows = load_packed(self.corpus, self.tokenizer, seq_len, "train")  # [M, T+1]
                self.val_rows = load_packed(self.corpus, self.tokenizer, seq_len, "val")
            barrier(self.info)
        need = cfg.eval_batches * cfg.batch_size
        self.val_rows = self.val_rows[: min(need, len(self.val_rows))]

    def _warn_about_data(self) -> None:
        """Rank 0 says, one line each, when a cap drops text and when the run is planned past
        `MANY_EPOCHS` epochs of its training split (both are recorded in summary.json too)."""
        if not self.info.is_main:
            return
        cap = self.corpus.composition.meta.get("cap")
        if cap and cap["bytes_dropped"] > 0:
            print(f"{self.out}: --corpus-max-bytes {cap['max_bytes']:,} keeps {cap['bytes_kept'] / 1e6:,.1f} MB of "
                  f"{self.corpus.name}'s {cap['bytes_before'] / 1e6:,.1f} MB and drops {cap['bytes_dropped'] / 1e6:,.1f} "
                  f"MB ({100 * cap['bytes_dropped'] / cap['bytes_before']:.0f}%); --corpus-max-bytes 0 trains on all "
                  f"of it", file=sys.stderr)
        epochs = self.planned_epochs()
        if epochs > MANY_EPOCHS:
            print(f"{self.out}: {self.cfg.steps:,} steps of {self.cfg.batch_size} x {self.seq_len} tokens are "
                  f"{epochs:,.1f} epochs of the {self.train_tokens_available():,} training tokens"
                  + (" (capped: --corpus-max-bytes 0 trains on all of the corpus)" if cap else ""), file=sys.stderr)

    def planned_epochs(self) -> float:
        """Epochs of the training split the run's `steps` take."""
        return self.cfg.steps * self.cfg.batch_size * self.seq_len / max(1, self.train_tokens_available())

    # ------------------------------------------------------------------ steps
    def _autocast(self):
        if self.device.type == "cuda":  # (graph capture needs autocast's weight-cast cache off)
            return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not self.cuda_graphs)
        return torch.autocast("cpu", enabled=False)

    def _logits(self, rows: torch.Tensor) -> torch.Tensor:
        model = self.ddp or self.model
        with self._autocast():
            return model(rows[:, :-1], use_cache=False).logits  # [B, T, V]

    def _loss(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(self.device)
        return next_token_cross_entropy(self._logits(rows), rows[:, 1:], self.loss_kernel)

    def _objective(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(training objective, cross-entropy, extra terms): objective = CE + sum(extra terms)."""
        rows = rows.to(self.device)
        logits = self._logits(rows)
        ce = next_token_cross_entropy(logits, rows[:, 1:], self.loss_kernel)
        extra = self.extra_loss(logits)
        return ce + sum(extra.values()), ce, extra

    def build_step(self) -> EagerStep | GraphStep:
        """The step machinery (`mhar_probe.step`): CUDA graphs on CUDA unless opted out, on one
        process and under DDP (the all-reduce captured with the backward); eager under FSDP2 and
        on the CPU."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.cuda_graphs:
            return GraphStep(objective=self._objective, params=params, optimizer=self.optimizer,
                             grad_clip=self.cfg.grad_clip, device=self.device, after_step=self.after_optimizer_step,
                             ddp=self.ddp, stream=self.capture_stream)
        for group in self.optimizer.param_groups:  # a checkpoint of a graph-stepped run: plain AdamW again
            if group.get("capturable") or group.get("fused"):
                group.update(capturable=False, fused=None)
        return EagerStep(objective=self._objective, params=params, optimizer=self.optimizer,
                         grad_clip=self.cfg.grad_clip, device=self.device, clip=clip_grad_norm,
                         sync=lambda last: grad_sync(self.model, self.ddp, sync=last),
                         before_clip=(lambda: sync_replicated_grads(self.model)) if self.fsdp else None,
                         after_step=self.after_optimizer_step)

    def train_step(self) -> dict[str, Any]:
        """One training step, launched and read back: its metrics row."""
        return self.finish_step(self.launch_step())

    def launch_step(self) -> "LaunchedStep":
        """Enqueue the next step (`PendingStep`: on CUDA the host does not wait for the device) and
        count it as taken; `finish_step` reads it back."""
        cfg, info = self.cfg, self.info
        started, clock_started = time.perf_counter(), self.clock()
        if self.stepper is None:
            self.stepper = self.build_step()
        lr = self.lr(self.step)
        idx = batch_indices(self.step, cfg.batch_size, len(self.train_rows), cfg.seed)
        mine = idx[info.rank * self.local_batch:(info.rank + 1) * self.local_batch]
        pending = self.stepper.launch([self.train_rows[chunk] for chunk in mine.split(self.micro)], lr)
        step_tokens = cfg.batch_size * self.seq_len
        self.step += 1
        self.tokens += step_tokens
        self.flops += self.flops_per_token * step_tokens
        return LaunchedStep(pending, self.step, self.tokens, self.flops, lr, started, clock_started)

    def finish_step(self, launched: "LaunchedStep", in_flight: bool = False) -> dict[str, Any]:
        """Wait for a launched step and return its metrics row. Its time is from when the device
        could start it (its launch, or the previous step's end if that came later) to its end, so
        overlapped steps are timed back to back. `in_flight`: the next step is launched already
        (the deadline then has to leave room for it as well)."""
        result = launched.pending.result()
        done, clock_done = time.perf_counter(), self.clock()
        dt = done - max(launched.started, self._last_done[0])
        step_time = clock_done - max(launched.clock_started, self._last_done[1])
        self._last_done = (done, clock_done)
        near = self._near_deadline(step_time * (2 if in_flight else 1))
        loss, (time_up, interrupted) = all_reduce_loss_and_stop(result.loss, (near, self.interrupts.seen), self.info)
        self.time_up = self.time_up or time_up
        self.interrupted = self.interrupted or interrupted
        step_tokens = self.cfg.batch_size * self.seq_len
        return dict(step=launched.step, tokens=launched.tokens, flops=launched.flops, lr=launched.lr,
                    loss=loss, grad_norm=result.grad_norm,
                    tokens_per_s=step_tokens / dt,
                    **{name: all_reduce_mean(v, self.info) for name, v in result.extras.items()})

    def _near_deadline(self, steps_time: float) -> bool:
        """Rank 0 (after a step): whether `steps_time` more (the steps still to run before the loop
        can stop), an evaluation and a checkpoint write would pass the deadline (`Deadline`). Never
        at the last step."""
        if self.deadline is None or not self.info.is_main or self.step >= self.cfg.steps:
            return False
        return self.deadline.passed(steps_time + self.slowest["evaluate"] + self.slowest["checkpoint"])

    def _evaluates_after(self, step: int) -> bool:
        """Whether the validation loss is measured after step `step` (every --eval-every, and the last)."""
        return step % self.cfg.eval_every == 0 or step == self.cfg.steps

    def _checkpoints_after(self, step: int) -> bool:
        """Whether a checkpoint is written after step `step` (every --checkpoint-every, and the last)."""
        return step % self.cfg.checkpoint_every == 0 or step == self.cfg.steps

    def _stops_after(self, step: int) -> bool:
        """Whether --stop-after ends the run after step `step`."""
        return self.cfg.stop_after is not None and step >= self.cfg.stop_after

    def _must_settle(self, step: int) -> bool:
        """Whether step `step` is read back before the next one is launched: the host then evaluates,
        checkpoints or stops on the model as this step left it."""
        return self._evaluates_after(step) or self._checkpoints_after(step) or self._stops_after(step)

    def _timed(self, what: str, started: float) -> None:
        """Record how long `what` (evaluate | checkpoint), begun at `started`, took if it is the longest."""
        self.slowest[what] = max(self.slowest[what], self.clock() - started)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean token cross-entropy over the fixed held-out rows, averaged across ranks."""
        started = self.clock()
        try:
            return self._evaluate()
        finally:
            self._timed("evaluate", started)

    def _evaluate(self) -> float:
        self.model.eval()
        rows = self.val_rows[self.info.rank::self.info.world_size]
        chunks = list(rows.split(self.micro))
        losses = [float(self._loss(chunk)) for chunk in chunks]
        if self.fsdp:  # every rank must run as many forwards (each one all-gathers parameters)
            most = max(len(self.val_rows[r::self.info.world_size].split(self.micro))
                       for r in range(self.info.world_size))
            for _ in range(most - len(chunks)):
                self._loss(self.val_rows[: self.micro])  # result unused
        self.model.train()
        return all_reduce_mean(sum(losses) / max(1, len(losses)), self.info)

    def _record(self, row: dict[str, Any], bar: tqdm) -> None:
        """A finished step's row: refused if its loss is not finite, else kept and shown."""
        if not math.isfinite(row["loss"]):
            bar.close()
            self._fail(f"the training loss is {row['loss']} at step {row['step']}", row["step"])
        self.metrics.append(row)
        bar.update(1)
        bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s']:.0f}")

    # ------------------------------------------------------------------ loop
    def run(self) -> dict[str, Any]:
        """Train to `cfg.steps` (the summary), or stop early with a checkpoint ({"stopped_at": step,
        "reason": "time_limit" | "interrupted" | "stop_after"}): Ctrl-C finishes the step it
        interrupts (`Interrupts`)."""
        try:
            with self.interrupts.caught(self.info.is_main):
                return self._run()
        finally:
            self.release_step()
            self.close()

    def release_step(self) -> None:
        """Let go of the step (its CUDA graphs destroyed now, not whenever the collector finds the
        trainer): a graph step that captured NCCL collectives must be gone before the process
        group is destroyed, or the process hangs at exit (`mhar_probe.step`, pytorch#115388)."""
        if isinstance(self.stepper, GraphStep):
            self.stepper.release()
        self.stepper = None

    @property
    def kernels(self) -> Any:
        """The triton kernels' configuration for this run (a `mhar_probe.kernels.KernelConfig`;
        None for another backend): passed to the model with its backend (`build_model`) and
        recorded in summary.json, never set process-wide."""
        if self.cfg.routing_backend != "triton":
            return None
        from .kernels import KernelConfig

        return KernelConfig(routing_douts=self.cfg.routing_douts, forward=self.cfg.routing_forward,
                            stack_backward=self.cfg.routing_backward)

    def _run(self) -> dict[str, Any]:
        cfg, info = self.cfg, self.info
        if info.is_main:  # a resumed run records what it was resumed with (more --steps)
            atomic.write_json(self.out / TRAIN_CONFIG, saved_settings(cfg))
            # every session that trains the run: where it started, the code, the software, the card
            session = session_record(self.step, self.device, info.world_size)
            session["hardware"]["cpu_threads"] = torch.get_num_threads()
            self.sessions = [*(RunFiles(self.out).sessions() if self.resumed else []), session]
            atomic.write_json(self.out / SESSIONS, self.sessions)
        if info.is_main and not self.resumed:
            self.tokenizer.save_pretrained(self.out)
            comp = self.corpus.composition
            from .data import tokenizer_fingerprint

            atomic.write_json(self.out / CORPUS, dict(
                name=self.corpus.name, fingerprint=self.corpus.fingerprint,
                tokenizer_fingerprint=tokenizer_fingerprint(self.tokenizer), vocab_size=len(self.tokenizer),
                train_tokens=self.train_tokens_available(),
                composition=comp.to_rows(), meta=jsonable(comp.meta)))
        if self.step == 0:
            self.metrics.append(dict(step=0, tokens=0, flops=0.0, lr=0.0, val_loss=self.evaluate()))
        if cfg.progress and info.is_main and self.threads is not None:  # the line above the bar
            print(f"{self.out}: {self.threads[0].line()}", file=sys.stderr)
        bar = tqdm(total=cfg.steps, initial=self.step, disable=not (cfg.progress and info.is_main),
                   desc=self.label, unit="step", dynamic_ncols=True)
        self.model.train()
        lagged: LaunchedStep | None = None  # launched, not yet read back (overlapped steps only)
        while self.step < cfg.steps:
            if not self.overlap_steps:
                row = self.train_step()
            else:  # launch step k + 1, then read step k back while the device runs k + 1
                launched = self.launch_step()
                if lagged is not None:
                    self._record(self.finish_step(lagged, in_flight=True), bar)
                    lagged = None
                if not (self.time_up or self.interrupted or self._must_settle(launched.step)):
                    lagged = launched
                    continue
                row = self.finish_step(launched)
            if self._evaluates_after(self.step):  # (the row is this step's: nothing is in flight here)
                row["val_loss"] = self.evaluate()
            self._record(row, bar)
            checkpointed = self._checkpoints_after(self.step)
            if checkpointed:
                self._checkpoint()
            stop = ("interrupted" if self.interrupted else "time_limit" if self.time_up
                    else "stop_after" if self._stops_after(self.step) else None)
            if stop is not None and self.step < cfg.steps:
                if not checkpointed:
                    self._checkpoint()
                bar.close()
                return {"stopped_at": self.step, "reason": stop}
        bar.close()
        return self._finish()

    def _checkpoint(self) -> None:
        started = self.clock()
        try:
            self._write_checkpoint()
        finally:
            self._timed("checkpoint", started)

    def _write_checkpoint(self) -> None:
        state = dict(step=self.step, tokens=self.tokens, flops=self.flops)
        if self.full_checkpoints or self.fsdp:
            model_state = full_model_state(self.model)  # collectives: every rank takes part
            optim_state = full_optimizer_state(self.model, self.optimizer)
            extra = self.extra_state()
            if self.info.is_main:
                write_metrics(self.out / METRICS, self.metrics)
                save_full_checkpoint(self.out, model_state, optim_state, state, extra)
        elif self.info.is_main:
            write_metrics(self.out / METRICS, self.metrics)
            save_checkpoint(self.out, self.model, self.optimizer, state)
        barrier(self.info)

    def restore(self) -> dict[str, Any]:
        """Load the checkpoint in `self.out` into model, optimizer (and extras); returns its state."""
        # the checkpoint's own format decides how it is read, so a run saved with or without --fsdp
        # resumes with the other (`RESUME_MAY_CHANGE`), on any number of processes
        by_names = read_checkpoint_state(self.out, self.cfg.steps).get("optimizer_keys") == "names"
        if not (self.full_checkpoints or self.fsdp or by_names):
            return load_checkpoint(self.out, self.model, self.optimizer, steps=self.cfg.steps)
        model_state, optim_state, state, extra = load_full_checkpoint(self.out, steps=self.cfg.steps,
                                                                      model=self.model, optimizer=self.optimizer)
        load_full_model_state(self.model, model_state)
        load_full_optimizer_state(self.model, self.optimizer, optim_state)
        self.load_extra_state(extra)
        return state

    def _fail(self, reason: str, step: int) -> None:
        """Stop a run diverged at `step`: summary.json says failed (never finished); the last
        checkpoint stays."""
        if self.info.is_main:
            write_metrics(self.out / METRICS, self.metrics)
            atomic.write_json(self.out / SUMMARY, dict(finished=False, failed=reason, steps=step,
                                                              method=self.cfg.method, lr=self.cfg.lr))
        barrier(self.info)
        raise UserError(f"{reason}: the run diverged and is marked failed in {self.out / SUMMARY}; "
                        f"try a lower --lr")

    def _finish(self) -> dict[str, Any]:
        evals = [m["val_loss"] for m in self.metrics if "val_loss" in m]
        summary = self.summary(evals)
        self.save_final()
        if self.info.is_main:
            atomic.write_json(self.out / SUMMARY, summary)
        barrier(self.info)
        return summary

    def train_tokens_available(self) -> int:
        """Training positions in the packed train split (rows x T): one epoch's tokens."""
        return int(self.train_rows.shape[0]) * (int(self.train_rows.shape[1]) - 1)

    def summary(self, evals: list[float]) -> dict[str, Any]:
        tail = tail_of((m["step"], m["val_loss"]) for m in self.metrics if "val_loss" in m)
        corpus_tokens = self.train_tokens_available()
        has_heads = methods.method(self.cfg.method).has_routing_heads
        return dict(
            finished=True, method=self.cfg.method, preset=self.cfg.preset, steps=self.step,
            routing_heads=self.model_config.routing_heads if has_heads else None,
            kv_heads=self.model_config.num_key_value_heads,
            lr=self.cfg.lr, seed=self.cfg.seed, tokens=self.tokens, flops=self.flops,
            corpus_fingerprint=self.corpus.fingerprint, train_tokens=corpus_tokens,
            epochs=self.tokens / corpus_tokens if corpus_tokens else None,
            corpus_cap=self.corpus.composition.meta.get("cap"),
            initial_val_loss=evals[0], final_val_loss=evals[-1],
            tail_mean_val_loss=tail.mean, tail_k=tail.k, tail_evaluations=tail.evaluations,
            parameters=sum(p.numel() for p in self.model.parameters()),
            world_size=self.info.world_size, package_version=__version__, cuda_graphs=self.cuda_graphs,
            overlap_steps=self.overlap_steps, loss_kernel=self.loss_kernel, compiled_sublayers=self.compiled,
            **({"fsdp": True} if self.fsdp else {}), **self._kernel_record(),
            provenance=dict(sessions=self.sessions),
        )

    def _kernel_record(self) -> dict[str, Any]:
        """Which triton kernels computed the routing (none for other backends or methods)."""
        if self.cfg.routing_backend != "triton" or not methods.method(self.cfg.method).routes:
            return {}
        from mhar_probe.kernels import kernel_settings

        return {"routing_kernels": kernel_settings(self.kernels)}

    def save_final(self) -> None:
        """The trained model in Hugging Face format in the run directory (rank 0 writes)."""
        if not self.fsdp:
            if self.info.is_main:
                self.model.save_pretrained(self.out)
                for weights in self.out.glob("*.safetensors"):  # safetensors writes them owner-only (0600)
                    weights.chmod(atomic.file_mode())
            return
        state = full_model_state(self.model)
        if self.info.is_main:
            save_hf_dir(self.out, self.model.config, state, MHARForCausalLM,
                        getattr(self.model, "generation_config", None))


def train(cfg: TrainConfig, clock: Callable[[], float] = time.monotonic,
          deadline: Deadline | None = None) -> dict[str, Any]:
    """Train one run end to end; returns the summary, or {"stopped_at": step, "reason": ...} when
    it stopped early (`stop_after`, or `deadline`: by default `time_limit` seconds on `clock` after
    this call; `mhar train` counts them from the start of the process)."""
    check_device(cfg.device)
    info = init_distributed(cfg.device)
    try:
        return Trainer(cfg, info, deadline=deadline, clock=clock).run()
    finally:
        shutdown(info)
