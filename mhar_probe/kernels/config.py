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
#: where the stack backward reads each call's upstream gradient (`KernelConfig.stack_douts`)
STACK_DOUTS = ("slots", "in_place")
#: what the stack forward keeps of its routing weights for the backward (`KernelConfig.stack_weights`)
STACK_WEIGHTS = ("stored", "logits")
#: how a source appended to the stack reaches its buffer row (`KernelConfig.stack_append`)
STACK_APPEND = ("stored", "into_buffer")
#: the fields that take one of a set of choices, and their choices
CHOICES = dict(routing_douts=ROUTING_DOUTS, stack_backward=STACK_BACKWARDS, stack_douts=STACK_DOUTS,
               stack_weights=STACK_WEIGHTS, stack_append=STACK_APPEND)


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
    stack_douts: where the backward of a stack built with its sites' parameters (either
    stack_backward) reads each call's upstream gradient. "slots" (default): each call's gather
    copies its dout into a slot of the stack's dout buffer and every reader reads the slot.
    "in_place": no copy; the kernels read each dout where autograd left it, through a table of
    its offsets (route/bwd_collect.py `_dout_at`), held until folded: 2 x d x 4 bytes a call less
    under autocast (the slot written and re-read), bitwise the same gradients. Needs the
    promoted douts (routing_douts "promoted": a "storage" slot rounds the dout, which in place
    cannot). Off by default: timed on an H200 it was 0.97x / 0.95x the slots at 350M / 1B but
    1.13x at 100M (benchmarks/kernels/results.md, "Douts read in place").
    stack_weights: what the forward of a stack built with its sites' parameters keeps of its
    routing weights for the backward. "stored" (default): W [n_c, P, H_c] fp32 per call, the raw
    logits written, re-read and rewritten as weights by the forward, read once more per pair by
    the backward (4 passes of 4 H_c bytes per pair). "logits" (issue 55's second lever): the
    forward stores only each call's softmax max and normaliser [2, P, H_c] fp32, and the
    backward's gather and fold recompute w_{c,j} = exp(l_{c,j} - m_c) / l_c from the source row
    and the reader's query they already hold (the forward's order of operations: bitwise the
    stored weights in the interpreter with one head count per stack; route/bwd_collect.py
    `_reader_weight`). Per position at the 100M shape (the `100m` preset: d 512, 12 layers, 25
    calls, 325 pairs, H = 8; the count does not depend on d): 16 x 8 x 325 = 41,600 bytes of
    weights no longer moved (31,200 in the forward, 10,400 in the backward), 2 x 4 x 8 x 25 =
    1,600 of normalisers written and 8 x 8 = 64 read per reader of a dout-reading launch (133
    at fold_calls 8: 8,512): 31,488 bytes less, 1.37x -> 1.33x the stack floor
    (route/floors.py `built_bytes`, tests/test_kernel_floors.py). A route asked for its weights
    (`need_weights`, a hook) still gets them, stored for it alone. Off by
    default: not timed.
    stack_append: how a sublayer's output reaches the stack's source buffer. "stored" (default):
    the sublayer writes a tensor of its own and the forward kernel of the next routing call reads
    it as its last row and stores it into the buffer (a copy where anything else reads it first).
    "into_buffer" (issue 55's third lever): the stack hands out its next buffer row
    (`TritonSourceStack.next_slot`) and the sublayer's output projection (attention's o_proj,
    the MLP's down_proj: `model.layers.linear_into`) writes its product there, so appending is
    no copy and the forward kernel stores nothing: w_src x d bytes a position fewer per appended
    source (route/floors.py `forward_bytes`): 24,576 bytes a position at the 100M stack, 1.37x
    -> 1.34x the stack floor. The kernel reads the row in the stored design's order and the
    projection is F.linear's product and gradients: bitwise the stored design's outputs and
    gradients (tests/test_kernels_append.py, fp32 and CPU bf16 autocast). Under compiled
    sublayers the projection runs uncompiled after the compiled region (`linear_into` is
    `torch.compiler.disable`d: one graph break per sublayer, no recompiles). Off by default: not
    timed."""

    routing_douts: Literal["promoted", "storage"] = "promoted"
    poison: bool = False
    launch_table: str | None = None
    stack_backward: Literal["fold", "gather"] = "fold"
    fold_calls: int = 8
    stack_douts: Literal["slots", "in_place"] = "slots"
    stack_weights: Literal["stored", "logits"] = "stored"
    stack_append: Literal["stored", "into_buffer"] = "stored"

    def __post_init__(self) -> None:
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"KernelConfig.{name}={getattr(self, name)!r}: choose from {', '.join(choices)}")
        if self.stack_douts == "in_place" and self.routing_douts != "promoted":
            raise ValueError("KernelConfig.stack_douts='in_place' reads each dout as autograd gives it: "
                             "it needs routing_douts='promoted' (a 'storage' slot rounds the dout)")
        if isinstance(self.fold_calls, bool) or not isinstance(self.fold_calls, int) or self.fold_calls < 1:
            raise ValueError(f"KernelConfig.fold_calls={self.fold_calls!r}: a whole number of calls >= 1")
        if self.launch_table is not None and not isinstance(self.launch_table, str):
            object.__setattr__(self, "launch_table", str(self.launch_table))  # a Path is fine too

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


DEFAULT = KernelConfig()
#: old spellings of a field, as saved run records (summary.json's `routing_kernels`) may hold them
LEGACY_FIELDS = {"dout_dtype": "routing_douts"}


def kernel_config_from_dict(fields: dict[str, object]) -> KernelConfig:
    """A KernelConfig from its saved fields (`KernelConfig.as_dict`, or a run's `routing_kernels`:
    the keys that are not fields, such as `triton`, are left out); old spellings are mapped
    (`LEGACY_FIELDS`)."""
    names = {f.name for f in dataclasses.fields(KernelConfig)}
    mapped = {LEGACY_FIELDS.get(k, k): v for k, v in fields.items()}
    return KernelConfig(**{k: v for k, v in mapped.items() if k in names})
