"""The kernels' configuration: one frozen object, passed explicitly, no global and no environment
switches.

    from mhar_probe.kernels import KernelConfig
    cfg = KernelConfig(routing_douts="storage")
    set_routing_backend(model, "triton", kernels=cfg)     # the model's stacks and routes use it
    TritonSourceStack(capacity, params, config=cfg)       # or a stack / per-call route directly
    route_triton(sources, q, g, H, config=cfg)

The defaults are the measured-best kernels (mhar_probe/kernels/README.md). What a routing call
runs is otherwise chosen from the shapes and dtypes alone (two-tile heads, the constant-head
gather, the forward's fold of q*g, the 4-bytes/pair backward where the stack knows its sites).

A source stack keeps the configuration it was built with, a per-call route the one it was
called with; backward uses the same one. Nothing in this package reads a process-wide setting:
two models (or two stacks) with different configurations run side by side in one process.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Literal

#: the dout policy (`--routing-douts`, `KernelConfig.routing_douts`): the one tuple of its choices
ROUTING_DOUTS = ("promoted", "storage")
STACK_BACKWARDS = ("fold", "gather")
FORWARDS = ("plain", "lookahead")
#: the fields that take one of a set of choices, and their choices
CHOICES = dict(routing_douts=ROUTING_DOUTS, stack_backward=STACK_BACKWARDS, forward=FORWARDS)


@dataclass(frozen=True)
class KernelConfig:
    """routing_douts (the dout policy; `mhar train --routing-douts`): dtype of the upstream
    gradients the shared stack's backward stores and its gather reads. "promoted" (default): each call's output dtype, the promoted dtype of its
    sources (fp32 under bf16 autocast), so the gradients are the reference's up to fp32
    rounding. "storage": the source buffer's dtype (bf16 under autocast): 2 bytes less per
    pair-element in the gather, with the value path of every source gradient rounded through
    bf16 douts (an approximation, opt-in).
    poison: every kernel output is filled with NaN before the kernel writes it (a test aid:
    an element a kernel fails to write then fails any comparison).
    launch_table: a JSON file of tuned launch configs (`mhar bench routing --sweep` writes one;
    format: launch_tables.py); its entries override the built-in table's, key by key.
    stack_backward: the backward of a stack built with its sites' parameters (the model's).
    "fold" (default): the fold-block backward (route/bwd_fold.py), each block of `fold_calls`
    calls' douts folded into per-source fp32 accumulators, so a dout is read about once per
    block instead of once per (call, source) pair. "gather": every source's gather reads the
    douts of all its readers (route/bwd_collect.py alone), kept to time against.
    fold_calls: the block size Cb of the fold-block backward (calls per fold, >= 1).
    forward: the forward of a stack built with its sites' parameters. "lookahead" (default):
    queries are parameters, so a call also folds the rows it reads into the next call's online
    softmax (state: an fp32 [P, d] row and two per head), and the next call reads only the rows
    appended since: in pairs of calls, the second reads one row instead of all (route/fwd.py,
    NEXT and RESUME). The same terms, in another order. "plain": each call reads all its rows,
    kept to time against."""

    routing_douts: Literal["promoted", "storage"] = "promoted"
    poison: bool = False
    launch_table: str | None = None
    stack_backward: Literal["fold", "gather"] = "fold"
    fold_calls: int = 8
    forward: Literal["plain", "lookahead"] = "lookahead"

    def __post_init__(self) -> None:
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"KernelConfig.{name}={getattr(self, name)!r}: choose from {', '.join(choices)}")
        if isinstance(self.fold_calls, bool) or not isinstance(self.fold_calls, int) or self.fold_calls < 1:
            raise ValueError(f"KernelConfig.fold_calls={self.fold_calls!r}: a whole number of calls >= 1")
        if self.launch_table is not None and not isinstance(self.launch_table, str):
            object.__setattr__(self, "launch_table", str(self.launch_table))  # a Path is fine too

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


DEFAULT = KernelConfig()
#: old spellings of a field, as saved run records (summary.json's `routing_kernels`) may hold them
LEGACY_FIELDS = {"dout_dtype": "routing_douts"}
#: fields of deleted variants that saved run records may still hold: ignored on load, as any key
#: that is not a field is (issue 55's levers, deleted 2026-12-06 after losing their timing in the
#: training step; the code lives at commit 56b6ecf, mhar_probe/kernels/README.md)
REMOVED_FIELDS = ("stack_douts", "stack_weights", "stack_append")


def kernel_config_from_dict(fields: dict[str, object]) -> KernelConfig:
    """A KernelConfig from its saved fields (`KernelConfig.as_dict`, or a run's `routing_kernels`:
    the keys that are not fields, such as `triton` or a deleted variant's (`REMOVED_FIELDS`), are
    left out); old spellings are mapped (`LEGACY_FIELDS`)."""
    names = {f.name for f in dataclasses.fields(KernelConfig)}
    mapped = {LEGACY_FIELDS.get(k, k): v for k, v in fields.items()}
    return KernelConfig(**{k: v for k, v in mapped.items() if k in names})
