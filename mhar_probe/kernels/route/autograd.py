"""Autograd glue: the per-call routing function and the shared-buffer source stack.

* `route_triton(sources, query, g, H, eps, partial=None, gate=None)` -- self-contained call
  (delta form, or any stacked [N, B, T, d] tensor). Saves the sources and W; composes with
  activation checkpointing and FSDP because it is a pure function of its inputs.
* `TritonSourceStack` -- one [capacity, B*T, d] buffer per forward pass; every source after
  the first is stored in it once (source 0 stays its own row, so an fp32 embedding can sit
  beside a bf16 buffer): by the forward kernel of the next call, which reads it as its last
  row, or by a copy where anything else reads it first; every routing call reads rows [0, n). In backward each
  call stores its dout and shifted logit gradients (O(1) rows), and a source's gradient is
  gathered once, by the node of the first call made after it was appended.

Ordering: a zero-size token chains the calls so that autograd runs their backwards in strict
reverse order (this also holds for the G sibling calls of an `mhar_hw` site); the order is
still checked at runtime and a violation raises. Double backward is refused
(`once_differentiable`). Recomputation inside backward (activation checkpointing of a region
that touches the shared stack) is refused with a message; the delta path is not affected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from mhar_probe.kernels.config import DEFAULT, KernelConfig
from mhar_probe.kernels.launch import cdiv, is_interpreted, next_pow2
from mhar_probe.kernels.launch_tables import LaunchTables, card_name, tables_for
from mhar_probe.kernels.route.bwd import ROUTE_BWD_LOCAL, STACK_BWD, STACK_BWD_SPLIT, launch_dqdg
from mhar_probe.kernels.route.bwd_collect import (
    STACK_GATHER, e_splits, launch_collect_dqdg, launch_pair_e, narrow_tile_vec, pair_e_plan, tile_split,
)
from mhar_probe.kernels.route.bwd_fold import STACK_FOLD, STACK_FOLD_HELD, fold_due
from mhar_probe.kernels.route.fwd import ForwardAhead, head_split, launch_route_fwd, rounding_flags, route_fwd_kernel


def kernel_settings(config: KernelConfig = DEFAULT) -> dict[str, object]:
    """What a training run records of its kernels (`routing_kernels` in summary.json): the
    fields of the KernelConfig it ran with and Triton's version."""
    import triton

    return dict(config.as_dict(), triton=triton.__version__)


def _new(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, poison: bool) -> Tensor:
    """A kernel output: uninitialised, or NaN-filled where the config poisons outputs."""
    if poison:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _check_device(t: Tensor) -> None:
    if not t.is_cuda and not is_interpreted(route_fwd_kernel):
        raise RuntimeError(
            "routing backend 'triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before "
            "triton is imported, for the CPU interpreter); use routing_backend='eager' on CPU")


#: the kernels address a stack's rows as row * (B*T*d) in 32-bit integers (`V + j * stride_vn`,
#: `DOUT_BUF + c * stride_dc`, `ACC + j * P * D`): a stack of more elements would wrap silently
INT32_ELEMENTS = 2**31 - 1


def check_offsets(rows: int, positions: int, d: int) -> None:
    """Refuse (ValueError) a stack of `rows` sources of [positions, d] whose element offsets would
    overflow the kernels' 32-bit row arithmetic."""
    if rows * positions * d > INT32_ELEMENTS:
        raise ValueError(
            f"routing backend 'triton': {rows} sources x {positions} positions x d={d} = "
            f"{rows * positions * d:,} elements, more than the kernels' 32-bit offsets address "
            f"({INT32_ELEMENTS:,}); use a smaller microbatch (B x T) or routing_backend='eager'")


def check_heads(d: int, num_heads: int) -> None:
    """Refuse (ValueError) a read of width d in H heads that the kernels cannot route."""
    if num_heads < 1 or d % num_heads:
        raise ValueError(f"hidden size d={d} is not divisible by routing heads H={num_heads}")
    if num_heads & (num_heads - 1):
        raise ValueError(f"routing backend 'triton' needs a power-of-two head count, got H={num_heads}")


def _fast_apply(fn: type[torch.autograd.Function]):
    """`fn.apply` without `Function.apply`'s Python wrapper, which (with no `setup_context`)
    only unwraps functorch's dead wrappers before calling the C++ apply: the same call, about
    9 us less host time per routing call on this CPU. Under functorch transforms it is the
    ordinary `fn.apply`, and so is it while torch.compile traces (it special-cases `apply`)."""
    raw = super(torch.autograd.Function, fn).apply

    def apply(*args):
        if torch._C._are_functorch_transforms_active() or torch.compiler.is_compiling():
            return fn.apply(*args)
        return raw(*args)

    return apply


def _refuse_recompute() -> None:
    if torch._C._current_graph_task_id() != -1:
        raise RuntimeError(
            "routing backend 'triton': the shared source stack cannot be re-run inside backward "
            "(activation checkpointing of a region that routes over the stack). Disable "
            "activation checkpointing for the replacement forms, or use routing_backend='eager'.")


# --------------------------------------------------------------------------- per-call path
class _RouteLocal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, sources: Tensor, query: Tensor, norm_weight: Tensor, partial: Tensor | None,
                gate: Tensor | None, num_heads: int, eps: float, cfg: KernelConfig):  # type: ignore[override]
        out, W = _route_local_fwd(sources, query, norm_weight, num_heads, eps, partial, gate, cfg)
        ctx.mark_non_differentiable(W)
        ctx.save_for_backward(sources, query, norm_weight, gate, W)
        ctx.has_partial, ctx.num_heads, ctx.eps, ctx.cfg = partial is not None, num_heads, eps, cfg
        ctx.partial_dtype = partial.dtype if partial is not None else None
        return out, W

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor | None, _dW: Tensor | None):  # type: ignore[override]
        sources, query, norm_weight, gate, W = ctx.saved_tensors
        N, B, T, D = sources.shape
        P, H = B * T, ctx.num_heads
        if dout is None:
            dout = torch.zeros((B, T, D), dtype=sources.dtype, device=sources.device)
        dout = dout.contiguous()
        poison = ctx.cfg.poison
        block_k, block_p, num_warps, *_ = tables_for(ctx.cfg, card_name(sources.device)).fwd_config(D, H)
        grid = cdiv(P, block_p)
        dV = _new((N, B, T, D), sources.dtype, sources.device, poison)  # [N, B, T, d]
        epart = _new((grid, D), torch.float32, sources.device, poison)  # per-program E partials
        gpart = _new((grid,), torch.float32, sources.device, poison)  # per-program <dout, mix>
        has_gate = ctx.has_partial and gate is not None
        ROUTE_BWD_LOCAL(grid, (
            sources, P * D, dout, query, norm_weight, gate if has_gate else query, W, dV,
            epart, gpart, P, N, ctx.eps),
            dict(D=D, H=H, K=D // H, BLOCK_K=block_k, BLOCK_P=block_p, HAS_GATE=has_gate,
                 ROUND_KEY=rounding_flags(sources.dtype, norm_weight.dtype)[0]), num_warps)
        dq = _new(query.shape, query.dtype, query.device, poison)
        dg = _new(norm_weight.shape, norm_weight.dtype, norm_weight.device, poison)
        launch_dqdg(epart, query, norm_weight, dq, dg)
        dpartial = dout.to(ctx.partial_dtype) if ctx.has_partial else None
        # the gate's gradient sums <dout, mix> over every position (cancellation-prone): the
        # per-program partials are added in float64
        dgate = gpart.sum(dtype=torch.float64).reshape(gate.shape).to(gate.dtype) if has_gate else None
        return dV, dq, dg, dpartial, dgate, None, None, None


