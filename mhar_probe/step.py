"""One optimizer step of training, run eagerly or replayed from CUDA graphs.

A step over the micro-batches b_1..b_n of one process (gradient accumulation):

    g     = sum_i grad( objective(b_i) / n )
    g    <- g * min(1, c / (||g|| + 1e-6))          (global-norm clipping, c = grad_clip)
    theta <- AdamW(theta, g, lr);  g <- 0;  after_step()

`EagerStep` issues every kernel from Python each step; that is the only way under FSDP2 and on
the CPU. `GraphStep` captures the same step once, in CUDA graphs -- the first
micro-batch's forward and backward (which writes the gradients), the further micro-batches'
(which add to them, replayed n - 1 times), and the clipping, update and `after_step` -- and
afterwards launches n + 1 graphs per step instead of thousands of kernels, so the step is bound
by the GPU, not by the host. Both report the
step's mean cross-entropy, the gradient norm before clipping and the extra loss terms, read back
with one synchronisation per step: `step(batches, lr)` returns them (`StepResult`);
`step.launch(batches, lr)` returns a `PendingStep` whose `result()` reads them, so the host may
launch the next step before it waits for this one (`choose_overlap_steps`; the trainer does so on
one CUDA process, which hides the host's time between two steps -- the batch's copy, the learning
rate, the first graph's launch -- behind the device's work).

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

Under DDP (`GraphStep(ddp=...)`) the gradient all-reduce is captured with the backward that
triggers it (NCCL >= 2.9.6 allows capture), following PyTorch's recipe for DDP and CUDA graphs:
- the DDP module is built on the step's side stream (`stream`), the stream its warm-up and
  capture then use: DDP keeps each parameter's gradient-accumulator node, which runs on the
  stream that was current when DDP built it, and a capture must see those kernels too;
- `DDP_WARMUP` (11) eager forward/backward passes with the all-reduce run before capture: DDP
  rebuilds its buckets after the first ones and times its first iterations with CUDA events
  (runtime statistics), neither of which a capture may contain. They change no parameter (no
  optimizer step; the gradients are zeroed after them);
- the gradients are DDP's bucket views (`gradient_as_bucket_view=True`), allocated once at fixed
  addresses: every micro-batch graph *adds* to them and the update graph zeroes them last;
- only the last micro-batch's graph all-reduces (the others are captured under `no_sync`), so
  up to three graphs are captured: (first, no sync), (further, no sync), (last, sync);
  `micro_roles` gives each micro-batch its graph;
- the capture uses CUDA's thread-local capture mode, so the process group's watchdog thread may
  keep querying its events while this thread captures;
- the graphs are destroyed (`release`) before the process group is: NCCL's communicator
  teardown waits for graphs that captured its collectives, so a process that destroys its
  process group with the step's graphs still alive hangs at exit (pytorch#115388). The trainer
  holds its step in a reference cycle (the objective is its bound method), so only an explicit
  release frees the graphs in time.
FSDP2 cannot be captured: it all-gathers and frees parameters from Python hooks with per-step
allocations on its own streams (`choose_cuda_graphs` refuses it, and steps FSDP2 eagerly by default).
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

#: eager DDP iterations before capture (PyTorch's notes on DDP under CUDA graphs: at least 11)
DDP_WARMUP = 11


def micro_roles(n: int, ddp: bool) -> list[tuple[bool, bool]]:
    """The graph each of n micro-batches replays, as (first, sync): `first` copies the loss sums
    (and, without DDP, writes rather than adds the gradients); `sync` all-reduces the gradients
    after its backward. Without DDP there is nothing to synchronise (sync is always True)."""
    return [(i == 0, (i == n - 1) or not ddp) for i in range(n)]


@dataclass
class StepResult:
    """What one step reports (floats on the host)."""

    loss: float  # mean cross-entropy over the micro-batches
    grad_norm: float  # ||g|| before clipping
    extras: dict[str, float]  # mean of each extra loss term


class PendingStep:
    """A launched step whose report is read back when asked for (`result()`).

    On CUDA the sums are copied into pinned host memory behind the step's work, with an event
    recorded after the copy: `result()` waits for that event only, so the host may launch the next
    step first (the next step overwrites the device sums only after this copy, in stream order).
    Elsewhere (the CPU; the eager step, which reads its loss as it goes) the values are there
    already."""

    def __init__(self, values: "Tensor | StepResult", names: Sequence[str] = ()):
        self._result = values if isinstance(values, StepResult) else None
        self._names, self._event = list(names), None
        if self._result is None:
            if values.is_cuda:  # [2 + extras] float64
                self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
                self._host.copy_(values, non_blocking=True)
                self._event = torch.cuda.Event()
                self._event.record()
            else:
                self._host = values

    def result(self) -> StepResult:
        """The step's loss, gradient norm and extra terms (waits for the step to finish)."""
        if self._result is None:
            if self._event is not None:
                self._event.synchronize()
            values = self._host.tolist()
            self._result = StepResult(values[0], values[1], dict(zip(self._names, values[2:])))
        return self._result


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

    def launch(self, micro_batches: Sequence[Tensor], lr: float) -> PendingStep:
        """The step, done (this step reads its loss back as it goes): its report as a `PendingStep`."""
        return PendingStep(self(micro_batches, lr))


