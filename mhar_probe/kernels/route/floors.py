"""Byte floors of a stack's routing: the DRAM bytes of one microbatch's calls, forward + backward.

Layout as `bwd_fold.model_layout`: (n_c, j0_c, j1_c) per call c, which reads sources [0, n_c) and
is the first to read [j0_c, j1_c). P positions, row width d, H_c heads at call c. Widths in bytes
(`StackWidths`): source 0 (under autocast the fp32 embedding), the other sources (the bf16
buffer), the routed outputs and their upstream gradients (the promoted dtype).

* `four_byte_floor` (the kernel table's floor, issue 35's): each (call, source) pair's source
  row read once by the forward and once by the backward, 2 bytes an element each way:

      F4 = 4 x d x P x sum_c n_c

* `stack_floor`: F4 with the per-call and per-source tensors that every exact implementation of
  this byte model moves as well, and the first source at its own width:

      + P x sum_c [ (w0 - 2) d x 2          source 0 read at its width, in both passes
                    + w_out d + w_dout d    the output written, its gradient read
                    + 8 H_c ]               a softmax normaliser per head, written and read
      + P x sum_j w_j d                     each source's gradient written once

  (the weights recomputed in the backward from the normaliser: the least a pass can keep).
  A blocked backward such as the fold reads a source once per block of readers rather than once
  per pair, below this model, but pays for its accumulators (`bwd_fold.plan_bytes`).

* `built_bytes`: the bytes the kernels as launched by the stack move, kernel by kernel, each
  row a launch touches counted once:
    fwd    (`route_fwd_kernel`, per call): source 0 at w0, the rest at w_src; the source it
           appends read from the sublayer's output and written into the buffer (w_src each);
           the output written (w_out); the raw logits written, then read and rewritten as
           weights (3 x 4 H_c per pair); each row's r (4 bytes a position) written by the call
           that appends it (row 0's by the first call) and read by the calls that read the row
           from the buffer;
    bwd    the dout-reading launches (`stack_gather_kernel`, `stack_fold_kernel`):
           `bwd_fold.plan_bytes` over the plan at `fold_calls` (each dout copied into a slot,
           the weights stored: 4 H_c per pair read);
    pair_e (`pair_e_kernel`): each source row read once per block of `block_c` of its readers,
           with its r_j (4 bytes a position), and dl_{c,j} of every pair (4 H_c);
  `collect_dqdg_kernel` reads and writes rows of d per call and split, not per position: left out.

Divided by the copy bandwidth each is the time of its kernels at copy speed; `benchmarks/kernels/
byte_floors.py` prints them against the training microbatches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mhar_probe.kernels.route.bwd_fold import backward_plan, plan_bytes

Layout = Sequence[tuple[int, int, int]]


@dataclass(frozen=True)
class StackWidths:
    """Bytes per element of a stack's tensors; the default is autocast's training layout."""

    src0: int = 4  # source 0 (the fp32 embedding)
    src: int = 2  # sources >= 1 (the bf16 buffer)
    out: int = 4  # routed outputs (fp32: the promoted dtype)
    dout: int = 4  # their upstream gradients


def pair_count(layout: Layout) -> int:
    """(call, source) pairs: sum_c n_c."""
    return sum(n for n, _, _ in layout)


def four_byte_floor(layout: Layout, d: int, positions: int) -> int:
    """F4 = 4 x d x P x pairs (module docstring), in bytes."""
    return 4 * d * positions * pair_count(layout)


def source_count(layout: Layout) -> int:
    """Sources the stack's calls read: [0, max_c n_c)."""
    return max(n for n, _, _ in layout)


def stack_floor(layout: Layout, d: int, heads: Sequence[int], positions: int,
                widths: StackWidths = StackWidths()) -> int:
    """F4 with the per-call and per-source tensors counted (module docstring), in bytes."""
    per_call = sum(2 * (widths.src0 - 2) * d + (widths.out + widths.dout) * d + 8 * h for h in heads[:len(layout)])
    grads = widths.src0 * d + widths.src * d * (source_count(layout) - 1)
    return four_byte_floor(layout, d, positions) + positions * (per_call + grads)


