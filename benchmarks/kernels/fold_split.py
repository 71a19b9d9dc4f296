"""Where the stack backward's time goes, per kernel: time, modelled DRAM bytes, pairs handled.

Reads `mhar bench routing` JSON (rows with `kernels_ms`, e.g. `h200_fold_train_microbatches.json`)
and, for each row of the triton backends, splits the backward into its dout-reading kernels
(`stack_gather_kernel`, `stack_fold_kernel`) using the launch plan the autograd path follows
(`route_bwd_fold.backward_plan`, Cb = the row's `fold_calls`; 0 for `triton-gather`):

    bytes_k   = the DRAM bytes `plan_bytes` counts for the launches of kind k (each row a launch
                touches counted once), over P positions
    pairs_k   = number of (call c, source j) terms T_{c,j} kind k sums
    GB/s_k    = bytes_k / time_k        (against the run's copy bandwidth)
    ns/pp_k   = time_k / (pairs_k x P)  (ns per pair and position: the per-pair cost)

Pair-elements = sum_c n_c x d x P with n_c = c + 1 sources at call c (the model's stacks, 2L + 1
calls), P = B x T. Douts are 4 bytes in `mixed` (autocast's layout), else 2; sources 2. The
forward's column divides its bytes as launched (`kernels.route.floors.forward_bytes` at the run's
widths) by its time.

    PYTHONPATH=. python benchmarks/kernels/fold_split.py benchmarks/kernels/h200_fold_train_microbatches.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

from mhar_probe.bench.routing import SHAPES
from mhar_probe.kernels.route.bwd_fold import BackwardLaunch, backward_plan, model_layout, plan_bytes
from mhar_probe.kernels.route.floors import StackWidths, forward_bytes

KERNELS = {"gather": "stack_gather_kernel", "fold": "stack_fold_kernel"}
FWD_KERNELS = ("route_fwd_kernel", "route_fwd_split_kernel")
#: element widths of a benchmark run's stack by its `--dtype` (mixed: autocast's layout)
WIDTHS = {"mixed": StackWidths(), "bfloat16": StackWidths(2, 2, 2, 2), "float16": StackWidths(2, 2, 2, 2),
          "float32": StackWidths(4, 4, 4, 4)}


@dataclass(frozen=True)
class KernelSplit:
    """One dout-reading kernel of one benchmark row."""

    shape: str
    H: int
    backend: str
    kernel: str  # "gather" or "fold"
    launches: int
    pairs: int
    ms: float
    gbytes: float  # modelled DRAM bytes, 1e9
    gbps: float
    of_copy: float  # gbps / the run's copy bandwidth
    ns_per_pair_position: float


def pairs_of(plan: list[BackwardLaunch], layout: list[tuple[int, int, int]]) -> int:
    """(c, j) terms summed by the launches of `plan`: readers c in [call, top1) of source j."""
    return sum(1 for la in plan for j in range(la.lo, la.hi) for c in range(la.call, la.top1) if layout[c][0] > j)


def launch_bytes(plan: list[BackwardLaunch], layout: list[tuple[int, int, int]], heads: list[int], d: int, P: int,
                 src_bytes: int, dout_bytes: int) -> float:
    """Modelled DRAM bytes of the launches in `plan` over P positions: `plan_bytes` times the
    pair-elements it divides by (the pairs of the calls up to the plan's highest call)."""
    pairs = sum(n for n, _, _ in layout[: max(la.call for la in plan) + 1])
    return plan_bytes(plan, layout, heads, d, src_bytes, dout_bytes) * pairs * d * P


def fold_calls_of(row: dict) -> int:
    """Cb of a benchmark row: 0 for the gather backward, else its kernel_config's (default 8)."""
    cfg = row.get("kernel_config") or {}
    return 0 if cfg.get("stack_backward") == "gather" else int(cfg.get("fold_calls", 8))


def split_row(row: dict, copy_gbps: float, dout_bytes: int, src_bytes: int = 2) -> list[KernelSplit]:
    """The gather and fold kernels of one row (module docstring)."""
    d, L, B, T = SHAPES[row["shape"]]
    calls, P, H = 2 * L + 1, B * T, row["H"]
    layout = model_layout(calls)
    plan = backward_plan(layout, calls - 1, fold_calls_of(row))
    out = []
    for kind, name in KERNELS.items():
        sub = [la for la in plan if la.kind == kind]
        if not sub or name not in row["kernels_ms"]:
            continue
        ms = row["kernels_ms"][name]
        gb = launch_bytes(sub, layout, [H] * calls, d, P, src_bytes, dout_bytes) / 1e9
        pairs = pairs_of(sub, layout)
        out.append(KernelSplit(row["shape"], H, row["backend"], kind, len(sub), pairs, ms, gb, gb / ms * 1e3,
                               gb / ms * 1e3 / copy_gbps, ms * 1e6 / (pairs * P)))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="mhar bench routing JSON files")
    ap.add_argument("--out", default="", help="write the split as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for path in args.files:
        doc = json.load(open(path))
        meta = doc["meta"]
        dout_bytes = 4 if meta.get("dtype") == "mixed" else 2
        print(f"{path}: {meta.get('device')} commit {meta.get('commit')} copy {meta['copy_gbps']:.0f} GB/s, "
              f"{meta.get('dtype')} ({dout_bytes}-byte douts)")
        print(f"{'shape':11s} {'H':>2s} {'backend':14s} {'kernel':6s} {'launch':>6s} {'pairs':>5s} {'ms':>6s} "
              f"{'GB':>6s} {'GB/s':>6s} {'copy':>5s} {'ns/pair/pos':>11s} | fwd ms  fwd GB/s")
        for r in doc["rows"]:
            if not r.get("kernels_ms") or not str(r.get("backend", "")).startswith("triton"):
                continue
            fwd = next((r["kernels_ms"][k] for k in FWD_KERNELS if k in r["kernels_ms"]), None)
            d, L, B, T = SHAPES[r["shape"]]
            fwd_gb = forward_bytes(model_layout(2 * L + 1), d, [r["H"]] * (2 * L + 1), B * T,
                                   WIDTHS.get(meta.get("dtype"), WIDTHS["bfloat16"])) / 1e9  # as launched
            for s in split_row(r, meta["copy_gbps"], dout_bytes):
                rows.append(dict(asdict(s), file=path))
                print(f"{s.shape:11s} {s.H:2d} {s.backend:14s} {s.kernel:6s} {s.launches:6d} {s.pairs:5d} "
                      f"{s.ms:6.2f} {s.gbytes:6.2f} {s.gbps:6.0f} {s.of_copy:5.0%} {s.ns_per_pair_position:11.3f} | "
                      + (f"{fwd:6.2f}  {fwd_gb / fwd * 1e3:6.0f}" if fwd else ""))
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
