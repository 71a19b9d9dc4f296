"""The kernels' configuration: one frozen object, set explicitly, no environment switches.

    from mhar_probe.kernels import KernelConfig, use_kernel_config
    with use_kernel_config(KernelConfig(dout_dtype="storage")):
        ...  # stacks built and per-call routes run in here use it

The defaults are the measured-best kernels (mhar_probe/kernels/README.md). What a routing call
runs is otherwise chosen from the shapes and dtypes alone (two-tile heads, the constant-head
gather, the forward's fold of q*g, the 4-bytes/pair backward where the stack knows its sites).

A source stack takes the configuration current when it is built, a per-call route the one
current at its forward; backward uses the same one (it may run on autograd's device thread,
where the caller's context is not visible).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Literal

DOUT_DTYPES = ("promoted", "storage")
STACK_BACKWARDS = ("fold", "gather")


@dataclass(frozen=True)
class KernelConfig:
    """dout_dtype: dtype of the upstream gradients the shared stack's backward stores and its
    gather reads. "promoted" (default): each call's output dtype, the promoted dtype of its
    sources (fp32 under bf16 autocast), so the gradients are the reference's up to fp32
    rounding. "storage": the source buffer's dtype (bf16 under autocast): 2 bytes less per
    pair-element in the gather, with the value path of every source gradient rounded through
    bf16 douts (an approximation, opt-in).
    poison: every kernel output is filled with NaN before the kernel writes it (a test aid:
    an element a kernel fails to write then fails any comparison).
    launch_table: a JSON file of tuned launch configs (`mhar bench routing --sweep` writes one;
    format: launch_tables.py); its entries override the built-in table's, key by key.
    stack_backward: the backward of a stack built with its sites' parameters (the model's).
    "fold" (default): the fold-block backward (route_bwd_fold.py), each block of `fold_calls`
    calls' douts folded into per-source fp32 accumulators, so a dout is read about once per
    block instead of once per (call, source) pair. "gather": every source's gather reads the
    douts of all its readers (route_bwd_collect.py alone), kept to time against.
    fold_calls: the block size Cb of the fold-block backward (calls per fold, >= 1)."""

    dout_dtype: Literal["promoted", "storage"] = "promoted"
    poison: bool = False
    launch_table: str | None = None
    stack_backward: Literal["fold", "gather"] = "fold"
    fold_calls: int = 8

    def __post_init__(self) -> None:
        if self.dout_dtype not in DOUT_DTYPES:
            raise ValueError(f"KernelConfig.dout_dtype={self.dout_dtype!r}: choose from {', '.join(DOUT_DTYPES)}")
        if self.stack_backward not in STACK_BACKWARDS:
            raise ValueError(f"KernelConfig.stack_backward={self.stack_backward!r}: choose from "
                             f"{', '.join(STACK_BACKWARDS)}")
        if isinstance(self.fold_calls, bool) or not isinstance(self.fold_calls, int) or self.fold_calls < 1:
            raise ValueError(f"KernelConfig.fold_calls={self.fold_calls!r}: a whole number of calls >= 1")
        if self.launch_table is not None and not isinstance(self.launch_table, str):
            object.__setattr__(self, "launch_table", str(self.launch_table))  # a Path is fine too

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


DEFAULT = KernelConfig()
_current: KernelConfig = DEFAULT


def current_kernel_config() -> KernelConfig:
    """The configuration new stacks and per-call routes take."""
    return _current


def set_kernel_config(config: KernelConfig) -> KernelConfig:
    """Make `config` current (process-wide); returns the one it replaces."""
    global _current
    if not isinstance(config, KernelConfig):
        raise TypeError(f"expected a KernelConfig, got {type(config).__name__}")
    previous, _current = _current, config
    return previous


@contextlib.contextmanager
def use_kernel_config(config: KernelConfig | None = None, **changes: object) -> Iterator[KernelConfig]:
    """`config` (default: the current one) with `changes` applied, current inside the block."""
    import dataclasses

    cfg = dataclasses.replace(config or _current, **changes) if changes else (config or _current)
    previous = set_kernel_config(cfg)
    try:
        yield cfg
    finally:
        set_kernel_config(previous)