def _route_local_fwd(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                     eps: float, partial: Tensor | None, gate: Tensor | None, cfg: KernelConfig
                     ) -> tuple[Tensor, Tensor]:
    N, B, T, D = sources.shape
    P = B * T
    out = _new((B, T, D), sources.dtype, sources.device, cfg.poison)
    W = _new((N, B, T, num_heads), torch.float32, sources.device, cfg.poison)
    if partial is not None:
        partial = partial.contiguous()
    launch_route_fwd(sources, N, P, query.contiguous(), norm_weight.contiguous(), num_heads, eps,
                     out, W, partial=partial, gate=gate, tables=tables_for(cfg, card_name(sources.device)))
    return out, W


_route_local_apply = _fast_apply(_RouteLocal)


def route_triton(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                 eps: float = 1e-6, partial: Tensor | None = None, gate: Tensor | None = None,
                 config: KernelConfig = DEFAULT) -> tuple[Tensor, Tensor]:
    """Fused eq. (mh) on a stacked [N, B, T, d] tensor: (out [B, T, d], weights [N, B, T, H]),
    forward and backward with the kernels of `config`."""
    _check_device(sources)
    N, B, T, D = sources.shape
    check_heads(D, num_heads)
    if N < 1:
        raise ValueError("routing needs at least one source")
    check_offsets(N, B * T, D)
    sources = sources.contiguous()
    if partial is not None and partial.dtype != sources.dtype:
        partial = partial.to(sources.dtype)
    if gate is not None and partial is None:
        gate = None  # as the reference: the gate only scales the routed term of the delta form
    if not isinstance(config, KernelConfig):
        raise TypeError(f"config: expected a KernelConfig, got {type(config).__name__}")
    cfg = config
    tensors = [t for t in (sources, query, norm_weight, partial, gate) if t is not None]
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return _route_local_fwd(sources, query, norm_weight, num_heads, eps, partial, gate, cfg)
    return _route_local_apply(sources, query, norm_weight, partial, gate, num_heads, eps, cfg)


# ------------------------------------------------------------------------ shared-stack path
_NUM_SMS: dict[int, int] = {}
_FLAGS: dict[tuple[torch.dtype, torch.dtype], tuple[bool, bool]] = {}
_ROUND_MODE = {torch.bfloat16: 1, torch.float16: 2}  # key rounding of a call (pair_e_kernel)


def _programs(device: torch.device, blocks: int, per_sm: int) -> int:
    """Persistent grid: at most per_sm programs per multiprocessor (all blocks on the CPU)."""
    if device.type != "cuda":
        return blocks
    idx = device.index if device.index is not None else torch.cuda.current_device()
    sms = _NUM_SMS.get(idx)
    if sms is None:
        sms = _NUM_SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return max(1, min(blocks, per_sm * sms))


# Host-built int64 tables of the stack's backward (the call table, pair_e's work items), on the
# device once per layout: key (device, shape, values) -> (device tensor, its pinned source). A
# backward over a layout seen before launches from the same device tensor with no host-to-device
# copy, so a CUDA graph captured over it replays what it read at capture; the pinned source is
# kept too, so that a copy captured the first time the layout is seen also stays valid. A run has
# a few layouts (one per model shape); nothing is evicted, since a captured graph may read any.
_DEVICE_INTS: dict[tuple, tuple[Tensor, Tensor | None]] = {}


def _device_ints(values: list[int], shape: tuple[int, ...], device: torch.device) -> Tensor:
    """`values` as an int64 tensor of `shape` on `device`, built once per (device, shape, values)."""
    key = (device, shape, tuple(values))
    hit = _DEVICE_INTS.get(key)
    if hit is None:
        cuda = device.type == "cuda"
        host = torch.tensor(values, dtype=torch.int64, pin_memory=cuda).view(shape)
        # from pinned memory the copy is asynchronous: no wait for the forward pass's kernels
        hit = _DEVICE_INTS[key] = (host.to(device, non_blocking=True), host if cuda else None)
    return hit[0]


def _flags(storage: torch.dtype, weight: torch.dtype) -> tuple[bool, bool]:
    hit = _FLAGS.get((storage, weight))
    if hit is None:
        hit = _FLAGS[(storage, weight)] = rounding_flags(storage, weight)
    return hit


@dataclass(slots=True)
class _Call:
    n: int  # sources read: rows [0, n)
    H: int
    eps: float
    woff: int  # element offset of this call's W [n, P, H] in the stack's flat weight buffer
    j0: int  # rows [j0, j1) were appended since the previous call: gathered by this call's node
    j1: int
    dtype: torch.dtype  # promoted dtype of rows [0, n): the call's output and key rounding
    q: Tensor | None = None  # the call's query / key-norm weight (detached; set in forward)
    g: Tensor | None = None
    w: Tensor | None = None  # its weights, a view of the stack's flat W buffer (set in forward)
    res: Tensor | None = None  # collect mode, non-fp32 output: its rounding residual (forward)
    lead_woff: int = -1  # lookahead: where the next call's W starts (this call writes its rows [0, n))
    resume_from: int = 0  # lookahead: rows [0, resume_from) were folded by the previous call