class GraphStep:
    """The same step captured once in CUDA graphs and replayed (one CUDA process or DDP, AdamW).

    With `ddp` (the DistributedDataParallel wrapper whose forward `objective` calls, built on
    `stream`) the all-reduce is captured too (see the module notes). `graphs=False` runs the
    very bodies that would be captured, eagerly and in replay order (any device: how the CPU
    tests check the DDP schedule; on a GPU it isolates a capture problem).

    Capture happens at the first call, from its micro-batches' shape; `pool` lets several steps
    (e.g. the arms of a benchmark, replayed one after another, never concurrently) share one
    graph memory pool: what outlives a replay (the gradients, allocated by the first micro-batch's
    graph) stays allocated, so a later capture in the pool reuses only temporaries."""

    def __init__(self, *, objective: Objective, params: Sequence[nn.Parameter], optimizer: torch.optim.AdamW,
                 grad_clip: float, device: torch.device, after_step: Callable[[], None] | None = None,
                 pool: tuple | None = None, ddp: nn.parallel.DistributedDataParallel | None = None,
                 stream: "torch.cuda.Stream | None" = None, graphs: bool = True, ddp_warmup: int = DDP_WARMUP):
        if graphs and device.type != "cuda":
            raise ValueError(f"a CUDA-graph step needs a CUDA device, not {device}")
        if not isinstance(optimizer, torch.optim.AdamW):
            raise TypeError(f"the CUDA-graph step supports AdamW, not {type(optimizer).__name__}")
        self.objective, self.params, self.optimizer = objective, list(params), optimizer
        self.grad_clip, self.device = grad_clip, device
        self.after_step = after_step or (lambda: None)
        self.ddp, self.stream, self.graphs, self.ddp_warmup = ddp, stream, graphs, ddp_warmup
        self.pool = pool if pool is not None or not graphs else torch.cuda.graph_pool_handle()
        # AdamW reads it on the device at every replay (uncaptured: in the parameters' dtype)
        self.lr = torch.zeros((), device=device, dtype=torch.float32 if graphs else self.params[0].dtype)
        self.rows: Tensor | None = None  # the captured micro-batch's input, [m, T+1]
        self.micro_graphs: dict[tuple[bool, bool], torch.cuda.CUDAGraph] = {}  # by `micro_roles` role
        self.update_graph: torch.cuda.CUDAGraph | None = None
        self.captured = False

    # ------------------------------------------------------------------ capture
    def _prepare_optimizer(self) -> None:
        """Fused, capturable AdamW with the device learning rate; step counters on the device."""
        for group in self.optimizer.param_groups:
            group.update(lr=self.lr, fused=True, foreach=None, capturable=self.graphs)
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
        with self._on_side_stream():
            self.optimizer.zero_grad(set_to_none=False)
            for _ in range(self.ddp_warmup if self.ddp is not None else 1):
                objective, ce, extra = self.objective(self.rows)
                objective.backward()
                names = list(extra)
                del objective, ce, extra
            self.optimizer.zero_grad(set_to_none=False)
            self._null_update()
            self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
            self.extra_sums = {k: torch.zeros((), dtype=torch.float64, device=self.device) for k in names}
            self.grad_norm = torch.zeros((), dtype=torch.float32, device=self.device)
        if self.ddp is not None and self.graphs:
            torch.cuda.synchronize(self.device)  # the warm-up's collectives are done before capture begins

    @contextlib.contextmanager
    def _on_side_stream(self):
        """Run the block on the step's side stream (made here if none was given), ordered after
        and before the current stream's work; a no-op off CUDA."""
        if self.device.type != "cuda":
            yield
            return
        if self.stream is None:
            self.stream = torch.cuda.Stream(self.device)
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            yield
        current.wait_stream(self.stream)

    def capture(self) -> None:
        """Record the step's graphs (after `warm_up`): the first micro-batch's forward and backward,
        which creates the gradients (they live in the graph's pool from then on, at fixed
        addresses); the further micro-batches', which add to them; the clipping and update.
        Garbage is collected first and the collector paused throughout (see the module notes)."""
        with gc_paused():
            self._capture()

    def _capture(self) -> None:
        if self.ddp is None:  # the first backward writes, not adds (no zero fill)
            self.optimizer.zero_grad(set_to_none=True)
        else:  # DDP's bucket views stay (zeroed by the warm-up, then by every update)
            self.optimizer.zero_grad(set_to_none=False)
        self.roles = micro_roles(self.n, self.ddp is not None)
        self.micro_graphs = {}
        for role in dict.fromkeys(self.roles):  # distinct roles, in order
            self.micro_graphs[role] = self._record(lambda role=role: self._micro(*role))
        self.update_graph = self._record(self._update)
        self.captured = True

    def _record(self, body: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """`body` captured in a new graph of the step's pool."""
        graph = torch.cuda.CUDAGraph()
        if self.ddp is None:  # (one process: as measured and tested before DDP capture existed)
            with torch.cuda.graph(graph, pool=self.pool):
                body()
        else:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
                body()
        return graph

    def _micro(self, first: bool, sync: bool) -> None:
        """One micro-batch (in `self.rows`): forward, backward (+ DDP's all-reduce if `sync`),
        and its share of the loss sums (copied if `first`, else added)."""
        quiet = self.ddp is not None and not sync
        with self.ddp.no_sync() if quiet else contextlib.nullcontext():
            objective, ce, extra = self.objective(self.rows)
            (objective / self.n).backward()
        sums = [(self.loss_sum, ce), *((self.extra_sums[k], v) for k, v in extra.items())]
        for total, value in sums:
            (total.copy_ if first else total.add_)(value.detach().double() / self.n)
        del objective, ce, extra, sums

    def _update(self) -> None:
        """Clip, AdamW, `after_step`; under DDP the gradients are then zeroed in place."""
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip, foreach=True)
        self.grad_norm.copy_(norm)
        self.optimizer.step()
        self.after_step()
        if self.ddp is not None:
            torch._foreach_zero_([p.grad for p in self.params if p.grad is not None])
        del norm

    def release(self) -> None:
        """Destroy the captured graphs now (after the device has finished their replays); a
        later call captures again. Under DDP this must precede destroying the process group
        (see the module notes)."""
        graphs = [*self.micro_graphs.values(), *([self.update_graph] if self.update_graph is not None else [])]
        if graphs:
            torch.cuda.synchronize(self.device)
        for graph in graphs:
            graph.reset()
        self.micro_graphs, self.update_graph, self.captured = {}, None, False

    # ------------------------------------------------------------------ replay
    def __call__(self, micro_batches: Sequence[Tensor], lr: float) -> StepResult:
        return self.launch(micro_batches, lr).result()

    def launch(self, micro_batches: Sequence[Tensor], lr: float) -> PendingStep:
        """Enqueue the step (capturing it first if needed) and return without waiting for the
        device: its report is read by the returned `PendingStep`. The batch goes to the device from
        pinned memory, so the host does not wait for the copy either."""
        n = len(micro_batches)
        if self.rows is None:
            self.warm_up(micro_batches)
        if not self.captured:
            if self.graphs:
                self.capture()
            else:
                self.roles, self.captured = micro_roles(self.n, self.ddp is not None), True
                if self.ddp is not None:
                    self.optimizer.zero_grad(set_to_none=False)
        if n != self.n or micro_batches[0].shape != self.rows.shape:
            raise ValueError(f"the CUDA-graph step was captured for {self.n} micro-batches of "
                             f"{tuple(self.rows.shape)}, got {n} of {tuple(micro_batches[0].shape)}")
        self.lr.fill_(lr)
        staged = torch.cat(list(micro_batches))  # [n * m, T+1]
        if self.device.type == "cuda":
            staged = staged.pin_memory()  # (the host allocator keeps it until the copy is done)
        batch = staged.to(self.device, non_blocking=True)
        for role, rows in zip(self.roles, batch.split(self.rows.shape[0])):
            self.rows.copy_(rows)
            if self.graphs:
                self.micro_graphs[role].replay()
            else:
                if role[0] and self.ddp is None:
                    self.optimizer.zero_grad(set_to_none=True)
                self._micro(*role)
        if self.graphs:
            self.update_graph.replay()
        else:
            self._update()
        values = torch.stack([self.loss_sum, self.grad_norm.double(), *self.extra_sums.values()])  # [2 + extras]
        return PendingStep(values, list(self.extra_sums))


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


