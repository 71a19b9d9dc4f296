"""One optimizer step of training, run eagerly or replayed from CUDA graphs.

A step over the micro-batches b_1..b_n of one process (gradient accumulation):

    g     = sum_i grad( objective(b_i) / n )
    g    <- g * min(1, c / (||g|| + 1e-6))          (global-norm clipping, c = grad_clip)
    theta <- AdamW(theta, g, lr);  g <- 0;  after_step()

`EagerStep` issues every kernel from Python each step; that is the only way under DDP / FSDP2
and on the CPU. `GraphStep` captures the same step once, in CUDA graphs -- the first
micro-batch's forward and backward (which writes the gradients), the further micro-batches'
(which add to them, replayed n - 1 times), and the clipping, update and `after_step` -- and
afterwards launches n + 1 graphs per step instead of thousands of kernels, so the step is bound
by the GPU, not by the host. Both return the
step's mean cross-entropy, the gradient norm before clipping and the extra loss terms, read back
with one synchronisation per step.

The graph step's contract (what capture needs):
- every micro-batch has the same shape, and `objective` / `after_step` run only device work on
  tensors that live as long as the step (no `.item()`, no host copies, no shape that depends on
  data); the routing kernels keep their host-built tables on the device (kernels/README.md);
- the optimizer is AdamW; the graph step switches it to the fused, capturable implementation with
  a device tensor as its learning rate, which `__call__` fills each step (state and flags loaded
  from a checkpoint are re-applied before capture, so a resumed run captures the same step);
- before capture, one forward and backward runs eagerly on a side stream (Triton compiles,
  gradients are allocated) and the gradients are zeroed again; an optimizer without state gets it
  from a null update (zero gradients, learning rate 0: parameters unchanged) whose step counters
  are then reset to 0. Training therefore starts from exactly the state the eager step would;
- the gradients live in the graphs' pool after capture: nothing may set them to None;
- Python's cyclic garbage collector is run before capture and paused during it (`gc_paused`):
  since torch 2.9 `torch.cuda.graph` no longer collects first, and an automatic collection inside
  a capture that frees an older graph (a finished run's step, kept alive by a reference cycle)
  destroys it mid-capture, which CUDA forbids (cudaErrorStreamCaptureInvalidated; pytorch#161037).
  The GPU ladder's first call failed so, in the fifth run of one process.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass
from typing import Callable, ContextManager, Sequence

import torch
from torch import Tensor, nn

#: rows [m, T+1] on the device -> (training objective, cross-entropy, extra terms by name)
Objective = Callable[[Tensor], "tuple[Tensor, Tensor, dict[str, Tensor]]"]


@dataclass
class StepResult:
    """What one step reports (floats on the host)."""

    loss: float  # mean cross-entropy over the micro-batches
    grad_norm: float  # ||g|| before clipping
    extras: dict[str, float]  # mean of each extra loss term


class EagerStep:
    """The step issued op by op from Python (any device, DDP and FSDP2 included).

    `sync(i_last)` is a context manager factory that enables the gradient all-reduce only on the
    last micro-batch; `before_clip()` runs after the backward passes (FSDP2's replicated-gradient
    sum); `clip(params, c)` returns ||g|| as a float."""

    def __init__(self, *, objective: Objective, params: Sequence[nn.Parameter], optimizer: torch.optim.Optimizer,
                 grad_clip: float, device: torch.device, clip: Callable[[list, float], float],
                 sync: Callable[[bool], ContextManager] | None = None,
                 before_clip: Callable[[], None] | None = None, after_step: Callable[[], None] | None = None):
        self.objective, self.params, self.optimizer = objective, list(params), optimizer
        self.grad_clip, self.device, self.clip = grad_clip, device, clip
        self.sync = sync or (lambda last: contextlib.nullcontext())
        self.before_clip = before_clip or (lambda: None)
        self.after_step = after_step or (lambda: None)

    def __call__(self, micro_batches: Sequence[Tensor], lr: float) -> StepResult:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n = len(micro_batches)
        total, extras = 0.0, {}
        for i, rows in enumerate(micro_batches):
            with self.sync(i == n - 1):
                objective, ce, extra = self.objective(rows.to(self.device))
                (objective / n).backward()
            total += float((ce / n).detach())
            for name, value in extra.items():
                extras[name] = extras.get(name, 0.0) + float(value.detach()) / n
        self.before_clip()
        grad_norm = self.clip(self.params, self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.after_step()
        return StepResult(total, grad_norm, extras)


class GraphStep:
    """The same step captured once in CUDA graphs and replayed (one CUDA process, AdamW).

    Capture happens at the first call, from its micro-batches' shape; `pool` lets several steps
    (e.g. the arms of a benchmark, replayed one after another, never concurrently) share one
    graph memory pool: what outlives a replay (the gradients, allocated by the first micro-batch's
    graph) stays allocated, so a later capture in the pool reuses only temporaries."""

    def __init__(self, *, objective: Objective, params: Sequence[nn.Parameter], optimizer: torch.optim.AdamW,
                 grad_clip: float, device: torch.device, after_step: Callable[[], None] | None = None,
                 pool: tuple | None = None):
        if device.type != "cuda":
            raise ValueError(f"a CUDA-graph step needs a CUDA device, not {device}")
        if not isinstance(optimizer, torch.optim.AdamW):
            raise TypeError(f"the CUDA-graph step supports AdamW, not {type(optimizer).__name__}")
        self.objective, self.params, self.optimizer = objective, list(params), optimizer
        self.grad_clip, self.device = grad_clip, device
        self.after_step = after_step or (lambda: None)
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.lr = torch.zeros((), device=device)  # AdamW reads it on the device at every replay
        self.rows: Tensor | None = None  # the captured micro-batch's input, [m, T+1]
        self.micro_graphs: list[torch.cuda.CUDAGraph] = []  # the first micro-batch's, the further ones'
        self.update_graph: torch.cuda.CUDAGraph | None = None

    # ------------------------------------------------------------------ capture
    def _prepare_optimizer(self) -> None:
        """Fused, capturable AdamW with the device learning rate; step counters on the device."""
        for group in self.optimizer.param_groups:
            group.update(lr=self.lr, fused=True, foreach=None, capturable=True)
        for p, state in self.optimizer.state.items():
            if "step" in state and state["step"].device != p.device:
                state["step"] = state["step"].to(p.device, torch.float32)

    def _null_update(self) -> None:
        """Create the optimizer's state without changing the parameters (see the module notes)."""
        if self.optimizer.state:  # a resumed run's moments and step counts
            return
        self.lr.zero_()
        self.optimizer.step()  # zero gradients and lr 0: theta unchanged, moments 0
        for state in self.optimizer.state.values():
            state["step"].zero_()

    def warm_up(self, micro_batches: Sequence[Tensor]) -> None:
        """Everything capture needs done first, for micro-batches shaped like these: one eager
        forward and backward on a side stream (kernels compile, gradients are allocated, the extra
        terms are named; then the gradients are zeroed again) and the optimizer's state.

        Several steps sharing a pool should all warm up before any captures: a warm-up's
        temporaries come from the ordinary allocator, which a captured pool does not give back."""
        self.n = len(micro_batches)
        self.rows = torch.zeros(micro_batches[0].shape, dtype=torch.long, device=self.device)  # [m, T+1]
        self._prepare_optimizer()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.optimizer.zero_grad(set_to_none=False)
            objective, ce, extra = self.objective(self.rows)
            objective.backward()
            self.optimizer.zero_grad(set_to_none=False)
            self._null_update()
            self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
            self.extra_sums = {k: torch.zeros((), dtype=torch.float64, device=self.device) for k in extra}
            self.grad_norm = torch.zeros((), dtype=torch.float32, device=self.device)
            del objective, ce, extra
        torch.cuda.current_stream(self.device).wait_stream(side)

    def capture(self) -> None:
        """Record the step's graphs (after `warm_up`): the first micro-batch's forward and backward,
        which creates the gradients (they live in the graph's pool from then on, at fixed
        addresses); the further micro-batches', which add to them; the clipping and update.
        Garbage is collected first and the collector paused throughout (see the module notes)."""
        with gc_paused():
            self._capture()

    def _capture(self) -> None:
        n = self.n
        self.optimizer.zero_grad(set_to_none=True)  # the first backward writes, not adds (no zero fill)
        self.micro_graphs = []
        for first in (True, False)[: 2 if n > 1 else 1]:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                objective, ce, extra = self.objective(self.rows)
                (objective / n).backward()
                sums = [(self.loss_sum, ce), *((self.extra_sums[k], v) for k, v in extra.items())]
                for total, value in sums:
                    (total.copy_ if first else total.add_)(value.detach().double() / n)
                del objective, ce, extra, sums
            self.micro_graphs.append(graph)
        self.update_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.update_graph, pool=self.pool):
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
            self.grad_norm.copy_(norm)
            self.optimizer.step()
            self.after_step()
            del norm

    # ------------------------------------------------------------------ replay
    def __call__(self, micro_batches: Sequence[Tensor], lr: float) -> StepResult:
        n = len(micro_batches)
        if self.update_graph is None:  # not captured yet
            if self.rows is None:
                self.warm_up(micro_batches)
            self.capture()
        if n != self.n or micro_batches[0].shape != self.rows.shape:
            raise ValueError(f"the CUDA-graph step was captured for {self.n} micro-batches of "
                             f"{tuple(self.rows.shape)}, got {n} of {tuple(micro_batches[0].shape)}")
        self.lr.fill_(lr)
        batch = torch.cat(list(micro_batches)).to(self.device, non_blocking=True)  # [n * m, T+1]
        for i, rows in enumerate(batch.split(self.rows.shape[0])):
            self.rows.copy_(rows)
            self.micro_graphs[min(i, 1)].replay()
        self.update_graph.replay()
        values = torch.stack([self.loss_sum, self.grad_norm.double(), *self.extra_sums.values()]).tolist()
        return StepResult(values[0], values[1], dict(zip(self.extra_sums, values[2:])))


@contextlib.contextmanager
def gc_paused():
    """Collect garbage now, then keep Python's automatic collection off until the block ends
    (restoring whatever state it had), so no finaliser runs inside a CUDA-graph capture."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def choose_cuda_graphs(requested: bool | None, device: torch.device, world_size: int) -> bool:
    """Whether training steps replay CUDA graphs: by default on one CUDA process; asked for
    elsewhere, a `ValueError` that says why not (the caller turns it into a user error)."""
    possible = device.type == "cuda" and world_size == 1
    if requested and device.type != "cuda":
        raise ValueError(f"--cuda-graphs needs a CUDA device (this run trains on {device.type})")
    if requested and world_size > 1:
        raise ValueError(f"--cuda-graphs does not compose with DDP or FSDP2 ({world_size} processes): "
                         f"their gradient collectives run outside the graph; drop the flag (multi-process "
                         f"runs step eagerly)")
    return possible if requested is None else requested
