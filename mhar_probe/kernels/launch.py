"""Kernel launches with less host time: the compiled kernel is cached under our own key.

Triton's `kernel[grid](*args, **constexprs)` binds every argument, specialises it, builds a
cache key from the specialisation and the options, looks the compiled kernel up and only then
launches. A routing call launches two or three kernels, and on the GPU machine's host that
path is a large share of the routing's host time (benchmarks/kernels/host_overhead.py).
`Launcher` goes through Triton's path once per specialisation and afterwards calls the
compiled kernel's launcher directly with the same arguments, the way Triton itself does
(`CompiledKernel.run(grid, stream, function, packed_metadata, metadata, hooks, *all_args)`).

The key holds everything Triton specialises a non-constexpr argument on: a tensor's dtype
and whether its address is 16-byte aligned; an integer's width (32 or 64 bit), whether it is
1 and whether it is divisible by 16; floats are not specialised. With the constexprs and
`num_warps` this picks exactly the kernel Triton's own lookup would pick.

Triton's slow path is kept: under the interpreter (`TRITON_INTERPRET=1`), when a launch hook
is installed (Triton's profiler), when `MHAR_FAST_LAUNCH=0`, and for good if the compiled
kernel's launcher refuses the direct call (a Triton whose launcher takes other arguments).
"""

from __future__ import annotations

import os

import torch
import triton

DEFAULT_FAST = os.environ.get("MHAR_FAST_LAUNCH", "1") != "0" and \
    os.environ.get("TRITON_INTERPRET", "") != "1"
FAST = DEFAULT_FAST  # module switch (benchmarks compare both in one process)

try:  # Triton >= 3.4 keeps its launch hooks in knobs
    from triton import knobs as _knobs

    def _hooks_installed() -> bool:
        rt = _knobs.runtime
        return rt.launch_enter_hook is not None or rt.launch_exit_hook is not None
except ImportError:  # pragma: no cover - older Triton: always take the slow path
    def _hooks_installed() -> bool:
        return True


def _spec(a) -> object:
    """What Triton's binder specialises a non-constexpr argument on."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() & 15 == 0
    if isinstance(a, bool):
        return "b", a
    if isinstance(a, int):
        return a == 1, a & 15 == 0, not -0x80000000 <= a <= 0x7FFFFFFF
    return type(a)


class Launcher:
    """Launches one `@triton.jit` kernel on a 1-D grid: `Launcher(fn)(grid, args, consts, warps)`.

    `args` are the kernel's non-constexpr arguments in order, `consts` its constexprs by name
    (every constexpr parameter, in any order)."""

    def __init__(self, fn: triton.JITFunction) -> None:
        self.fn = fn
        params = getattr(fn, "params", None)  # None under the interpreter: Triton's path only
        self._broken = params is None
        self.const_names = [p.name for p in params or () if p.is_constexpr]
        flags = [p.is_constexpr for p in params or ()]
        if flags != sorted(flags):  # the direct call passes constexprs after the other arguments
            raise TypeError(f"{fn.__name__}: constexpr parameters must come last")
        self._cache: dict[tuple, object] = {}
        self.broken_reason = "" if params is not None else "no JITFunction (interpreter)"

    def __call__(self, grid: int, args: tuple, consts: dict, num_warps: int) -> None:
        if not FAST or self._broken or _hooks_installed():
            self.fn[(grid,)](*args, **consts, num_warps=num_warps)
            return
        cvals = tuple(consts[n] for n in self.const_names)
        key = (num_warps, cvals, tuple(map(_spec, args)))
        kernel = self._cache.get(key)
        if kernel is None:  # Triton's own path: compiles if needed, launches, returns the kernel
            self._cache[key] = self.fn[(grid,)](*args, **consts, num_warps=num_warps)
            return
        stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
        try:
            kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
                       *args, *cvals)
        except TypeError as exc:  # this Triton's launcher takes other arguments: its own path
            self._broken = True
            self.broken_reason = f"{type(exc).__name__}: {exc}"
            self.fn[(grid,)](*args, **consts, num_warps=num_warps)
