"""Autograd glue: the per-call routing function and the shared-buffer source stack.

* `route_triton(sources, query, g, H, eps, partial=None, gate=None)` -- self-contained call
  (delta form, or any stacked [N, B, T, d] tensor). Saves the sources and W; composes with
  activation checkpointing and FSDP because it is a pure function of its inputs.
* `TritonSourceStack` -- one [capacity, B*T, d] buffer per forward pass; every source is
  copied in once by `append`, every routing call reads rows [0, n) of it. In backward each
  call stores its dout and shifted logit gradients (O(1) rows), and a source's gradient is
  gathered once, by the node of the first call made after it was appended.

Ordering: a zero-size token chains the calls so that autograd runs their backwards in strict
reverse order (this also holds for the G sibling calls of an `mhar_hw` site); the order is
still checked at runtime and a violation raises. Double backward is refused
(`once_differentiable`). Recomputation inside backward (activation checkpointing of a region
that touches the shared stack) is refused with a message; the delta path is not affected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
from torch import Tensor
from torch.autograd.function import once_differentiable

from mhar_probe.kernels.route_bwd import (
    gather_config, route_bwd_local_kernel, stack_call_bwd_kernel, stack_gather_kernel,
)
from mhar_probe.kernels.route_fwd import launch_route_fwd, rounding_flags, tile_config

# Tests set this to fill every kernel output with NaN before the kernel writes it.
POISON = os.environ.get("MHAR_KERNELS_POISON", "") == "1"


def _new(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    if POISON:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _check_device(t: Tensor) -> None:
    if not t.is_cuda and os.environ.get("TRITON_INTERPRET", "") != "1":
        raise RuntimeError(
            "routing backend 'triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before "
            "triton is imported, for the CPU interpreter); use routing_backend='eager' on CPU")


def _check_heads(d: int, num_heads: int) -> None:
    if num_heads < 1 or d % num_heads:
        raise ValueError(f"hidden size d={d} is not divisible by routing heads H={num_heads}")
    if num_heads & (num_heads - 1):
        raise ValueError(f"routing backend 'triton' needs a power-of-two head count, got H={num_heads}")


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
                gate: Tensor | None, num_heads: int, eps: float):  # type: ignore[override]
        out, W = _route_local_fwd(sources, query, norm_weight, num_heads, eps, partial, gate)
        ctx.mark_non_differentiable(W)
        ctx.save_for_backward(sources, query, norm_weight, gate, W)
        ctx.has_partial, ctx.num_heads, ctx.eps = partial is not None, num_heads, eps
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
        block_k, block_p, num_warps = tile_config(D, H)
        grid = triton.cdiv(P, block_p)
        dV = _new((N, B, T, D), sources.dtype, sources.device)
        epart = _new((grid, D), torch.float32, sources.device)
        gpart = _new((grid,), torch.float32, sources.device)
        has_gate = ctx.has_partial and gate is not None
        route_bwd_local_kernel[(grid,)](
            sources, P * D, dout, query, norm_weight, gate if has_gate else query, W, dV,
            epart, gpart, P, N, ctx.eps,
            D=D, H=H, K=D // H, BLOCK_K=block_k, BLOCK_P=block_p, HAS_GATE=has_gate,
            ROUND_KEY=rounding_flags(sources.dtype, norm_weight.dtype)[0], num_warps=num_warps)
        E = epart.sum(0)
        dq = (E * norm_weight.float()).to(query.dtype)
        dg = (E * query.float()).to(norm_weight.dtype)
        dpartial = dout.to(ctx.partial_dtype) if ctx.has_partial else None
        dgate = gpart.sum().reshape(gate.shape).to(gate.dtype) if has_gate else None
        return dV, dq, dg, dpartial, dgate, None, None


def _route_local_fwd(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                     eps: float, partial: Tensor | None, gate: Tensor | None) -> tuple[Tensor, Tensor]:
    N, B, T, D = sources.shape
    P = B * T
    out = _new((B, T, D), sources.dtype, sources.device)
    W = _new((N, B, T, num_heads), torch.float32, sources.device)
    if partial is not None:
        partial = partial.contiguous()
    launch_route_fwd(sources, N, P, query.contiguous(), norm_weight.contiguous(), num_heads, eps,
                     out, W, partial=partial, gate=gate)
    return out, W


def route_triton(sources: Tensor, query: Tensor, norm_weight: Tensor, num_heads: int,
                 eps: float = 1e-6, partial: Tensor | None = None, gate: Tensor | None = None
                 ) -> tuple[Tensor, Tensor]:
    """Fused eq. (mh) on a stacked [N, B, T, d] tensor: (out [B, T, d], weights [N, B, T, H])."""
    _check_device(sources)
    N, B, T, D = sources.shape
    _check_heads(D, num_heads)
    if N < 1:
        raise ValueError("routing needs at least one source")
    sources = sources.contiguous()
    if partial is not None and partial.dtype != sources.dtype:
        partial = partial.to(sources.dtype)
    if gate is not None and partial is None:
        gate = None  # as the reference: the gate only scales the routed term of the delta form
    tensors = [t for t in (sources, query, norm_weight, partial, gate) if t is not None]
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return _route_local_fwd(sources, query, norm_weight, num_heads, eps, partial, gate)
    return _RouteLocal.apply(sources, query, norm_weight, partial, gate, num_heads, eps)


# ------------------------------------------------------------------------ shared-stack path
@dataclass
class _Call:
    n: int  # sources read: rows [0, n)
    H: int
    eps: float
    woff: int  # element offset of this call's W [n, P, H] in the stack's flat weight buffer
    q: Tensor  # [d] the call's query (detached)
    g: Tensor  # [d] the call's key-norm weight (detached)
    q_dtype: torch.dtype
    g_dtype: torch.dtype


class _StackRoute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, stack: "TritonSourceStack", call: int, query: Tensor, norm_weight: Tensor,
                token_prev: Tensor, *new_sources: Tensor):  # type: ignore[override]
        out = stack._forward_call(call)
        ctx.stack, ctx.call = stack, call
        ctx.source_rows = stack._calls_sources[call]
        ctx.save_for_backward(out)
        token = out.new_empty(0)
        return out, token

    @staticmethod
    @once_differentiable
    def backward(ctx, dout: Tensor | None, _dtoken: Tensor | None):  # type: ignore[override]
        stack: TritonSourceStack = ctx.stack
        (out,) = ctx.saved_tensors
        dq, dg = stack._backward_call(ctx.call, dout, out)
        dxs = [stack._gather(j, ctx.call) if ctx.needs_input_grad[5 + i] else None
               for i, j in enumerate(ctx.source_rows)]
        if ctx.call == 0:
            stack._release_backward()
        dtoken = torch.empty(0, device=out.device) if ctx.needs_input_grad[4] else None
        return (None, None, dq if ctx.needs_input_grad[2] else None,
                dg if ctx.needs_input_grad[3] else None, dtoken, *dxs)


class TritonSourceStack:
    """Shared source buffer [capacity, B*T, d] for one forward pass (see module docstring)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffer: Tensor | None = None
        self.shape: tuple[int, int, int] | None = None
        self._len = 0
        self._pending: list[tuple[int, Tensor]] = []  # sources appended since the last call
        self._calls: list[_Call] = []
        self._calls_sources: list[list[int]] = []
        self._call_args: list[tuple[Tensor, Tensor]] = []
        self._token: Tensor | None = None
        self._w_flat: Tensor | None = None
        self._w_used = 0
        self._bwd_next: int | None = None  # next call whose backward may run (None: fresh)
        self._bwd_top = -1

    # -- forward ---------------------------------------------------------------------
    def append(self, x: Tensor) -> None:  # x: [B, T, d]
        _refuse_recompute()
        _check_device(x)
        if self._len >= self.capacity:
            raise RuntimeError(f"source stack is full ({self.capacity} sources)")
        if self.buffer is None:
            B, T, D = x.shape
            self.shape = (B, T, D)
            self.buffer = torch.empty((self.capacity, B * T, D), dtype=x.dtype, device=x.device)
        elif tuple(x.shape) != self.shape or x.dtype != self.buffer.dtype:
            raise ValueError(f"source {self._len} has shape {tuple(x.shape)} / {x.dtype}; the stack "
                             f"holds {self.shape} / {self.buffer.dtype}")
        self.buffer[self._len].copy_(x.detach().reshape(-1, self.shape[2]))
        if torch.is_grad_enabled() and x.requires_grad:
            self._pending.append((self._len, x))
        self._len += 1

    def __len__(self) -> int:
        return self._len

    def stacked(self, n: int | None = None) -> Tensor:  # [n, B, T, d], a view of the buffer
        n = self._len if n is None else n
        assert self.buffer is not None and self.shape is not None
        return self.buffer[:n].view(n, *self.shape)

    def _reserve_w(self, size: int, H: int, device: torch.device) -> int:
        if self._w_flat is None:
            P = self.shape[0] * self.shape[1]
            guess = P * H * self.capacity * (self.capacity + 1) // 2
            self._w_flat = _new((max(size, guess),), torch.float32, device)
        elif self._w_used + size > self._w_flat.numel():
            grown = _new((max(2 * self._w_flat.numel(), self._w_used + size),), torch.float32, device)
            grown[: self._w_used].copy_(self._w_flat[: self._w_used])
            self._w_flat = grown
        off = self._w_used
        self._w_used += size
        return off

    def route(self, query: Tensor, norm_weight: Tensor, num_heads: int, eps: float,
              n: int | None = None) -> tuple[Tensor, Tensor]:
        _refuse_recompute()
        n = self._len if n is None else n
        if not 1 <= n <= self._len:
            raise ValueError(f"cannot route over {n} sources: the stack holds {self._len}")
        assert self.buffer is not None and self.shape is not None
        B, T, D = self.shape
        _check_heads(D, num_heads)
        P = B * T
        query, norm_weight = query.contiguous(), norm_weight.contiguous()
        if not torch.is_grad_enabled():  # inference: nothing is saved
            out = _new((P, D), self.buffer.dtype, self.buffer.device)
            W = _new((n, P, num_heads), torch.float32, self.buffer.device)
            launch_route_fwd(self.buffer, n, P, query, norm_weight, num_heads, eps, out, W)
            return out.view(B, T, D), W.view(n, B, T, num_heads)
        if self._bwd_next is not None:
            raise RuntimeError("routing backend 'triton': this source stack has started its "
                               "backward; build a new stack for a new forward pass")
        woff = self._reserve_w(n * P * num_heads, num_heads, self.buffer.device)
        call = len(self._calls)
        self._calls.append(_Call(n, num_heads, eps, woff, query.detach(), norm_weight.detach(),
                                 query.dtype, norm_weight.dtype))
        self._calls_sources.append([j for j, _ in self._pending])
        self._call_args.append((query, norm_weight))
        xs = [x for _, x in self._pending]
        self._pending = []
        token_prev = self._token if self._token is not None else \
            torch.empty(0, device=self.buffer.device, requires_grad=True)
        out, self._token = _StackRoute.apply(self, call, query, norm_weight, token_prev, *xs)
        W = self._w_flat[woff: woff + n * P * num_heads].view(n, B, T, num_heads)
        return out.view(B, T, D), W

    def _forward_call(self, call: int) -> Tensor:
        rec = self._calls[call]
        query, norm_weight = self._call_args[call]
        self._call_args[call] = None  # type: ignore[call-overload]
        P, D = self.buffer.shape[1], self.buffer.shape[2]
        out = _new((P, D), self.buffer.dtype, self.buffer.device)
        W = self._w_flat[rec.woff: rec.woff + rec.n * P * rec.H].view(rec.n, P, rec.H)
        launch_route_fwd(self.buffer, rec.n, P, query, norm_weight, rec.H, rec.eps, out, W)
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
        dev = self.buffer.device
        P, D = self.buffer.shape[1], self.buffer.shape[2]
        calls = self._calls[: top + 1]
        self._bwd_top = top
        self._dout_buf = _new((top + 1, P, D), self.buffer.dtype, dev)
        self._d_flat = _new((self._w_used,), torch.float32, dev)
        soffs, s = [], 0
        for rec in calls:
            soffs.append(s)
            s += P * rec.H
        self._s_flat = _new((s,), torch.float32, dev)
        self._soff = soffs
        self._q32 = torch.stack([rec.q for rec in calls]).float()  # [calls, d]
        self._g32 = torch.stack([rec.g for rec in calls]).float()
        self._u = self._q32 * self._g32  # key-path direction q * g per call
        self._tables = torch.tensor(  # + a sentinel call reading nothing (n = 0)
            [[r.n for r in calls] + [0], [r.H for r in calls] + [1], [r.woff for r in calls] + [0],
             soffs + [0]], dtype=torch.int64).to(dev)

    def _release_backward(self) -> None:
        for name in ("_dout_buf", "_d_flat", "_s_flat", "_u", "_q32", "_g32", "_tables"):
            setattr(self, name, None)

    def _backward_call(self, call: int, dout: Tensor | None, out: Tensor) -> tuple[Tensor, Tensor]:
        self._enter_backward(call)
        rec = self._calls[call]
        P, D = self.buffer.shape[1], self.buffer.shape[2]
        dout = torch.zeros_like(out) if dout is None else dout.reshape(P, D).contiguous()
        block_k, block_p, num_warps = tile_config(D, rec.H)
        grid = triton.cdiv(P, block_p)
        epart = _new((grid, D), torch.float32, out.device)
        size = rec.n * P * rec.H
        stack_call_bwd_kernel[(grid,)](
            self.buffer, P * D, dout, out, self._dout_buf[call],
            self._w_flat[rec.woff: rec.woff + size], self._d_flat[rec.woff: rec.woff + size],
            self._s_flat[self._soff[call]: self._soff[call] + P * rec.H], epart,
            P, rec.n, rec.eps,
            D=D, H=rec.H, K=D // rec.H, BLOCK_K=block_k, BLOCK_P=block_p,
            ROUND_KEY=rounding_flags(self.buffer.dtype, rec.g_dtype)[0], num_warps=num_warps)
        E = epart.sum(0)
        return (E * self._g32[call]).to(rec.q_dtype), (E * self._q32[call]).to(rec.g_dtype)

    def _gather(self, j: int, call: int) -> Tensor:
        """Gradient of source j: every call c' in [call, top] that read it (n_c' > j)."""
        P, D = self.buffer.shape[1], self.buffer.shape[2]
        eps = self._calls[call].eps
        block_d, block_p, num_warps = gather_config(D)
        dx = _new((P, D), self.buffer.dtype, self.buffer.device)
        t = self._tables
        stack_gather_kernel[(triton.cdiv(P, block_p),)](
            self.buffer, P * D, j, dx, self._dout_buf, P * D, self._u,
            self._w_flat, self._d_flat, self._s_flat, t[0], t[1], t[2], t[3],
            call, self._bwd_top + 1, P, eps,
            D=D, BLOCK_D=block_d, BLOCK_P=block_p, num_warps=num_warps)
        return dx.view(self.shape)
