"""Routing's byte floors at a training microbatch, and the step's routing kernels against them.

For a preset's stack (2L + 1 calls, call c reading sources [0, c]; autocast's widths: fp32 source
0, outputs and douts, bf16 buffer) over B x T positions, from `mhar_probe.kernels.route.floors`:

    F4     the 4-byte floor (the kernel table's, issue 35's)
    stack  F4 with each call's output, dout and normaliser and each source's gradient counted
    built  the bytes the kernels move as launched (fwd, the dout-reading backward at fold_calls,
           pair_e), each group divided by the copy bandwidth: its time at copy speed; an arm
           that ran the forward's lookahead (`routing_forward` "lookahead") has its forward's bytes

With `train_throughput.py` JSON files, each MHAR arm's profiled step: its routing kernels'
device ms per group (`profile.top_kernels`) against the group's built bytes (% of copy), the
whole routing category against F4, the stack floor (issue 55's measure) and the built floor, and 1.3 x F4 (issue 35's target)
and 1.35 x the stack floor (issue 55's) against the built floor: a target below it needs fewer bytes,
not faster kernels; above it, the built floor over the target is the share of copy bandwidth the
kernels must average over their bytes.

    PYTHONPATH=. python benchmarks/kernels/byte_floors.py --copy-gbps 2933 \\
        benchmarks/train_throughput/h100_step_100m.json ...
    PYTHONPATH=. python benchmarks/kernels/byte_floors.py --copy-gbps 2933   (the floors alone)
    PYTHONPATH=. python benchmarks/kernels/byte_floors.py --copy-gbps 2933 --issue55 \\
        benchmarks/train_throughput/h100_step_held_{100m,350m,1b}.json   (issue 55's target, a table)
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from mhar_probe.kernels.config import DEFAULT
from mhar_probe.kernels.launch_tables import tables_for
from mhar_probe.kernels.route.bwd_fold import model_layout
from mhar_probe.kernels.route.floors import built_bytes, four_byte_floor, stack_floor
from mhar_probe.model.config import PRESETS

PAPER = {"100m": (8, 2048), "350m": (4, 1024), "1b": (2, 1024)}  # the paper's training microbatches
GROUPS = {  # kernel group: the kernels' names in a profile
    "fwd": ("route_fwd_kernel", "route_fwd_split_kernel"),
    "bwd": ("stack_gather_kernel", "stack_fold_kernel", "stack_fold_held_kernel"),
    "pair_e": ("pair_e_kernel",),
}
TARGET = 1.3  # issue 35: routing within 1.3x of F4
TARGET_STACK = 1.35  # issue 55: routing within 1.35x of the stack floor
PRESET_NAMES = {"100m": "100M", "350m": "350M", "1b": "1B"}


@dataclass(frozen=True)
class Floors:
    """One stack's floors in ms at the copy bandwidth."""

    f4: float
    stack: float
    built: dict[str, float]  # per group

    @property
    def built_total(self) -> float:
        return sum(self.built.values())


def floors(preset: str, batch: int, seq: int, heads: int, fold_calls: int, copy_gbps: float,
           lookahead: bool = False, stored_r: bool = True) -> Floors:
    """The floors of `preset`'s stack over batch x seq positions (module docstring); `lookahead`:
    the built forward's bytes under KernelConfig(forward="lookahead"); `stored_r`: with the rows'
    stored norms (`floors.forward_bytes`)."""
    d, L = PRESETS[preset]["hidden_size"], PRESETS[preset]["num_hidden_layers"]
    calls, positions = 2 * L + 1, batch * seq
    layout, per_call = model_layout(calls), [heads] * calls
    block_c = tables_for(DEFAULT).pair_e_config(d, heads)[0]
    built = built_bytes(layout, d, per_call, positions, fold_calls, block_c, lookahead=lookahead, stored_r=stored_r)
    ms = 1e-6 / copy_gbps  # bytes -> ms
    return Floors(four_byte_floor(layout, d, positions) * ms, stack_floor(layout, d, per_call, positions) * ms,
                  dict(fwd=built.fwd * ms, bwd=built.bwd * ms, pair_e=built.pair_e * ms))


def group_ms(top_kernels: list) -> dict[str, float]:
    """Device ms per group from a profile's `top_kernels` rows ([ms, launches, name])."""
    out = {g: 0.0 for g in GROUPS}
    for ms, _, name in top_kernels:
        for g, names in GROUPS.items():
            if name in names:
                out[g] += ms
    return out


def step_rows(doc: dict, copy_gbps: float) -> list[dict]:
    """Every profiled MHAR arm of a train_throughput JSON against its floors."""
    rows = []
    for r in doc["results"]:
        prof = r.get("profile") or {}
        if r["method"] == "baseline" or not prof.get("top_kernels"):
            continue
        fl = floors(r["preset"], r["batch"], r["seq"], r.get("routing_heads") or 8,
                    r.get("fold_calls") or 8, copy_gbps, r.get("routing_forward") == "lookahead",
                    bool(r.get("routing_stored_norms")))  # records before the stored norms lack it
        got = group_ms(prof["top_kernels"])
        routing = prof["categories_ms"]["routing"]
        rows.append(dict(preset=r["preset"], arm=r["arm"], vocab=doc["meta"]["args"].get("vocab"),
                         batch=r["batch"], seq=r["seq"],
                         f4_ms=fl.f4, stack_ms=fl.stack, built_ms=fl.built_total, routing_ms=routing,
                         routing_x_f4=routing / fl.f4, routing_x_stack=routing / fl.stack,
                         routing_x_built=routing / fl.built_total,
                         target_x_built=TARGET * fl.f4 / fl.built_total,
                         target55_x_built=TARGET_STACK * fl.stack / fl.built_total,
                         groups={g: dict(ms=got[g], built_ms=fl.built[g], of_copy=fl.built[g] / got[g] if got[g] else None)
                                 for g in GROUPS}))
    return rows


