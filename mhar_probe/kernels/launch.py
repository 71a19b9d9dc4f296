"""Direct launches of compiled Triton kernels: the same kernel Triton would pick, less host time.

`kernel[grid](*args, **constexprs)` binds every argument, specialises each one, builds a cache
key from the specialisation and a string of the options, looks the compiled kernel up, checks
the kernel's globals, builds the launch metadata and only then launches. A routing call makes
two or three launches, and on the GPU machine's host that path costs 30-55 us per launch
(`benchmarks/kernels/host_overhead.py`), a large share of a routing call's host time.

`Launcher` goes through Triton's own path the first time it sees a specialisation, keeps the
compiled kernel Triton returns under its own key, and afterwards launches it the way Triton's
`run` does after its lookup:

    kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata,
               kernel.launch_metadata(grid, stream, *args), enter_hook, exit_hook, *args)

so installed launch hooks (profilers) still see every launch. The key holds everything Triton
specialises a non-constexpr argument on -- a tensor's dtype and whether its address is
16-byte aligned; an integer's width and whether it is 1 or divisible by 16; a bool's value;
floats are not specialised -- plus the constexpr values, `num_warps` and `maxnreg`, so it picks exactly
the kernel Triton's lookup would pick (it may keep more entries, never fewer).

Triton's path is always taken for a kernel Triton interprets (`TRITON_INTERPRET=1` when the
kernel was defined: nothing is compiled). The launch hooks and the compiled kernel are Triton's
own, so both paths run the same code (bitwise equal: GPU test).
"""

from __future__ import annotations

from typing import Any

import torch

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - older Triton
    InterpretedFunction = ()

try:  # Triton >= 3.4 keeps its launch hooks in `knobs`
    from triton import knobs as _knobs

    def _hooks() -> tuple[Any, Any]:
        rt = _knobs.runtime
        return rt.launch_enter_hook, rt.launch_exit_hook
except ImportError:  # pragma: no cover - older Triton
    _knobs = None

    def _hooks() -> tuple[Any, Any]:
        return None, None


def is_interpreted(fn: Any) -> bool:
    """Whether Triton runs `fn` in its CPU interpreter (decided when the kernel was defined)."""
    return isinstance(fn, InterpretedFunction)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host code (`triton.cdiv` is a constexpr function: ~5 us per host call)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1), for host code, as `triton.next_power_of_2`."""
    return 1 << (n - 1).bit_length()


_TENSOR = torch.Tensor


def spec_key(args: tuple) -> tuple:
    """What Triton's binder specialises the non-constexpr arguments on, flattened into one tuple:
    a tensor adds (dtype, 16-byte aligned); an int (== 1, divisible by 16, width: 0 for i32, 1 for
    i64, 2 for u64); a bool ("b", value); anything else its class (floats are not specialised).
    Every entry starts with a marker of its kind (a dtype, a bool, "b" or a class), so the flat
    tuple still separates what per-argument tuples would. One pass with no call per argument:
    this runs before every direct launch (measured on this CPU: 7 us for 27 arguments against 15 us
    with a function call and a tuple per argument)."""
    key: list = []
    add = key.append
    for a in args:
        if isinstance(a, _TENSOR):
            add(a.dtype)
            add(not a.data_ptr() & 15)
        elif a.__class__ is int:
            add(a == 1)
            add(not a & 15)
            add(0 if -0x80000000 <= a <= 0x7FFFFFFF else 2 if a >= 1 << 63 else 1)
        elif a.__class__ is bool:
            add("b")
            add(a)
        else:
            add(a.__class__)
    return tuple(key)


def _annotated_constexprs(fn: Any) -> list[str]:
    """The parameters of a plain Python kernel function annotated `tl.constexpr` (as an object or,
    under postponed annotations, as text), in order; [] for anything else."""
    import inspect

    if fn is None:
        return []
    return [n for n, p in inspect.signature(fn).parameters.items()
            if p.annotation is not inspect.Parameter.empty and "constexpr" in str(p.annotation)]


class Launcher:
    """Launches one `@triton.jit` kernel: `Launcher(fn)(grid, args, consts, num_warps[, maxnreg])`,
    `grid` an int (1-D) or a tuple of up to three ints.

    `args` are the kernel's non-constexpr arguments in order, `consts` its constexprs by name
    (every constexpr parameter); the kernel must declare its constexprs after the others."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        params = getattr(fn, "params", None)
        # tests set this False to compare the direct launch with Triton's own path
        self._direct_ok = params is not None and not is_interpreted(fn) and _knobs is not None
        self.const_names = [p.name for p in params or () if p.is_constexpr] if params is not None \
            else _annotated_constexprs(getattr(fn, "fn", None))  # the interpreter's function has no params
        flags = [p.is_constexpr for p in params or ()]
        if flags != sorted(flags):  # the direct call passes constexprs after the other arguments
            raise TypeError(f"{fn.__name__}: constexpr parameters must come last")
        self._cache: dict[tuple, Any] = {}
        self.direct_launches = 0  # counted so tests can check the path is taken

    @staticmethod
    def _options(num_warps: int, maxnreg: int | None) -> dict[str, int]:
        return {"num_warps": num_warps} if maxnreg is None else {"num_warps": num_warps, "maxnreg": maxnreg}

    def __call__(self, grid: int | tuple[int, ...], args: tuple, consts: dict[str, Any],
                 num_warps: int, maxnreg: int | None = None) -> None:
        """`maxnreg` caps the registers per thread (PTX .maxnreg; None: the compiler's choice)."""
        grid3 = (grid, 1, 1) if grid.__class__ is int else (*grid, 1, 1, 1)[:3]
        if not self._direct_ok:
            # the direct path takes every constexpr from `consts`, defaults included: hold this path
            # (the interpreter's) to the same, so a constexpr left to its default fails here too
            missing = [n for n in self.const_names if n not in consts]
            if missing:
                raise KeyError(f"{self.fn.__name__}: constexpr(s) not given: {', '.join(missing)}")
            self.fn[grid3](*args, **consts, **self._options(num_warps, maxnreg))
            return
        cvals = tuple([consts[n] for n in self.const_names])
        key = (num_warps, maxnreg, cvals, spec_key(args))
        kernel = self._cache.get(key)
        if kernel is None:  # Triton's path: compiles if needed, launches, returns the kernel
            kernel = self.fn[grid3](*args, **consts, **self._options(num_warps, maxnreg))
            if kernel is not None and hasattr(kernel, "launch_metadata"):
                self._cache[key] = kernel
            return
        stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
        enter, exit_ = _hooks()
        full = (*args, *cvals)
        meta = kernel.launch_metadata(grid3, stream, *full)
        kernel.run(*grid3, stream, kernel.function, kernel.packed_metadata, meta, enter, exit_, *full)
        self.direct_launches += 1