class _StackRoute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, stack: "TritonSourceStack", call: int, rows: list[int], query: Tensor,
                norm_weight: Tensor, token_prev: Tensor, *new_sources: Tensor):  # type: ignore[override]
        # [B, T, d] from here: a view taken outside would add an autograd node per call
        out = stack._forward_call(call, query, norm_weight).view(stack.shape)
        ctx.stack, ctx.call, ctx.rows = stack, call, rows
        # collect mode: the first call also takes every site's (query, key-norm weight), after
        # its sources, and returns their gradients
        ctx.src_dtypes = [x.dtype for x in new_sources[: len(rows)]]
        ctx.save_for_backward(out)
        return out, out.new_empty(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor | None, _dtoken: Tensor | None):  # type: ignore[override]
        stack: _StackState = ctx.stack
        (out,) = ctx.saved_tensors
        need = ctx.needs_input_grad
        dts = set(ctx.src_dtypes)  # the kernel writes dx in the sources' own dtype when they share
        nsrc = len(ctx.src_dtypes)
        stack._want_params = any(need[6 + nsrc:])  # collect mode: skip the E pass if no one asks
        dq, dg, dx = stack._backward_call(ctx.call, dout, out, dts.pop() if len(dts) == 1 else None)
        j0 = stack._calls[ctx.call].j0
        if dx.dim() == 3:  # one source gathered: dx is its [B, T, d] gradient
            dxs = [(dx if dx.dtype == dt else dx.to(dt)) if need[6 + i] else None
                   for i, dt in enumerate(ctx.src_dtypes)]
        else:
            dxs = [dx[j - j0].to(dt) if need[6 + i] else None
                   for i, (j, dt) in enumerate(zip(ctx.rows, ctx.src_dtypes))]
        dtoken = stack._no_grad_token if need[5] else None  # ordering only: never read
        params = stack._param_grads(need[6 + nsrc:]) if stack.collect and ctx.call == 0 else []
        if ctx.call == 0:
            stack._release_backward()
        return (None, None, None, dq if need[3] else None, dg if need[4] else None, dtoken, *dxs,
                *params)


_stack_route_apply = _fast_apply(_StackRoute)