def forward_bytes(layout: Layout, d: int, heads: Sequence[int], positions: int,
                  widths: StackWidths = StackWidths(), lookahead: bool = False, stored_r: bool = True) -> int:
    """Bytes of the stack's forward launches as built (module docstring: fwd). A call appends
    the source it reads first when that is its last one (j0 = n - 1 >= 1, `_take_unstored`).

    lookahead (`KernelConfig(forward="lookahead")`, the stack's pairing rule `lookahead_pairs`):
    a leading call also writes the next call's softmax state (an fp32 row and 2 H fp32:
    4 d + 8 H); the call that resumes reads that state instead of rows [0, n0), and reads only
    rows [n0, n). The next call's logits of rows [0, n0) are written by the leader instead of by
    it: `weight_bytes` of the resuming call, as before.

    stored_r (the kernels since the stored row norms; records carry `routing_stored_norms`): each
    row read from the buffer comes with its stored r (4 bytes a position: `route_fwd_kernel`'s
    R_STORED), written by the call that appends the row; source 0's and the appended row's are
    computed from the row in registers, and the first call writes source 0's (STORE_R0)."""
    resume = lookahead_pairs(layout, heads) if lookahead else {}
    total = 0
    for c, ((n, j0, j1), h) in enumerate(zip(layout, heads)):
        appends = j1 == n and j0 == n - 1 and n > 1
        n0 = resume.get(c, 0)
        if n0:  # rows [n0, n) read, and the state read
            rows = widths.src * d * (n - n0) + 4 * d + 8 * h
            from_buffer = n - n0 - appends
        else:  # every source row read once
            rows = widths.src0 * d + widths.src * d * (n - 1)
            from_buffer = n - 1 - appends
        if c + 1 in resume:  # the next call's state written
            rows += 4 * d + 8 * h
        if stored_r:
            rows += 4 * from_buffer + (4 if c == 0 else 0)  # their stored r read; row 0's written
        if appends:
            rows += widths.src * d + 4 * stored_r  # ... and the appended one written into the buffer, and its r
        total += rows + widths.out * d + weight_bytes(n, h)
    return total * positions


def lookahead_pairs(layout: Layout, heads: Sequence[int]) -> dict[int, int]:
    """{call: n0} of the calls that resume under the forward's lookahead (`_StackState.
    _reserve_call`): a call leads unless it resumes and a next call exists; the next call resumes
    from the leader's n0 = n rows where it has the leader's H (and eps and dtype: one each here)
    and reads at least those rows."""
    out: dict[int, int] = {}
    lead = None  # (n, H) of the leading call before this one
    for c, ((n, _, _), h) in enumerate(zip(layout, heads)):
        if lead is not None and lead[1] == h and n >= lead[0]:
            out[c], lead = lead[0], None
        else:
            lead = (n, h) if c + 1 < len(layout) else None
    return out


def weight_bytes(n: int, h: int) -> int:
    """Bytes per position a forward over n sources in h heads moves for its weights: the raw
    logits written, read and rewritten as weights (3 x 4 h n)."""
    return 12 * h * n


def pair_e_bytes(layout: Layout, d: int, heads: Sequence[int], positions: int, block_c: int,
                 widths: StackWidths = StackWidths()) -> int:
    """Bytes of `pair_e_kernel` over the whole backward (module docstring: pair_e)."""
    total = 0
    for j in range(source_count(layout)):
        readers = [c for c, (n, _, _) in enumerate(layout) if n > j]
        blocks = {(c - readers[0]) // block_c for c in readers}
        width = widths.src0 if j == 0 else widths.src
        total += len(blocks) * (width * d + 4) + sum(4 * heads[c] for c in readers)
    return total * positions


@dataclass(frozen=True)
class BuiltBytes:
    """`built_bytes`: bytes per kernel group over one microbatch."""

    fwd: int
    bwd: float
    pair_e: int

    @property
    def total(self) -> float:
        return self.fwd + self.bwd + self.pair_e


def built_bytes(layout: Layout, d: int, heads: Sequence[int], positions: int, fold_calls: int,
                block_c: int, widths: StackWidths = StackWidths(), lookahead: bool = False,
                stored_r: bool = True) -> BuiltBytes:
    """The kernels' bytes as launched (module docstring); the backward's from `plan_bytes`,
    whose sources are all at w_src (source 0's extra width in the backward is not counted);
    `lookahead`, `stored_r`: the forward's (`forward_bytes`)."""
    top = len(layout) - 1
    plan = backward_plan(layout, top, fold_calls)
    bwd = plan_bytes(plan, layout, heads, d, widths.src, widths.dout) * pair_count(layout) * d * positions
    return BuiltBytes(forward_bytes(layout, d, heads, positions, widths, lookahead, stored_r), bwd,
                      pair_e_bytes(layout, d, heads, positions, block_c, widths))