def choose_overlap_steps(requested: bool | None, device: torch.device, world_size: int) -> bool:
    """Whether the trainer launches step k + 1 before it reads step k's loss back (`PendingStep`):
    by default on one CUDA process, where the host's time between two steps (the batch's copy, the
    learning rate, the first launch: 0.5-0.7 ms a step on the H100 machine) would leave the GPU
    idle; not on the CPU, whose steps finish before they return (`--overlap-steps` runs the same
    loop there, for tests). Under torchrun every step's loss is all-reduced before the next step
    starts (the same stop decision on every rank), so asking for it there is a `ValueError`."""
    if requested and world_size > 1:
        raise ValueError(f"--overlap-steps needs one process (this run has {world_size}): under torchrun each "
                         "step's loss and the stop decision are all-reduced before the next step starts")
    if requested is None:
        return device.type == "cuda" and world_size == 1
    return requested


def choose_cuda_graphs(requested: bool | None, device: torch.device, fsdp: bool = False) -> bool:
    """Whether training steps replay CUDA graphs: by default on CUDA, on one process and under DDP
    (any world size; the 2-GPU tests, tests/gpu/test_distributed_gpu.py, passed on 2x H200), not
    under FSDP2 (it steps eagerly); `--no-cuda-graphs` (False) steps eagerly. Asked for where it
    cannot run (off CUDA, with FSDP2), a `ValueError` that says why not (the caller turns it into
    a user error)."""
    if requested and device.type != "cuda":
        raise ValueError(f"--cuda-graphs needs a CUDA device (this run trains on {device.type})")
    if requested and fsdp:
        raise ValueError("--cuda-graphs does not compose with --fsdp: FSDP2 all-gathers and frees the parameters "
                         "from Python hooks, allocating per step on its own streams, which a CUDA graph cannot "
                         "record; FSDP2 steps eagerly (compiled sublayers still apply), or use DDP (no --fsdp) "
                         "with --cuda-graphs")
    if requested is None:
        return device.type == "cuda" and not fsdp
    return requested