def issue55_table(rows: list[dict]) -> str:
    """Markdown: per profiled step row, the stack floor and the built floor at copy speed, issue 55's
    1.35 x stack over the built floor, the share of copy bandwidth the kernels must then average
    over their built bytes (over 100%: the target needs fewer bytes), and the share they average
    in the step (built / routing ms). A row of an arm other than the default MHAR arm ("mhar")
    names its arm beside the preset, so that a file with a variant arm reads unambiguously."""
    lines = ["| preset | stack floor ms | built ms at copy speed (x stack) | 1.35 x stack / built | share of copy "
             "the target asks | routing ms in the step | share of copy now |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        arm = "" if r["arm"] == "mhar" else f" ({r['arm']})"
        lines.append(f"| {r['preset'].upper()}{arm} | {r['stack_ms']:.3f} | {r['built_ms']:.3f} "
                     f"({r['built_ms'] / r['stack_ms']:.2f}x) | {r['target55_x_built']:.2f} | "
                     f"{1 / r['target55_x_built']:.0%} | {r['routing_ms']:.2f} | {r['built_ms'] / r['routing_ms']:.0%} |")
    return "\n".join(lines)


def time_table(rows: list[dict]) -> str:
    """Markdown, mhar_probe/kernels/README.md's "Where the time goes": per profiled step row (the
    training microbatch), the routing's device ms, each group's ms with its built bytes' share of copy
    speed, and the routing against the stack floor, F4 and the built bytes at copy speed."""
    lines = ["| training microbatch | routing | forward | gather + fold | pair_e | x stack floor | x F4 "
             "| x the built bytes at copy speed |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        g = r["groups"]
        cells = " | ".join(f"{g[k]['ms']:.2f} ({g[k]['of_copy']:.0%})" for k in ("fwd", "bwd", "pair_e"))
        lines.append(f"| {PRESET_NAMES.get(r['preset'], r['preset'])} ({r['batch']}x{r['seq']}) | {r['routing_ms']:.2f} ms | "
                     f"{cells} | {r['routing_x_stack']:.2f}x | {r['routing_x_f4']:.2f}x | {r['routing_x_built']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="train_throughput.py JSON files (profiled)")
    ap.add_argument("--copy-gbps", type=float, required=True, help="the card's copy bandwidth (the kernel call's)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--fold-calls", type=int, default=8)
    ap.add_argument("--out", default="", help="write the rows as JSON here")
    ap.add_argument("--issue55", action="store_true",
                    help="also print issue 55's target against the built floor as a markdown table")
    ap.add_argument("--time-table", action="store_true",
                    help="also print the kernels README's \"Where the time goes\" table of the profiled steps")
    args = ap.parse_args(argv)
    if args.copy_gbps <= 0:
        raise SystemExit("--copy-gbps must be positive")
    if args.issue55 and not args.files:
        raise SystemExit("--issue55 sets the target against profiled steps: give train_throughput.py JSON files")
    if args.time_table and not args.files:
        raise SystemExit("--time-table renders profiled steps: give train_throughput.py JSON files")
    print(f"floors at {args.copy_gbps:.0f} GB/s, H = {args.heads}, fold blocks of {args.fold_calls} (ms)")
    print(f"{'preset':7s} {'BxT':>8s} {'F4':>7s} {'stack':>7s} {'x F4':>5s} {'built':>7s} {'x F4':>5s} "
          f"{'1.35stack/built':>15s}  fwd / bwd / pair_e")
    for preset, (B, T) in PAPER.items():
        fl = floors(preset, B, T, args.heads, args.fold_calls, args.copy_gbps)
        print(f"{preset:7s} {f'{B}x{T}':>8s} {fl.f4:7.3f} {fl.stack:7.3f} {fl.stack / fl.f4:5.2f} "
              f"{fl.built_total:7.3f} {fl.built_total / fl.f4:5.2f} {TARGET_STACK * fl.stack / fl.built_total:15.2f}  "
              + " / ".join(f"{v:.3f}" for v in fl.built.values()))
    rows = []
    for path in args.files:
        try:
            doc = json.load(open(path))
            rows += [dict(r, file=path) for r in step_rows(doc, args.copy_gbps)]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{path}: not a train_throughput.py result ({type(exc).__name__}: {exc})") from None
    if rows:
        print(f"\n{'preset':7s} {'vocab':>6s} {'arm':10s} {'routing':>7s} {'x F4':>5s} {'x stack':>7s} {'x built':>7s} "
              f"{'1.3F4/built':>11s}  per group: ms (% of copy over its built bytes)")
    for r in rows:
        print(f"{r['preset']:7s} {r['vocab'] or '':>6} {r['arm'][:10]:10s} {r['routing_ms']:7.2f} {r['routing_x_f4']:5.2f} "
              f"{r['routing_x_stack']:7.2f} {r['routing_x_built']:7.2f} {r['target_x_built']:11.2f}  "
              + "  ".join(f"{g} {v['ms']:.2f} ({v['of_copy']:.0%})" if v["of_copy"] else f"{g} -"
                          for g, v in r["groups"].items()))
    if rows and args.issue55:
        print("\n" + issue55_table(rows))
    if rows and args.time_table:
        print("\n" + time_table(rows))
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