class _StackState:
    """Everything a stack's backward needs. It holds no autograd outputs (the chaining token
    lives in `TritonSourceStack`), so nodes that keep it in their ctx form no reference cycle:
    a forward without backward frees its buffers as soon as the outputs are dropped.

    Source 0 is kept as its own [P, d] row (`row0`, a reference to the appended tensor, as a
    Python list of sources would hold it); sources 1.. are stored into `buffer` [capacity, P, d]
    (its row 0 is unused; by the forward kernel of the call that first reads the source, else
    by a copy), allocated at the second append in that source's dtype. Under autocast that is
    an fp32 embedding beside a bf16 buffer (2 bytes per source element read instead of 4);
    every call computes in the promoted dtype of the rows it reads, as torch.stack of them
    would.

    The stack runs with the KernelConfig it was built with (`config`), backward too.
    Built with `params` (every site's query and key-norm weight, as the model passes them) it
    runs the fold-block backward (`bwd_fold.py`; config `stack_backward="fold"`, the
    default) or the 4-bytes/pair gather backward (`bwd_collect.py`, "gather"); without, the
    stack_bwd kernels (`bwd.py`), which re-read each call's sources (same gradients up to
    fp32 rounding)."""

    _OUT_CHUNK = 8  # call outputs are carved from [chunk, B*T, d] buffers (fewer allocations)

    def __init__(self, capacity: int, params: Sequence[tuple[Tensor, Tensor]] | None = None,
                 config: KernelConfig = DEFAULT) -> None:
        if not isinstance(config, KernelConfig):
            raise TypeError(f"config: expected a KernelConfig, got {type(config).__name__}")
        self.capacity = capacity
        self.config = config
        self.launch_tables: LaunchTables = tables_for(self.config)
        self._poison = self.config.poison
        # collect mode: every routing call's (query, key-norm weight) is known up front, one
        # entry per site in call order; a [G, d] query is G calls, one per row (mhar_hw)
        self.collect = params is not None
        self._sites: list[tuple[Tensor, Tensor]] = list(params) if self.collect else []
        self._expect: list[tuple[int, int]] = []  # per call: (site, row; -1 for a [d] query)
        self._site_call0: list[int] = []
        for site, (q, _) in enumerate(self._sites):
            self._site_call0.append(len(self._expect))
            self._expect += [(site, -1)] if q.dim() == 1 else [(site, r) for r in range(q.shape[0])]
        self._want_params = True
        self._dq_all: Tensor | None = None
        self._dg_all: Tensor | None = None
        self.row0: Tensor | None = None
        self.buffer: Tensor | None = None
        self._row_views: tuple[Tensor, ...] = ()  # buffer rows as [B, T, d] views
        # [capacity, P] fp32: r_n = rsqrt(mean(v_n^2) + eps) of rows [0, _r_upto), stored by the
        # forward launch that appended each row (row 0: the first call; R_STORED, STORE_R0) and
        # loaded by every later launch that reads the row from the buffer, and by the fold
        self._rnorm: Tensor | None = None
        self._r_upto = 0
        self._r_eps: float | None = None  # the eps those r were computed with (a call's key norm)
        self.shape: tuple[int, int, int] | None = None
        self.dtype: torch.dtype | None = None  # promoted dtype of every source appended so far
        self._len = 0
        # the last appended source while not yet read: (row, x [P, d], the version of x when
        # appended); the next call that reads it as its last row stores it
        self._unstored: tuple[int, Tensor, int] | None = None
        self._last_len = 0  # stack length at the previous routing call
        self._calls: list[_Call] = []
        self._w_flat: Tensor | None = None
        self._w_used = 0
        # per kind ("out": call outputs, "res": their rounding residuals): [chunk buffer, rows used]
        self._chunks: dict[str, list] = {"out": [None, 0], "res": [None, 0]}
        self._bwd_next: int | None = None  # next call whose backward may run (None: fresh)
        self._bwd_top = -1
        # forward="lookahead": (call, n, H, eps, dtype, W offset) the last call folded its rows for
        self._lead: tuple[int, int, int, float, torch.dtype, int] | None = None
        self._ahead_state: tuple[Tensor, Tensor] | None = None  # [P, d], [P, 2, H] fp32

    # -- forward ---------------------------------------------------------------------
    def append(self, x: Tensor) -> None:  # x: [B, T, d]
        _refuse_recompute()
        self._store_pending()
        if self._len >= self.capacity:
            raise RuntimeError(f"source stack is full ({self.capacity} sources)")
        if self.row0 is None:
            _check_device(x)
            B, T, D = x.shape
            check_offsets(self.capacity, B * T, D)
            self.shape = (B, T, D)
            self.row0 = x.detach().reshape(B * T, D).contiguous()
            self._rnorm = _new((self.capacity, B * T), torch.float32, x.device, self._poison)
            self.dtype = x.dtype
            self._len = 1
            self.launch_tables = tables_for(self.config, card_name(x.device))  # the card's rows
            return
        if x.shape != self.shape or x.device != self.row0.device:
            raise ValueError(f"source {self._len} has shape {tuple(x.shape)} on {x.device}; "
                             f"the stack holds {self.shape} on {self.row0.device}")
        if self.buffer is None:
            self.buffer = _new((self.capacity, *self.row0.shape), x.dtype, x.device, self._poison)
            self._row_views = self.buffer.view(self.capacity, *self.shape).unbind(0)  # [B, T, d] each
        elif x.dtype != self.buffer.dtype:  # a wider source: promote, as torch.stack does
            wide = torch.promote_types(self.buffer.dtype, x.dtype)
            if wide != self.buffer.dtype:
                if any(rec.n > 1 for rec in self._calls):
                    raise ValueError(f"source {self._len} ({x.dtype}) is wider than the stack's "
                                     f"{self.buffer.dtype} after routing over it has started")
                self.buffer = self.buffer.to(wide)
                self._row_views = self.buffer.view(self.capacity, *self.shape).unbind(0)
        x = x.detach()
        if x.dtype == self.buffer.dtype and x.is_contiguous():
            self._unstored = (self._len, x.view(self.row0.shape), x._version)
        else:
            self._row_views[self._len].copy_(x)
        self.dtype = torch.promote_types(self.dtype, x.dtype)
        self._len += 1

    def _take_unstored(self, n: int) -> tuple[Tensor, Tensor] | None:
        """(x, its buffer row [P, d]) for the launch of a call over rows [0, n) when its last
        row is the source not yet stored (the kernel stores it); otherwise store that source now
        (the call reads it from the buffer, or does not read it)."""
        pending = self._unstored
        if pending is None or pending[0] != n - 1:
            self._store_pending()
            return None
        self._unstored = None
        row, x, version = pending
        self._check_unchanged(row, x, version)
        return x, self._row_views[row]

    def _stored_r(self, n: int, append: tuple[Tensor, Tensor] | None, eps: float
                  ) -> tuple[Tensor | None, bool]:
        """(`launch_route_fwd`'s `rn`, `store_r0`) of a forward launch over rows [0, n) with
        key-norm `eps`: the stored r, or None where a row it reads from the buffer has none (stored
        by a copy, not by the launch that appended it) or another eps made them: that launch
        reduces every row itself and stores nothing. With `append`, the launch stores the
        appended row's r; the first launch stores row 0's."""
        read_to = n - 1 if append is not None else n  # rows [1, read_to) come from the buffer
        if max(self._r_upto, 1) < read_to or self._r_eps not in (None, eps):
            return None, False
        self._r_eps = eps
        store_r0 = self._r_upto == 0
        self._r_upto = max(self._r_upto, n if append is not None else 1)
        return self._rnorm, store_r0

    def _sources_have_r(self, j: int, eps: float) -> bool:
        """Whether the stored r of sources [0, j) with key-norm `eps` may stand in for the
        backward's own (`stack_fold_held_kernel`'s R_STORED)."""
        return self._r_upto >= j and self._r_eps == eps

    def _store_pending(self) -> None:
        """Copy the appended source that no call has stored yet into its buffer row."""
        pending = self._unstored
        if pending is not None:
            self._unstored = None
            row, x, version = pending
            self._check_unchanged(row, x, version)
            self.buffer[row].copy_(x)

    @staticmethod
    def _check_unchanged(row: int, x: Tensor, version: int) -> None:
        if x._version != version:
            raise RuntimeError(
                f"source {row} was modified in place after it was appended to the source stack "
                "and before a routing call read it; the stack reads an appended tensor when the "
                "next call routes over it. Append a copy (x.clone()).")

    def __len__(self) -> int:
        return self._len

    @property
    def rows(self) -> Tensor:  # [>=1, P, d]: what the kernels index rows n >= 1 in
        return self.row0.unsqueeze(0) if self.buffer is None else self.buffer

    def _dtype_of(self, n: int) -> torch.dtype:
        """Promoted dtype of rows [0, n)."""
        return self.row0.dtype if n == 1 else torch.promote_types(self.row0.dtype, self.buffer.dtype)

    def stacked(self, n: int | None = None) -> Tensor:  # [n, B, T, d] (a copy unless n == 1)
        n = self._len if n is None else n
        assert self.row0 is not None and self.shape is not None
        self._store_pending()
        if n == 1:
            return self.row0.view(1, *self.shape)
        dtype = self._dtype_of(n)
        return torch.cat([self.row0.view(1, *self.shape).to(dtype),
                          self.buffer[1:n].view(n - 1, *self.shape).to(dtype)])

    def _reserve_w(self, size: int, H: int) -> int:
        """Element offset of a call's [n, P, H] weights (and of its dl in backward)."""
        off = self._w_used
        guess = self.row0.shape[0] * H * self.capacity * (self.capacity + 1) // 2
        self._w_flat = self._grown(self._w_flat, off, size, guess)
        self._w_used += size
        return off

    def _grown(self, flat: Tensor | None, used: int, size: int, guess: int) -> Tensor:
        """A flat fp32 buffer with room for `size` elements after `used` (first `guess` long;
        doubled, its used part copied, when full)."""
        if flat is None:
            return _new((max(size, guess),), torch.float32, self.row0.device, self._poison)
        if used + size > flat.numel():
            grown = _new((max(2 * flat.numel(), used + size),), torch.float32, self.row0.device, self._poison)
            grown[:used].copy_(flat[:used])
            return grown
        return flat

    def _carve(self, kind: str, dtype: torch.dtype, call: int) -> Tensor:
        """One [B*T, d] row for routing call `call` from the current [chunk, B*T, d] buffer of
        `kind` ("out": call outputs, "res": their rounding residuals), a new buffer when it is full
        or of another dtype. A stack built with its sites' parameters knows how many calls are
        left, so its last buffer holds no rows past the last call (at 25 calls a fixed chunk of 8
        left 7 unused rows: 235 MB of fp32 rows at the 100M training microbatch)."""
        slot = self._chunks[kind]
        chunk, used = slot
        if chunk is None or used == chunk.shape[0] or chunk.dtype != dtype:
            rows = self._OUT_CHUNK
            if self.collect:
                rows = max(1, min(rows, len(self._expect) - call))
            chunk = slot[0] = _new((rows, *self.row0.shape), dtype, self.row0.device, self._poison)
            used = 0
        slot[1] = used + 1
        return chunk[used]

    def _reserve_call(self, call: int, n: int, H: int, eps: float) -> _Call:
        """The record of routing call `call` over rows [0, n), its weights' room reserved. With
        forward="lookahead" (collect mode), a call that the previous one folded its rows for
        resumes from that state, with its W continuing the rows the previous call wrote; any
        other call leads, reserving the next call's first n rows of W after its own."""
        P = self.row0.shape[0]
        dtype = self._dtype_of(n)
        rec = _Call(n, H, eps, -1, self._last_len, self._len, dtype)
        lead, self._lead = self._lead, None
        if lead is not None and lead[0] == call and n >= lead[1] and lead[2:5] == (H, eps, dtype) \
                and self._w_used == lead[5] + lead[1] * P * H:  # its W right after the rows written
            off = self._reserve_w((n - lead[1]) * P * H, H)
            rec.woff, rec.resume_from = off - lead[1] * P * H, lead[1]
        else:
            rec.woff = self._reserve_w(n * P * H, H)
            if self.collect and self.config.forward == "lookahead" and call + 1 < len(self._expect):
                rec.lead_woff = self._reserve_w(n * P * H, H)
                self._lead = (call + 1, n, H, eps, dtype, rec.lead_woff)
        return rec

    def _site_params(self, call: int) -> tuple[Tensor, Tensor]:
        """Collect mode: the (query, key-norm weight) call `call` routes with."""
        site, row = self._expect[call]
        qp, gp = self._sites[site]
        return (qp if row < 0 else qp[row]), gp

    def _ahead(self, rec: _Call, call: int) -> ForwardAhead | None:
        """The lookahead of call `call`'s forward launch (None: it has none)."""
        if rec.lead_woff < 0 and not rec.resume_from:
            return None
        P, D = self.row0.shape
        state = self._ahead_state
        if state is None or state[1].shape[-1] != rec.H:
            state = self._ahead_state = (_new((P, D), torch.float32, self.row0.device, self._poison),
                                         _new((P, 2, rec.H), torch.float32, self.row0.device, self._poison))
        nxt = None
        if rec.lead_woff >= 0:
            qn, gn = self._site_params(call + 1)
            nxt = (qn.detach(), gn.detach(), self._w_flat[rec.lead_woff: rec.lead_woff + rec.n * P * rec.H])
        return ForwardAhead(state, nxt, rec.resume_from)

    def _check_params(self, call: int, query: Tensor, norm_weight: Tensor) -> None:
        """Collect mode: call `call` must route with the parameters the stack was built with."""
        if call >= len(self._expect):
            raise ValueError(f"routing call {call}: the source stack was built with the parameters "
                             f"of {len(self._expect)} routing calls (params=...)")
        site, row = self._expect[call]
        qp, gp = self._sites[site]
        if row < 0:
            same_q = query is qp
        else:
            same_q = query.shape == qp.shape[1:] and \
                query.data_ptr() == qp.data_ptr() + row * qp.stride(0) * qp.element_size()
        if not (same_q and norm_weight is gp):
            raise ValueError(
                f"routing call {call} reads a query or key-norm weight other than site {site}'s "
                f"{'' if row < 0 else f'(row {row}) '}that the source stack was built with: "
                "`params` must list every site's (query, key-norm weight) in call order")

    def _forward_call(self, call: int, query: Tensor, norm_weight: Tensor) -> Tensor:
        rec = self._calls[call]
        # kept as given (not detached): read only by backward, which runs without grad mode
        rec.q, rec.g = query, norm_weight
        P = self.row0.shape[0]
        out = self._carve("out", rec.dtype, call)
        W = rec.w = self._w_flat[rec.woff: rec.woff + rec.n * P * rec.H]  # route() returns it
        if self.collect and rec.dtype != torch.float32:  # S'_c = <dout_c, res_c> in backward
            rec.res = self._carve("res", rec.dtype, call)
        append = self._take_unstored(rec.n)
        rn, store_r0 = self._stored_r(rec.n, append, rec.eps)
        launch_route_fwd(self.rows, rec.n, P, query, norm_weight, rec.H, rec.eps, out, W,
                         v0=self.row0, res=rec.res, append=append, tables=self.launch_tables,
                         ahead=self._ahead(rec, call), rn=rn, store_r0=store_r0)
        return out

    # -- backward --------------------------------------------------------------------
    def _enter_backward(self, call: int) -> None:
        task = torch._C._current_graph_task_id()
        if self._bwd_next is None or self._bwd_next == -1:  # fresh (or a retained graph again)
            self._begin_backward(call)
            self._bwd_task = task
        elif call != self._bwd_next or task != self._bwd_task:
            raise RuntimeError(
                f"routing backend 'triton': out-of-order backward (routing call {call} while call "
                f"{self._bwd_next} was expected in the same backward pass). The shared source stack needs its calls' "
                "backwards in reverse forward order; a previous backward through this stack may "
                "have been interrupted.")
        self._bwd_next = call - 1

    def _begin_backward(self, top: int) -> None:
        """Per-backward buffers, allocated once: douts, D'/S', q*g per call, call tables."""
        dev = self.row0.device
        P, D = self.row0.shape
        calls = self._calls[: top + 1]
        self._bwd_top = top
        self._store_pending()  # a source appended after the last call: no kernel stored it
        poison = self._poison
        # the stored douts: the promoted dtype (fp32 under autocast) or, opted into, the buffer's;
        # the fold-block backward keeps only the unfolded calls' (fold_calls slots: `_dout_slots`)
        storage = self.config.routing_douts == "storage" and self.buffer is not None
        fold = self.config.fold_calls if self.collect and self.config.stack_backward == "fold" else 0
        self._fold, self._frontier, self._acc = fold, top + 1, None
        slots = min(fold, top + 1) if fold else top + 1
        self._dout_buf = _new((slots, P, D), self.buffer.dtype if storage else self.dtype, dev, poison)
        self._d_flat = _new((self._w_used,), torch.float32, dev, poison)
        soffs, s = [], 0
        for rec in calls:
            soffs.append(s)
            s += P * rec.H
        self._s_flat = _new((s,), torch.float32, dev, poison)
        self._soff = soffs
        qs = torch.stack([rec.q for rec in calls]).float()
        gs = torch.stack([rec.g for rec in calls]).float()
        self._u = qs * gs  # [calls, d] key-path direction q * g
        poffs = [0]
        for rec in calls:
            poffs.append(poffs[-1] + rec.n)
        rmode = [_ROUND_MODE.get(rec.dtype, 0) for rec in calls]
        # [6, calls + 1] int64: n, H, woff, soff, poff, rounding mode per call, + a sentinel call
        # reading nothing (n = 0); on the device once per layout (`_device_ints`)
        self._tables = _device_ints(
            [*(r.n for r in calls), 0, *(r.H for r in calls), 1, *(r.woff for r in calls), 0, *soffs, 0,
             *poffs, *rmode, 0], (6, len(calls) + 1), dev)
        if self.collect:
            self._sh_flat = _new((s,), torch.float32, dev, poison)
            self._rall = _new((self._len, P), torch.float32, dev, poison)
            self._qg = torch.stack([qs, gs], 1)  # [calls, 2, d]
            self._e_pairs = _new((e_splits(P), poffs[-1], D), torch.float32, dev, poison)
            # one plan per launch (row 0, the buffer): their rows' widths choose the dot
            self._e_plan, self._e_plan_rows = (
                pair_e_plan(D, max(r.H for r in calls), frozenset(rmode), dev.type == "cuda",
                            self.launch_tables, narrow_rows=rows is not None and rows.element_size() < 4)
                for rows in (self.row0, self.buffer))
            self._build_items(calls, top, dev, self._e_plan[0])
        self._no_grad_token = torch.empty(0, device=dev)  # the chaining token's gradient
        self._hmax = max(r.H for r in calls)
        self._same_h = _uniform_heads(calls)  # the gather's constant-H path
        self._epart = None

    def _build_items(self, calls: list[_Call], top: int, dev: torch.device, block_c: int) -> None:
        """Work items of pair_e_kernel: (source j, first call of a block of `block_c` of its readers); the
        readers of j are among the calls from the one that gathers it (the first call after j
        was appended) to the top call. Source 0's items first (it is read from row 0)."""
        items: list[int] = []
        n0 = 0
        for c, rec in enumerate(calls):
            for j in range(rec.j0, rec.j1):
                for c0 in range(c, top + 1, block_c):
                    items += (j, c0)
                if j == 0:
                    n0 = len(items) // 2
        self._items = _device_ints(items or [0, 0], (max(1, len(items) // 2), 2), dev)  # [items, 2]
        self._items_n = (n0, len(items) // 2)

    def _row_bytes(self) -> int:
        """Narrowest element among the rows the gather loads: the buffer's sources (row 0
        where there is no buffer) and the stored douts."""
        rows = self.buffer if self.buffer is not None else self.row0
        return min(rows.element_size(), self._dout_buf.element_size())

    def _release_backward(self) -> None:
        # per-backward buffers only: the calls' records (the outputs' residuals too) stay, as a
        # retained graph may run backward again
        for name in ("_dout_buf", "_d_flat", "_s_flat", "_u", "_tables", "_epart", "_no_grad_token",
                     "_sh_flat", "_rall", "_qg", "_e_pairs", "_items", "_e_plan", "_e_plan_rows", "_acc"):
            setattr(self, name, None)

    def _param_grads(self, need: Sequence[bool]) -> list[Tensor | None]:
        """Collect mode, first call's node: (dquery, dnorm) of every site, flattened."""
        dq_all, dg_all = self._dq_all, self._dg_all  # [calls, d] fp32
        if dq_all is None:  # no parameter gradient was asked for
            return [None] * len(need)
        ncalls = dq_all.shape[0]
        grads: list[Tensor | None] = []
        for site, (qp, gp) in enumerate(self._sites):
            c0 = self._site_call0[site]
            G = 1 if qp.dim() == 1 else qp.shape[0]
            if c0 + G > ncalls:  # never routed in this forward
                grads += [None, None]
                continue
            dq = dq_all[c0] if qp.dim() == 1 else dq_all[c0:c0 + G]
            dg = dg_all[c0] if G == 1 else dg_all[c0:c0 + G].sum(0)
            grads.append((dq if dq.dtype == qp.dtype else dq.to(qp.dtype)) if need[2 * site] else None)
            grads.append((dg if dg.dtype == gp.dtype else dg.to(gp.dtype)) if need[2 * site + 1] else None)
        self._dq_all = self._dg_all = None
        return grads

    def _backward_call(self, call: int, dout: Tensor | None, out: Tensor,
                       dx_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """One call's backward; the gradients of the sources it gathers come back as one
        [j1 - j0, B, T, d] tensor ([B, T, d] when j1 - j0 <= 1) in `dx_dtype` (default: the
        stack's), rounded once from fp32 (under autocast the bf16 sublayer outputs get bf16 gradients without a cast kernel)."""
        self._enter_backward(call)
        rec = self._calls[call]
        P, D = self.row0.shape
        dev = out.device
        if dout is None:
            dout = torch.zeros_like(out)
        else:
            dout = dout.reshape(P, D)
            if not dout.is_contiguous():
                dout = dout.contiguous()
        nj = rec.j1 - rec.j0
        # [nj, B, T, d], or [B, T, d] for one source (handed to autograd without a select)
        dx = _new(self.shape if nj <= 1 else (nj, *self.shape), dx_dtype or self.dtype, dev, self._poison)
        if self.collect:
            self._backward_call_collect(call, rec, dout, out, dx)
            return None, None, dx
        H, HM = rec.H, self._hmax
        block_p, num_warps, per_sm, maxnreg = self.launch_tables.stack_config(D, H, HM)
        nprog = _programs(dev, cdiv(P, block_p), per_sm)
        if self._epart is None or self._epart.shape[0] < nprog:  # reused by every call (stream order)
            self._epart = _new((nprog, D), torch.float32, dev, self._poison)
        epart = self._epart[:nprog]
        K, KM = D // H, D // HM
        t = self._tables
        args = (self.row0, self.rows, P * D, dout, out, self._dout_buf, P * D,
                self._w_flat, self._d_flat, self._s_flat, self._u, t[0], t[1], t[2], t[3], dx, epart,
                call, self._bwd_top + 1, rec.n, rec.woff, self._soff[call], rec.j0, rec.j1, P, rec.eps)
        flags = dict(BLOCK_P=block_p, ROUND_KEY=_flags(rec.dtype, rec.g.dtype)[0], HAS_GATHER=nj > 0,
                     GATHER0=nj > 0 and rec.j0 == 0)
        split, split_m = head_split(K), head_split(KM)
        if split is not None and split_m is not None:  # head widths like 160: two exact tiles
            STACK_BWD_SPLIT(nprog, args, dict(
                D=D, H=H, K=K, K1=split[0], K2=split[1], BLOCK_K2=split[2], HM=HM, KM=KM,
                KM1=split_m[0], KM2=split_m[1], BLOCK_KM2=split_m[2], **flags), num_warps, maxnreg)
        else:
            STACK_BWD(nprog, args, dict(D=D, H=H, K=K, BLOCK_K=next_pow2(K), HM=HM, KM=KM,
                                        BLOCK_KM=next_pow2(KM), **flags), num_warps, maxnreg)
        dq = _new(rec.q.shape, rec.q.dtype, dev, self._poison)
        dg = _new(rec.g.shape, rec.g.dtype, dev, self._poison)
        launch_dqdg(epart, rec.q, rec.g, dq, dg)
        return dq, dg, dx

    def _backward_call_collect(self, call: int, rec: _Call, dout: Tensor, out: Tensor, dx: Tensor) -> None:
        """The kernels of `_backward_call` in the 4-bytes/pair design (bwd_collect.py): the
        call's own part is O(1) rows (dout, shift, S'), then the gather into `dx`; the query
        gradients of all calls are formed by the first call's node (`_param_grads`). The
        fold-block backward (bwd_fold.py) gathers from the readers below the fold frontier
        plus the sources' accumulators, then folds a full block of calls."""
        P, D = self.row0.shape
        dev = out.device
        nj = rec.j1 - rec.j0
        res = rec.res
        fold = self._fold
        folded = fold > 0 and self._frontier <= self._bwd_top  # a fold has filled the accumulators
        config = self.launch_tables.gather_config(D, rec.H, self._hmax, self._dout_buf.element_size())
        key = (D, rec.H, self._hmax, P, res is not None, nj > 0, nj > 0 and rec.j0 == 0,
               config, self._same_h, self._row_bytes(), fold > 0, folded and nj > 0)
        plan = _GATHER_PLANS.get(key)
        if plan is None:
            plan = _GATHER_PLANS[key] = _gather_plan(*key)
        nprog, consts, num_warps, maxnreg = plan
        t = self._tables
        top1 = self._frontier if fold else self._bwd_top + 1
        dstride, dbase = self._dout_slots()
        args = (self.row0, self.rows, P * D, dout, out, out if res is None else res, self._dout_buf,
                dstride, self._w_flat, self._d_flat, self._sh_flat, self._s_flat, self._u, self._rall,
                t[0], t[1], t[2], t[3], dx, call, top1, self._soff[call], rec.j0,
                rec.j1, P, rec.eps, self._acc if folded else self._dout_buf, dbase)
        STACK_GATHER(nprog, args, consts, num_warps, maxnreg)
        if fold_due(call, self._frontier, fold, rec.j0):
            self._fold_block(call, rec, self.launch_tables.fold_config(D, rec.H, self._hmax,
                                                                       self._dout_buf.element_size()))
        self._dq_all = self._dg_all = None
        if call == 0 and self._want_params:  # every source is gathered: E of every pair, then dq, dg
            top1 = self._bwd_top + 1
            n0, nitems = self._items_n
            items = self._items
            launch_pair_e(self.row0, items[:n0], n0, self._rall, self._d_flat, t, self._e_pairs,
                          top1, P, self._e_plan)
            if self.buffer is not None:
                launch_pair_e(self.buffer, items[n0:], nitems - n0, self._rall, self._d_flat, t,
                              self._e_pairs, top1, P, self._e_plan_rows)
            ncalls = len(self._calls)
            self._dq_all = _new((ncalls, D), torch.float32, dev, self._poison)
            self._dg_all = _new((ncalls, D), torch.float32, dev, self._poison)
            launch_collect_dqdg(self._e_pairs, self._qg, t, self._dq_all, self._dg_all, top1, D)
            if top1 < ncalls:  # calls after the one backward started from: no gradient
                self._dq_all[top1:].zero_()
                self._dg_all[top1:].zero_()


    def _dout_slots(self) -> tuple[int, int]:
        """(stride, base) in elements of the stored douts: call c's at base + c * stride. The gather
        backward: slot c of one per call. The fold-block backward: slot F - 1 - c of fold_calls,
        F the fold frontier (the unfolded calls [c, F) are at most fold_calls): still linear in c,
        so the kernels index it as the gather backward's, with a negative stride."""
        P, D = self.row0.shape
        if not self._fold:
            return P * D, 0
        return -P * D, (self._frontier - 1) * P * D

    def _fold_block(self, call: int, rec: _Call, config: tuple) -> None:
        """Fold the readers [call, frontier) into the accumulators of the sources [0, j0) not yet
        gathered (`stack_fold_kernel`, or `stack_fold_held_kernel` where the row's `sources` is 0
        and the fold is one it serves); the first fold allocates them ([j0, P, d] fp32) and writes
        without reading. Launch config: the fold's row (`LaunchTables.fold_config`; the gather's
        row where the table has none)."""
        P, D = self.row0.shape
        first = self._frontier == self._bwd_top + 1
        if first:
            self._acc = _new((rec.j0, P, D), torch.float32, self.row0.device, self._poison)
        block_p, num_warps, prefetch, maxnreg, loads_first, sources = config
        readers = self._frontier - call
        held = sources == 0
        if held:  # the held kernel's own rows: one position a program, a block of 2^k readers
            block_p = 1
        # DENSE: no masks in the fold's loop (every reader reads every folded source, and two or
        # more of them; whole position blocks). The model's stacks always are.
        dense = P % block_p == 0 and all(self._calls[c].n >= max(rec.j0, 2) for c in range(call, self._frontier))
        KM = D // self._hmax
        ka, block_ka, kb, block_kb = tile_split(KM)
        t = self._tables
        dstride, dbase = self._dout_slots()
        if held and dense and self._same_h and readers & (readers - 1) == 0:
            STACK_FOLD_HELD(P, (
                self.row0, self.rows, P * D, self._dout_buf, dstride, dbase, self._w_flat, self._d_flat,
                self._sh_flat, self._s_flat, self._u, t[2], t[3], self._acc, call, rec.j0, int(first), P,
                rec.eps, self._rnorm), dict(D=D, HM=self._hmax, KM=KM, KA=ka, BLOCK_KA=block_ka, KB=kb,
                                            BLOCK_KB=block_kb, CB=readers, PREFETCH=int(prefetch == 1),
                                            R_STORED=int(self._sources_have_r(rec.j0, rec.eps)),
                                            STAGES=3 if prefetch == 2 else 1),
                num_warps, maxnreg)
            self._frontier = call
            return
        sources = max(sources, 1)  # a held row at a fold the held kernel does not serve: the reader loop
        consts = dict(D=D, HM=self._hmax, KM=KM, KA=ka, BLOCK_KA=block_ka, KB=kb, BLOCK_KB=block_kb,
                      BLOCK_P=block_p, PREFETCH=prefetch, SAME_H=self._same_h,
                      VEC_B=narrow_tile_vec(block_p, num_warps, self._hmax, block_ka, block_kb, self._row_bytes()),
                      LOADS_FIRST=loads_first, SOURCES=sources, DENSE=dense)
        STACK_FOLD(cdiv(P, block_p), (
            self.row0, self.rows, P * D, self._dout_buf, dstride, dbase, self._w_flat, self._d_flat,
            self._sh_flat, self._s_flat, self._u, t[0], t[1], t[2], t[3], self._acc, call,
            self._frontier, rec.j0, int(first), P, rec.eps), consts, num_warps, maxnreg)
        self._frontier = call


_GATHER_PLANS: dict[tuple, tuple] = {}  # launch plans of stack_gather_kernel (host time per call)


def _uniform_heads(calls: Sequence[_Call]) -> bool:
    """Whether every call has the same head count (the model's case except mhar_hw, whose
    attention sites read with H = 1 beside H = KV at the others): the gather's constant-H path."""
    return all(r.H == calls[0].H for r in calls)


def _gather_plan(D: int, H: int, HM: int, P: int, has_res: bool, has_gather: bool, gather0: bool,
                 config: tuple[int, int, bool, int | None, bool], same_h: bool, row_bytes: int,
                 fold: bool = False, has_acc: bool = False) -> tuple[int, dict, int, int | None]:
    """(programs, constexprs, num_warps, maxnreg) of one stack_gather_kernel launch, built once
    per key; the key holds everything it is built from (the launch config included, so sweeps
    get their own plans). `row_bytes`: the narrowest element of the rows the gather loads
    (`narrow_tile_vec`). fold: the fold-block backward's gather (douts in slots below the fold
    frontier, readers up to
    the fold frontier); has_acc: it adds the gathered sources' accumulators."""
    block_p, num_warps, prefetch, maxnreg, loads_first = config
    KM = D // HM
    ka, block_ka, kb, block_kb = tile_split(KM)
    vec_b = narrow_tile_vec(block_p, num_warps, HM, block_ka, block_kb, row_bytes)
    consts = dict(D=D, H=H, HM=HM, KM=KM, KA=ka, BLOCK_KA=block_ka, KB=kb, BLOCK_KB=block_kb,
                  BLOCK_P=block_p, HAS_RES=has_res, HAS_GATHER=has_gather, GATHER0=gather0,
                  PREFETCH=prefetch, SAME_H=same_h, VEC_B=vec_b, LOADS_FIRST=loads_first, FOLD=fold,
                  HAS_ACC=has_acc)
    return cdiv(P, block_p), consts, num_warps, maxnreg


class TritonSourceStack:
    """Shared source buffer [capacity, B*T, d] for one forward pass (see module docstring).

    This object holds the token that chains the calls' autograd nodes and the sources not yet
    handed to a call; the buffers live in its `_StackState`, which the nodes keep. `config`: the
    kernels it runs (forward and backward)."""

    def __init__(self, capacity: int, params: Sequence[tuple[Tensor, Tensor]] | None = None,
                 config: KernelConfig = DEFAULT) -> None:
        self._state = _StackState(capacity, params, config)
        self._pending: list[tuple[int, Tensor]] = []  # sources appended since the last call
        self._token: Tensor | None = None

    def __getattr__(self, name: str):  # buffer, shape, capacity, _calls, _w_flat, ... (read)
        return getattr(self.__dict__["_state"], name)

    def __len__(self) -> int:
        return self._state._len

    def append(self, x: Tensor) -> None:  # x: [B, T, d]
        st = self._state
        st.append(x)
        if x.requires_grad and torch.is_grad_enabled():
            self._pending.append((st._len - 1, x))

    def stacked(self, n: int | None = None) -> Tensor:
        return self._state.stacked(n)

    def route(self, query: Tensor, norm_weight: Tensor, num_heads: int, eps: float,
              n: int | None = None) -> tuple[Tensor, Tensor]:
        """(out [B, T, d], weights [n, B, T, H])."""
        _refuse_recompute()
        st = self._state
        n = st._len if n is None else n
        if not 1 <= n <= st._len:
            raise ValueError(f"cannot route over {n} sources: the stack holds {st._len}")
        B, T, D = st.shape
        check_heads(D, num_heads)
        P = B * T
        if not query.is_contiguous():  # (parameters are: no dispatch for them)
            query = query.contiguous()
        if not norm_weight.is_contiguous():
            norm_weight = norm_weight.contiguous()
        if not torch.is_grad_enabled():  # inference: nothing is saved
            dev = st.row0.device
            out = _new((P, D), st._dtype_of(n), dev, st._poison)
            W = _new((n, P, num_heads), torch.float32, dev, st._poison)
            append = st._take_unstored(n)
            rn, store_r0 = st._stored_r(n, append, eps)
            launch_route_fwd(st.rows, n, P, query, norm_weight, num_heads, eps, out, W, v0=st.row0,
                             append=append, tables=st.launch_tables, rn=rn, store_r0=store_r0)
            return out.view(B, T, D), W.view(n, B, T, num_heads)
        if st._bwd_next is not None:
            raise RuntimeError("routing backend 'triton': this source stack has started its "
                               "backward; build a new stack for a new forward pass")
        call = len(st._calls)
        if st.collect:  # before anything is recorded: a refused call leaves the stack as it was
            st._check_params(call, query, norm_weight)
        st._calls.append(st._reserve_call(call, n, num_heads, eps))
        st._last_len = st._len
        rows = [j for j, _ in self._pending]
        xs = [x for _, x in self._pending]
        self._pending = []
        token_prev = self._token if self._token is not None else \
            torch.empty(0, device=st.row0.device, requires_grad=True)
        if st.collect and call == 0:  # the node that runs last returns every site's gradients
            xs += [t for pair in st._sites for t in pair]
        out, self._token = _stack_route_apply(st, call, rows, query, norm_weight, token_prev, *xs)
        return out, st._calls[call].w.view(n, B, T, num_heads)
