"""The fold kernel's profile and its row families, as benchmarks/kernels/results.md shows them
("H100: the fold kernel's profile, and the rows that lose" and "H100: the held fold kernel", 2026-12-06).

    python benchmarks/kernels/fold_rows_table.py profile benchmarks/kernels/h100_fold_ncu_*_15a4c8d.csv
    python benchmarks/kernels/fold_rows_table.py rows benchmarks/kernels/h100_fold_rows_*.json
    python benchmarks/kernels/fold_rows_table.py offline benchmarks/kernels/regs_offline_2026-12-06_fold_{wide,dense}_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py dense benchmarks/kernels/h100_fold_dense_ab_*.json
    python benchmarks/kernels/fold_rows_table.py dense-step benchmarks/train_throughput/h200_fold_dense_ab_1b_{base,dense}.json
    python benchmarks/kernels/fold_rows_table.py rows benchmarks/kernels/h100_fold_held_{sweep_cedd221,rows_938ad29}.json
    python benchmarks/kernels/fold_rows_table.py profile benchmarks/kernels/h100_fold_held_ncu_*_938ad29.csv
    python benchmarks/kernels/fold_rows_table.py merge benchmarks/kernels/h100_fold_held_merge_ab_*.json
    python benchmarks/kernels/fold_rows_table.py steps benchmarks/train_throughput/h100_step_{dense,held}_{100m,350m,1b}.json
    python benchmarks/kernels/fold_rows_table.py held-offline benchmarks/kernels/regs_offline_2026-12-06_fold_{held,dense}_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py butterfly-offline benchmarks/kernels/regs_offline_2026-12-06_fold_held_butterfly_c9a7d34_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py rows benchmarks/kernels/h100_fold_held_butterfly_0a826e1.json
    python benchmarks/kernels/fold_rows_table.py fwd-profile benchmarks/kernels/h100_fwd_ncu_*_ab5556e.csv
    python benchmarks/kernels/fold_rows_table.py fwd-offline benchmarks/kernels/regs_offline_2026-12-06_fwd_sources_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py fwd-rows benchmarks/kernels/h100_fwd_sources_sweep_5271ffa.json
    python benchmarks/kernels/fold_rows_table.py backends benchmarks/kernels/h100_kernel_table{,_1b}_734ef24.json
    python benchmarks/kernels/fold_rows_table.py fwd-caps benchmarks/kernels/regs_offline_2026-12-06_fwd_caps_triton3.6.json benchmarks/kernels/h100_fwd_caps_sweep_ce3036b.json
    python benchmarks/kernels/fold_rows_table.py fwd-ab benchmarks/kernels/h100_fwd_rescale_ab_*.json
    python benchmarks/kernels/fold_rows_table.py prefetch2-offline benchmarks/kernels/regs_offline_2026-12-06_fold_held_prefetch2_f22ee2f_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py stored-r-offline benchmarks/kernels/regs_offline_2026-12-07_{fwd,fold}_stored_r_{base_8fe9acb,79ddc10}_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py fold-ab benchmarks/kernels/h100_fold_rstored_ab_*.json
    python benchmarks/kernels/fold_rows_table.py dot-offline benchmarks/kernels/regs_offline_2026-12-07_fold_dot_d0855db_triton3.6.json
    python benchmarks/kernels/fold_rows_table.py pipe-dot benchmarks/kernels/h100_{fold_pipe_dot,pair_e_two}_sweep_62336e5.json

`profile`: one row per Nsight Compute file (`device_run.sh ncu` with JOBS naming stack_fold; one
launch each, the backward's first fold, the one over the most sources), read by
`ncu_routing.summarise`. `rows`: per sweep file (`launch_sweep.py --kinds fold --rows-fold ...`)
and shape, the card's own row (the sweep's `probe:fold`), the fastest row of each of the three
fastest families the file tried and the range over every row tried, by the fold kernel's device ms (median of the sweep's profiled runs) and over the
card's row in the same process. A row's family is its warps, its sources per iteration and, in the
pipelined file, its stages (`prefetch` p >= 3 meant p - 1 stages there). A test
(tests/test_fold_rows_table.py) checks that results.md holds these tables as rendered from the
committed files.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_routing import summarise  # noqa: E402

SHAPES = ("1B-train", "350M-train", "100M-train")
KERNEL = "stack_fold_kernel"
TOP = 3  # families shown per shape
PRESET_VOCAB = 151_936  # the presets' vocabulary (Qwen3's); a step run with another is labelled with it


def render_profile(paths: list[Path], launch: str = "fold launch") -> str:
    """The Nsight Compute table: one row per profiled launch (its shape from the file's name)."""
    lines = [f"| shape ({launch}) | ms | registers | warps / SM | eligible warps / scheduler | issue slots busy | cycles / issue "
             "| long scoreboard | wait | short scoreboard | barrier | DRAM | L2 | L1 (hit) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rec in summarise([str(p) for p in paths]):
        stalls = dict(rec["top_stalls"])
        shape = next(s for s in SHAPES if f"_{s.split('-')[0].lower()}_" in Path(rec["file"]).name)
        lines.append(
            f"| {shape} | {rec['duration'] / 1e6:.3f} | {rec['registers']:.0f} | "
            f"{rec['theoretical_occupancy_pct'] * 64 / 100:.0f} | {rec['eligible_warps_per_scheduler']:.2f} | "
            f"{rec['issue_busy_pct']:.1f}% | "
            f"{rec['cycles_per_issue']:.2f} | {stalls.get('long_scoreboard', 0):.2f} | {stalls.get('wait', 0):.2f} | "
            f"{stalls.get('short_scoreboard', 0):.2f} | {stalls.get('barrier', 0):.2f} | {rec['dram_pct']:.1f}% | "
            f"{rec['l2_pct']:.1f}% | {rec['l1_pct']:.1f}% ({rec['l1_hit_pct']:.0f}%) |")
    return "\n".join(lines)


def family(cfg: list[int], pipelined: bool) -> str:
    """A fold row's family: `2 warps, 2 sources` (and `, 3 stages` in the pipelined file); a held
    row (sources 0, `stack_fold_held_kernel`): `held, 8 warps`; a held row with loads_first 1 ran
    the lane butterfly (c9a7d34's tree, timed as 0a826e1 and deleted; main's held kernel has no use
    for the column, and no record of main's tree holds such a row): `held, butterfly, 8 warps`."""
    warps = f"{cfg[1]} warp{'s' if cfg[1] > 1 else ''}"
    if cfg[5] == 0:
        return f"held, {'butterfly, ' if cfg[4] else ''}{warps}"
    name = f"{warps}, {cfg[5]} source{'s' if cfg[5] > 1 else ''}"
    return name + (f", {cfg[2] - 1} stages" if pipelined and cfg[2] >= 3 else "")


def fold_ms(row: dict) -> float:
    """The fold's device ms in a sweep row: the reader loop's kernel or the held one."""
    return _kernel_ms(row, ("stack_fold",))


def render_rows(paths: list[Path]) -> str:
    """Per file and shape (the shapes a file swept): the card's row, then each family's fastest row over it."""
    lines = ["| file | shape | card's row: ms | the three fastest families: fastest row, ms (x the card's row) "
             "| rows tried: range |", "|---|---|---:|---|---:|"]
    for path in paths:
        doc = json.loads(path.read_text())
        pipelined = "pipelined" in path.name
        for shape in SHAPES:
            rows = [r for r in doc["rows"] if r["shape"] == shape]
            if not rows:  # a sweep of some shapes (SHAPES=...)
                continue
            card = next(r for r in rows if r["what"] == "probe:fold")
            card_row = tuple(rows[[r["what"] for r in rows].index("sweep:fold")]["cfg"])  # the built-in row, first
            best: dict[str, dict] = {}
            for r in rows:
                if r["what"] != "sweep:fold" or tuple(r["cfg"]) == card_row:
                    continue
                fam = family(r["cfg"], pipelined)
                if fam not in best or fold_ms(r) < fold_ms(best[fam]):
                    best[fam] = r
            ranked = sorted(best.items(), key=lambda kv: fold_ms(kv[1]))
            cells = "; ".join(f"{fam}: {tuple(r['cfg'])}, {fold_ms(r):.2f} ({fold_ms(r) / fold_ms(card):.2f}x)"
                              for fam, r in ranked[:TOP])
            tried = [fold_ms(r) / fold_ms(card) for r in rows if r["what"] == "sweep:fold" and tuple(r["cfg"]) != card_row]
            lines.append(f"| `{path.name}` | {shape} | {fold_ms(card):.3f} {card_row} | {cells} | "
                         f"{len(tried)}: {min(tried):.2f}-{max(tried):.2f}x |")
    return "\n".join(lines)


def render_offline(path: Path, card_rows: dict[str, tuple[int, ...]], dense_path: Path | None = None) -> str:
    """The registers and reader-loop instructions of `regs_offline.py --kernels fold_rows --loops`
    (compiled for sm_90 without a GPU): per shape the card's row, then the rows at each wider warp
    count as ranges, and (from `dense_path`, `--dense`) the card's row with the DENSE loop.
    Warp-instructions per (pair, position) = the reader loop's instructions x warps / (sources per
    iteration x positions per program); of them, the fp32 arithmetic (FFMA, FADD, FMUL)."""
    doc = json.loads(path.read_text())
    dense = json.loads(dense_path.read_text()) if dense_path else {"rows": []}

    def per_pair(r: dict, key: str) -> int:
        loop = min(r["loops"], key=lambda lp: lp["instructions"])  # the innermost: the reader loop
        return loop[key] * r["num_warps"] // (r["cfg"][5] * r["cfg"][0])

    def cols(rows: list[dict]) -> list[str]:
        def rng(vals: list[int]) -> str:
            return f"{min(vals)}" if min(vals) == max(vals) else f"{min(vals)}-{max(vals)}"
        return [rng([r["regs"] for r in rows]), rng([r["warps_per_sm_by_regs"] for r in rows]),
                rng([per_pair(r, "instructions") for r in rows]), rng([per_pair(r, "float_arith") for r in rows])]

    lines = [f"| shape | rows (offline, Triton {doc['triton']}, {doc['arch']}) | registers | warps / SM by registers "
             "| warp-instructions per (pair, position) | of them fp32 arithmetic |", "|---|---|---:|---:|---:|---:|"]
    for shape in SHAPES:
        def at(rows: list[dict]) -> list[dict]:
            return [r for r in rows if f"{r['shape']}-train" == shape]
        card = [r for r in at(doc["rows"]) if tuple(r["cfg"]) == card_rows[shape]]
        lines.append(f"| {shape} | the card's row {card_rows[shape]} | " + " | ".join(cols(card)) + " |")
        for warps in (4, 8):
            rows = [r for r in at(doc["rows"]) if r["num_warps"] == warps]
            lines.append(f"| {shape} | {len(rows)} rows at {warps} warps | " + " | ".join(cols(rows)) + " |")
        card_dense = [r for r in at(dense["rows"]) if tuple(r["cfg"]) == card_rows[shape] and r.get("dense")]
        if card_dense:
            lines.append(f"| {shape} | the card's row, DENSE loop | " + " | ".join(cols(card_dense)) + " |")
    return "\n".join(lines)


#: the H100's held rows (launch_tables.json since 0b218b8, adopted from h100_fold_held_sweep_cedd221.json)
H100_HELD_ROWS = {"1B-train": (1, 8, 1, 0, 0, 0), "350M-train": (1, 8, 1, 128, 0, 0), "100M-train": (1, 4, 1, 0, 0, 0)}


def shape_rows(doc: dict, keep: Callable[[dict], bool]) -> list[dict]:
    """A regs_offline record's rows that `keep` takes, shape by shape in SHAPES' order."""
    return [r for shape in SHAPES for r in doc["rows"] if f"{r['shape']}-train" == shape and keep(r)]


def render_held_rows_offline(path: Path) -> str:
    """Every held row of one `regs_offline.py --kernels fold_rows --dense --loops --rows-fold ...`
    record (sm_90 without a GPU), per shape: registers, spills, warps an SM by registers, and per
    (pair, position) the loop's warp-instructions, fp32 arithmetic, shuffles and barriers (one
    iteration: one source and the block's 8 readers, so instructions x warps / 8)."""
    doc = json.loads(path.read_text())
    lines = [f"| shape | held row (offline, Triton {doc['triton']}, {doc['arch']}) | registers | spilled bytes "
             "| warps / SM by registers | warp-instructions per (pair, position) | of them fp32 arithmetic "
             "| shuffles | barriers |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in shape_rows(doc, lambda r: r["kernel"] == "stack_fold_held_kernel"):
        loop = min(r["loops"], key=lambda lp: lp["instructions"])
        per = {k: loop[k] * r["num_warps"] // 8 for k in ("instructions", "float_arith", "SHFL", "BAR")}
        lines.append(f"| {r['shape']}-train | {tuple(r['cfg'])} | {r['regs']} | {r['spill_stack_bytes']} | "
                     f"{r['warps_per_sm_by_regs']} | {per['instructions']} | {per['float_arith']} | {per['SHFL']} | "
                     f"{per['BAR']} |")
    return "\n".join(lines)


def render_held_offline(held_path: Path, dense_path: Path) -> str:
    """The held kernel at the H100's held rows against the reader loop's DENSE compile at the rows
    it replaced (`regs_offline.py --kernels fold_rows --dense --loops`, sm_90 without a GPU): one
    iteration of the held kernel's loop is one source and every reader of the block (8), so its
    warp-instructions per (pair, position) = instructions x warps / 8."""
    held, dense = json.loads(held_path.read_text()), json.loads(dense_path.read_text())

    def pick(doc: dict, shape: str, cfg: tuple) -> dict:
        return next(r for r in doc["rows"] if f"{r['shape']}-train" == shape and tuple(r["cfg"]) == cfg)

    def per_pair(r: dict, key: str) -> int:
        loop = min(r["loops"], key=lambda lp: lp["instructions"])
        pairs = 8 if r["kernel"] == "stack_fold_held_kernel" else r["cfg"][5] * r["cfg"][0]
        return loop[key] * r["num_warps"] // pairs

    lines = [f"| shape | kernel, row (offline, Triton {held['triton']}, {held['arch']}) | registers | spilled bytes "
             "| warps / SM by registers | warp-instructions per (pair, position) | of them fp32 arithmetic | shuffles |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for shape in SHAPES:
        for name, r in (("reader loop (DENSE)", pick(dense, shape, H100_ROWS[shape])),
                        ("held", pick(held, shape, H100_HELD_ROWS[shape]))):
            lines.append(f"| {shape} | {name}, {tuple(r['cfg'])} | {r['regs']} | {r['spill_stack_bytes']} | "
                         f"{r['warps_per_sm_by_regs']} | {per_pair(r, 'instructions')} | {per_pair(r, 'float_arith')} | "
                         f"{per_pair(r, 'SHFL')} |")
    return "\n".join(lines)


def _held_variants(path: Path, variants: list[tuple[str, Callable[[tuple], tuple]]], column: str,
                   cell: Callable[[dict, dict], object]) -> str:
    """The held kernel at the H100's held rows in two or more offline variants of a regs_offline record:
    per shape and variant (its label, and a function of the card's row giving the variant's row),
    registers, spills, warps an SM by registers, warp-instructions per (pair, position), then `column`
    (`cell(row record, its loop)`)."""
    doc = json.loads(path.read_text())
    lines = [f"| shape | held row (offline, Triton {doc['triton']}, {doc['arch']}) | registers | spilled bytes "
             f"| warps / SM by registers | warp-instructions per (pair, position) | {column} |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for shape in SHAPES:
        for name, row_of in variants:
            cfg = row_of(H100_HELD_ROWS[shape])
            r = next(r for r in doc["rows"] if f"{r['shape']}-train" == shape and tuple(r["cfg"]) == cfg)
            loop = min(r["loops"], key=lambda lp: lp["instructions"])
            lines.append(f"| {shape} | {name}, {cfg} | {r['regs']} | {r['spill_stack_bytes']} | {r['warps_per_sm_by_regs']} "
                         f"| {loop['instructions'] * r['num_warps'] // 8} | {cell(r, loop)} |")
    return "\n".join(lines)


def render_butterfly_offline(path: Path) -> str:
    """The held kernel at the H100's held rows, with Triton's per-head reduction and with the lanes'
    butterfly (the same row with loads_first 1, experiment c9a7d34; `regs_offline.py --kernels
    fold_rows --dense --loops` at that commit), and the shuffles per (pair, position)."""
    return _held_variants(path, [(name, lambda row, f=flag: row[:4] + (f, 0))
                                 for name, flag in (("Triton's reduction", 0), ("butterfly", 1))],
                          "shuffles", lambda r, loop: loop["SHFL"] * r["num_warps"] // 8)


def render_prefetch2_offline(path: Path) -> str:
    """The held kernel at the H100's held rows with one source in flight ahead (prefetch 1, the card's)
    and with two (prefetch 2, experiment f22ee2f; `regs_offline.py --kernels fold_rows --loops
    --rows-fold` at that commit), and the loop's local-memory loads / stores an iteration."""
    return _held_variants(path, [(f"prefetch {a}", lambda row, a=a: row[:2] + (a,) + row[3:]) for a in (1, 2)],
                          "loop LDL / STL", lambda r, loop: f"{loop['LDL']} / {loop['STL']}")


def render_ahead_offline(path: Path) -> str:
    """The forward at each shape's card row and one more row, as today's call (plain) and as the
    lookahead's leading call (next: each row folded for itself and the next call; `regs_offline.py
    --kernels fwd --ahead --loops`, experiment 7eb5fc8; the resuming call reads one row): registers,
    spills, warps an SM, the main loop's warp-instructions an iteration (one source row), and per call
    served (the leading call's loop serves two)."""
    rows = [r for r in json.loads(path.read_text())["rows"] if r.get("ahead") in ("plain", "next")]
    if not rows:
        raise ValueError("no lookahead rows (regs_offline.py --kernels fwd --ahead)")
    lines = ["| shape | row (block_p, num_warps, maxnreg, stages) | call | registers | spilled bytes | warps / SM by "
             "registers | loop warp-instructions an iteration | per call served |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        loop = max(r["loops"], key=lambda lp: lp["instructions"])["instructions"] * r["num_warps"]
        served = 2 if r["ahead"] == "next" else 1
        lines.append(f"| {r['shape']}-train | {tuple(r['cfg'])} | {r['ahead']} | {r['regs']} | {r['spill_stack_bytes']} "
                     f"| {r['warps_per_sm_by_regs']} | {loop} | {loop / served:.0f} |")
    return "\n".join(lines)


def _kernel_ms(row: dict, prefixes: tuple[str, ...]) -> float:
    return sum(ms for name, ms in row["kernels_ms"].items() if name.startswith(prefixes))


def render_dense(masked: list[Path], dense: list[Path]) -> str:
    """The DENSE reader loop against the masked one (`render_ab`)."""
    return render_ab(masked, dense, "masked", "DENSE")


def render_ab(base: list[Path], variant: list[Path], base_name: str, variant_name: str) -> str:
    """Two trees' fold kernels, one process per file, alternated in one device call
    (`launch_sweep.py --kinds "" --probes fold`, the base tree on PYTHONPATH first; `device_run.sh
    foldab`): per shape the fold kernel's device ms of each process's probe (the card's row), and
    the dout-reading kernels' (stack_gather + stack_fold); ratios of the means."""
    docs = {"b": [json.loads(p.read_text()) for p in base], "v": [json.loads(p.read_text()) for p in variant]}
    commits = {k: sorted({d["meta"]["commit"] for d in v}) for k, v in docs.items()}
    b, v = base_name, variant_name
    lines = [f"| shape | fold kernel ms, {b} ({', '.join(commits['b'])}) | {v} ({', '.join(commits['v'])}) "
             f"| {v} / {b} | gather + fold ms, {b} | {v} | {v} / {b} |", "|---|---|---|---:|---|---|---:|"]
    for shape in SHAPES:
        ms = {}
        for arm, group in docs.items():
            probes = [next(r for r in d["rows"] if r["shape"] == shape and r["what"] == "probe:fold") for d in group]
            ms[arm] = ([fold_ms(r) for r in probes], [_kernel_ms(r, ("stack_gather", "stack_fold")) for r in probes])
        cells = []
        for i in (0, 1):
            m, d = ms["b"][i], ms["v"][i]
            cells += [" / ".join(f"{x:.3f}" for x in m), " / ".join(f"{x:.3f}" for x in d),
                      f"{(sum(d) / len(d)) / (sum(m) / len(m)):.3f}"]
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_pair_e_ab(base: list[Path], variant: list[Path]) -> str:
    """Two trees' pair_e kernels in `device_run.sh foldab`'s alternated processes (each probe's
    `kernels_ms`): per shape pair_e_kernel's device ms of each process, and the variant's mean over
    the base's."""
    docs = {"b": [json.loads(p.read_text()) for p in base], "v": [json.loads(p.read_text()) for p in variant]}
    commits = {k: ", ".join(sorted({d["meta"]["commit"] for d in v})) for k, v in docs.items()}
    lines = [f"| shape | pair_e ms, main ({commits['b']}) | variant ({commits['v']}) | variant / main |", "|---|---|---|---:|"]
    for shape in SHAPES:
        ms = {arm: [_kernel_ms(next(r for r in d["rows"] if r["shape"] == shape and r["what"] == "probe:fold"),
                               ("pair_e",)) for d in group] for arm, group in docs.items()}
        lines.append(f"| {shape} | {' / '.join(f'{x:.3f}' for x in ms['b'])} | {' / '.join(f'{x:.3f}' for x in ms['v'])} "
                     f"| {(sum(ms['v']) / len(ms['v'])) / (sum(ms['b']) / len(ms['b'])):.2f} |")
    return "\n".join(lines)


def render_pair_e_hb_offline(base: Path, variant: Path) -> str:
    """pair_e_kernel compiled for sm_90 (`regs_offline.py --kernels pair_e --loops --pair-e-r-in-dl`,
    the step's path): main's row against the variant's rows (block_c, block_p, num_warps, HB), per
    shape registers, spilled bytes and the loop's warp-instructions per column block and step of
    block_p positions (instructions x warps / HB)."""
    lines = ["| shape | tree, row | registers | spilled bytes | warps / SM by registers "
             "| warp-instructions per column block and step |", "|---|---|---:|---:|---:|---:|"]
    docs = [("main", json.loads(base.read_text())), ("variant", json.loads(variant.read_text()))]
    for shape in SHAPES:
        for name, doc in docs:
            for r in doc["rows"]:
                if f"{r['shape']}-train" != shape:
                    continue
                hb = r["cfg"][3] if len(r["cfg"]) > 3 else 1
                loop = min(r["loops"], key=lambda lp: lp["instructions"])
                lines.append(f"| {shape} | {name}, {tuple(r['cfg'])} | {r['regs']} | {r['spill_stack_bytes']} | "
                             f"{r['warps_per_sm_by_regs']} | {loop['instructions'] * r['num_warps'] // hb} |")
    return "\n".join(lines)


def dot_per_source(r: dict) -> tuple[int, int]:
    """Warp-instructions per (source, position) of a fold row compiled offline (`regs_offline.py
    --kernels fold_rows --dense --loops`): the held kernel's source loop x its warps; the dot
    kernel's two passes over the heads (each its tile loop x the head's tiles, plus the pass's own
    instructions) x its warps over its chunk of sources. Second: the same per source the step's
    folds hold (the dot kernel's last chunk of each fold padded to JC: sum ceil(jf / JC) JC / sum jf)."""
    from mhar_probe.bench.routing import SHAPES as BENCH_SHAPES
    from mhar_probe.kernels.route.bwd_fold import backward_plan, model_layout

    d, L = BENCH_SHAPES[f"{r['shape']}-train"][:2]  # the step's folds (blocks of 8 readers), the head width
    spans = [(int(lp["start"], 16), int(lp["end"], 16), lp["instructions"]) for lp in r["loops"]]
    if r["kernel"] == "stack_fold_held_kernel":
        per = min(spans, key=lambda x: x[2])[2] * r["num_warps"]
        return per, per
    km, jc = d // 8, r["cfg"][5]
    tiles = -(-km // min(32, km & -km))  # the kernel's tiles of a head: 32 columns at the three shapes
    # a tile loop lies inside a pass's loop over the heads
    inner = [x for x in spans if any(o != x and o[0] <= x[0] and x[1] <= o[1] for o in spans)]
    outer = [x for x in spans if x not in inner]
    total = 0
    for o in outer:
        ins = [i[2] for i in inner if o[0] <= i[0] and i[1] <= o[1]]
        total += 8 * r["num_warps"] * (o[2] - sum(ins) + tiles * sum(ins))
    folds = [x.hi for x in backward_plan(model_layout(2 * L + 1), 2 * L, 8) if x.kind == "fold"]
    padded = sum(-(-jf // jc) * jc for jf in folds) / sum(folds)
    return round(total / jc), round(total / jc * padded)


def render_dot_offline(path: Path) -> str:
    """The dot fold's rows against the held kernel's, compiled offline: per shape and row, registers,
    spilled bytes, warps an SM by registers and `dot_per_source`'s warp-instructions per (source,
    position), per source row and per source of the step's folds."""
    doc = json.loads(path.read_text())
    lines = [f"| shape | kernel, row (offline, Triton {doc['triton']}, {doc['arch']}) | registers | spilled bytes | "
             "warps / SM by registers | warp-instructions per (source, position): a row of the chunk | "
             "a source of the step's folds |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in shape_rows(doc, lambda r: r["kernel"] != "stack_fold_kernel"):
        per, step = dot_per_source(r)
        name = "held" if r["kernel"] == "stack_fold_held_kernel" else "dot"
        lines.append(f"| {r['shape']}-train | {name}, {tuple(r['cfg'])} | {r['regs']} | {r['spill_stack_bytes']} | "
                     f"{r['warps_per_sm_by_regs']} | {per} | {step} |")
    return "\n".join(lines)


def timed_fold_name(row: dict) -> str:
    """What a fold sweep row ran, by the kernel its profile names: `held` (the card's row),
    `held, pipelined` (a held row's prefetch 2: the source loop under Triton's pipeliner, 62336e5's
    tree on; 3: `..., narrow tile a source ahead`, 4: `..., 2 stages`, e165915's tree, deleted), or
    `dot, chunks of JC[, S stages][, w held]` (62336e5's `stack_fold_dot_kernel`, deleted)."""
    cfg = row["cfg"]
    if any(k.startswith("stack_fold_dot") for k in row["kernels_ms"]):
        return (f"dot, {cfg[1]} warps, chunks of {cfg[5]}" + (f", {cfg[2] + 1} stages" if cfg[2] else "")
                + (", w held" if cfg[4] else ""))
    return {2: "held, pipelined", 3: "held, pipelined, narrow tile a source ahead",
            4: "held, pipelined, 2 stages"}.get(cfg[2], "held")


def render_pipe_dot(fold_path: Path, pair_e_path: Path | None = None) -> str:
    """One sweep call's timing of the fold rows (the pipelined held kernel and the dot kernel) and
    of pair_e's two heads a program: per shape and row its kernel's device ms (median of the
    sweep's profiled runs) over the card's row in the same process (the first row each kind swept),
    and its gradients' largest relative difference from the card's row. Without `pair_e_path`: the
    fold rows alone (mode `held-stages`)."""
    lines = ["| shape | kernel | row | ms | x the card's row | gradients vs the card's row |",
             "|---|---|---|---:|---:|---:|"]
    kinds = [(fold_path, "fold", ("stack_fold",))] + ([(pair_e_path, "pair_e", ("pair_e",))] if pair_e_path else [])
    for shape in SHAPES:
        for path, kind, prefix in kinds:
            rows = [r for r in json.loads(path.read_text())["rows"] if r["shape"] == shape and r["what"] == f"sweep:{kind}"]
            if not rows:  # a sweep of some shapes
                continue
            card = _kernel_ms(rows[0], prefix)
            for i, r in enumerate(sorted(rows[1:], key=lambda r: _kernel_ms(r, prefix))):
                name = timed_fold_name(r) if kind == "fold" else f"pair_e, {r['cfg'][3]} head{'s' if r['cfg'][3] > 1 else ''} a program"
                if i == 0:
                    first = timed_fold_name(rows[0]) if kind == "fold" else "pair_e, 1 head a program"
                    lines.append(f"| {shape} | {first} (the card's row) | {tuple(rows[0]['cfg'])} | {card:.3f} | 1.00 | - |")
                ms = _kernel_ms(r, prefix)
                lines.append(f"| {shape} | {name} | {tuple(r['cfg'])} | {ms:.3f} | {ms / card:.2f} | {r['grad_rel_err']:.1e} |")
    return "\n".join(lines)


def render_stored_r_offline(paths: list[Path]) -> str:
    """Two trees' regs_offline records, each as `--kernels fwd --builtin-only --ahead --loops` and
    `--kernels fold_rows --dense --loops` (the files named *_base_* are the base tree's): per shape,
    kernel, row and call (the forward's plain, leading and resuming calls; the held fold's rows),
    registers, spilled bytes and the main loop's warp-instructions and barriers per iteration
    (each row's largest loop), base -> variant."""
    docs = {}
    for p in paths:
        kind = "fwd" if "_fwd_" in p.name else "fold"
        docs[kind, "_base_" in p.name] = json.loads(p.read_text())["rows"]
    if len(docs) != 4:
        raise ValueError("give the fwd and fold records of the base tree (*_base_*) and of the variant")
    lines = ["| shape | kernel | row | call | registers | spilled bytes | loop warp-instructions an iteration "
             "| change | barriers an iteration |", "|---|---|---|---|---|---|---|---:|---|"]
    for kind in ("fwd", "fold"):
        base, new = docs[kind, True], docs[kind, False]
        for b, v in zip(base, new):
            if (b["shape"], b["cfg"], b.get("ahead")) != (v["shape"], v["cfg"], v.get("ahead")):
                raise ValueError("the two records' rows differ")
            if kind == "fold" and "held" not in b["kernel"]:
                continue
            lb, lv = (max(r["loops"], key=lambda lp: lp["instructions"]) for r in (b, v))
            name = "forward" if kind == "fwd" else "held fold"
            lines.append(f"| {b['shape']}-train | {name} | {tuple(b['cfg'])} | {b.get('ahead', '-')} "
                         f"| {b['regs']} -> {v['regs']} | {b['spill_stack_bytes']} -> {v['spill_stack_bytes']} "
                         f"| {lb['instructions']} -> {lv['instructions']} "
                         f"| {lv['instructions'] / lb['instructions'] - 1:+.1%} | {lb['BAR']} -> {lv['BAR']} |")
    return "\n".join(lines)


def render_fwd_ab(base: list[Path], variant: list[Path]) -> str:
    """Two trees' forwards, one process per file, base and variant alternated in one device call
    (`launch_sweep.py --kinds fwd`, the base tree on PYTHONPATH first; `device_run.sh fwdab`): per
    shape the forward kernels' device ms (the lookahead's pairs) at the card's row in each process
    (each file's first fwd row), their ratio of means, and the fastest row each tree's first
    process timed (at least 2% faster than its card's row, else "-")."""
    docs = {"b": [json.loads(p.read_text()) for p in base], "v": [json.loads(p.read_text()) for p in variant]}
    commits = {k: ", ".join(sorted({d["meta"]["commit"] for d in v})) for k, v in docs.items()}
    lines = [f"| shape | card's row | forward ms, base ({commits['b']}) | variant ({commits['v']}) | variant / base "
             "| base's fastest row (ms) | variant's fastest row (ms) |", "|---|---|---|---|---:|---|---|"]
    for shape in SHAPES:
        ms, best, card = {}, {}, None
        for arm, group in docs.items():
            rows = [[r for r in d["rows"] if r["shape"] == shape and r["what"] == "sweep:fwd"] for d in group]
            card = tuple(rows[0][0]["cfg"])
            if any(tuple(r[0]["cfg"]) != card for r in rows):
                raise ValueError(f"{shape}: the processes' first rows differ")
            ms[arm] = [r[0]["judged_ms"] for r in rows]
            fastest = min(rows[0], key=lambda r: r["judged_ms"])
            best[arm] = (f"{tuple(fastest['cfg'])} ({fastest['judged_ms']:.3f})"
                         if fastest["judged_ms"] < 0.98 * rows[0][0]["judged_ms"] else "-")
        b, v = ms["b"], ms["v"]
        lines.append(f"| {shape} | {card} | {' / '.join(f'{x:.3f}' for x in b)} | {' / '.join(f'{x:.3f}' for x in v)} "
                     f"| {(sum(v) / len(v)) / (sum(b) / len(b)):.3f} | {best['b']} | {best['v']} |")
    return "\n".join(lines)


def render_steps(paths: list[Path]) -> str:
    """Training steps (`run_on_device.sh fold`: train_throughput.py --methods baseline mhar --profile,
    one process per preset), one row per file: tokens/s, MHAR / baseline over the rounds, peak memory,
    and the fold kernel's ms (either kernel) in the profiled MHAR step."""
    lines = ["| preset | tree | card | baseline tokens/s | MHAR tokens/s | MHAR / baseline (rounds' range) "
             "| peak memory / baseline | fold kernel ms in the MHAR step | MHAR step device ms |",
             "|---|---|---|---:|---:|---|---:|---:|---:|"]
    for path in paths:
        doc = json.loads(path.read_text())
        arms = {r["arm"]: r for r in doc["results"]}
        base, mhar = arms["baseline"], arms["mhar"]
        fold = sum(k[0] for k in mhar["profile"]["top_kernels"] if k[2].startswith("stack_fold"))
        lo, hi = mhar["vs_baseline_range"]
        vocab = doc["meta"]["args"].get("vocab")
        preset = mhar["preset"] + (f", {vocab:,} words" if vocab and vocab != PRESET_VOCAB else "")
        lines.append(f"| {preset} | {doc['meta']['commit']} | {doc['meta']['device']} | "
                     f"{base['tokens_per_s']:,.0f} | {mhar['tokens_per_s']:,.0f} | {mhar['vs_baseline']:.3f} "
                     f"({lo:.3f}-{hi:.3f}) | {mhar['memory_vs_baseline']:.3f}x | {fold:.2f} | "
                     f"{mhar['profile']['device_ms_events']:.2f} |")
    return "\n".join(lines)


def render_lookahead(paths: list[Path]) -> str:
    """The forward's lookahead in the training step (`VARIANTS=forward=... run_on_device.sh fold`:
    baseline, MHAR and MHAR with the other KernelConfig.forward interleaved in one process per preset):
    per preset and MHAR arm, its forward, MHAR / baseline over the rounds, peak memory, the forward
    kernels' and the routing category's ms in the profiled step, and the step's device ms."""
    lines = ["| preset | tree | card | forward | MHAR / baseline (rounds' range) | peak memory / baseline "
             "| forward kernels ms | routing ms | MHAR step device ms |", "|---|---|---|---|---|---:|---:|---:|---:|"]
    for path in paths:
        doc = json.loads(path.read_text())
        vocab = doc["meta"]["args"].get("vocab")
        for r in doc["results"]:
            if r["method"] == "baseline":
                continue
            prof = r["profile"]
            fwd = sum(k[0] for k in prof["top_kernels"] if k[2].startswith("route_fwd"))
            lo, hi = r["vs_baseline_range"]
            preset = r["preset"] + (f", {vocab:,} words" if vocab and vocab != PRESET_VOCAB else "")
            forward = r.get("routing_forward") or "plain"  # files made before the lookahead ran the plain forward
            lines.append(f"| {preset} | {doc['meta']['commit']} | {doc['meta']['device']} | {forward} "
                         f"| {r['vs_baseline']:.3f} ({lo:.3f}-{hi:.3f}) | {r['memory_vs_baseline']:.3f}x | {fwd:.2f} "
                         f"| {prof['categories_ms']['routing']:.2f} | {prof['device_ms_events']:.2f} |")
    return "\n".join(lines)


def render_dense_step(masked: Path, dense: Path) -> str:
    """The same A/B inside the training step (train_throughput.py --presets 1b --methods baseline mhar
    --profile, one process per tree in one call): MHAR / baseline and the step's fold kernel ms."""
    lines = ["| tree | card | MHAR / baseline (rounds' range) | stack_fold_kernel ms in the MHAR step | MHAR step device ms |",
             "|---|---|---|---:|---:|"]
    for name, path in (("masked", masked), ("DENSE", dense)):
        doc = json.loads(path.read_text())
        mhar = next(r for r in doc["results"] if r["arm"] == "mhar")
        fold = sum(k[0] for k in mhar["profile"]["top_kernels"] if k[2] == KERNEL)
        lo, hi = mhar["vs_baseline_range"]
        lines.append(f"| {name} ({doc['meta']['commit']}) | {doc['meta']['device']} | {mhar['vs_baseline']:.3f} "
                     f"({lo:.3f}-{hi:.3f}) | {fold:.2f} | {mhar['profile']['device_ms_events']:.2f} |")
    return "\n".join(lines)


def render_fwd_rows(path: Path) -> str:
    """A forward sweep (`launch_sweep.py --kinds fwd`): each row tried, route_fwd's device ms, over the
    card's row (the first tried) in the same process, and its gradients' largest difference from the
    card's row's."""
    rows = [r for r in json.loads(path.read_text())["rows"] if r.get("what") == "sweep:fwd"]
    lines = ["| shape | row (block_p, num_warps, maxnreg, stages, sources) | route_fwd ms | x the card's row "
             "| gradients: largest difference |", "|---|---|---:|---:|---:|"]
    for shape in SHAPES:
        tried = [r for r in rows if r["shape"] == shape]
        for r in tried:
            ms = _kernel_ms(r, ("route_fwd",))
            lines.append(f"| {shape} | {tuple(r['cfg'])}{' (the card' + chr(39) + 's)' if r is tried[0] else ''} | "
                         f"{ms:.3f} | {ms / _kernel_ms(tried[0], ('route_fwd',)):.3f} | {r['grad_rel_err']:.1e} |")
    return "\n".join(lines)


def render_fwd_offline(path: Path) -> str:
    """The one-tile forward compiled offline (`regs_offline.py --kernels fwd --loops --rows-fwd`): per
    row, registers, warps an SM by registers, its loop's instructions per iteration and the
    warp-instructions per source row (iteration x warps / sources). 1B's two-tile kernel is left out:
    it folds one source an iteration whatever the row says."""
    doc = json.loads(path.read_text())
    lines = [f"| shape | row (block_p, num_warps, maxnreg, stages, sources; offline, Triton {doc['triton']}, "
             f"{doc['arch']}) | registers | warps / SM by registers | loop instructions an iteration "
             "| warp-instructions per source |", "|---|---|---:|---:|---:|---:|"]
    for r in doc["rows"]:
        if r["kernel"] != "route_fwd_kernel":
            continue
        loop = max(lp["instructions"] for lp in r["loops"])
        cfg = r["cfg"] + [1] * (5 - len(r["cfg"]))
        lines.append(f"| {r['shape']}-train | {tuple(cfg)} | {r['regs']} | {r['warps_per_sm_by_regs']} | {loop} | "
                     f"{loop * cfg[1] / cfg[4]:.0f} |")
    return "\n".join(lines)


def render_fwd_caps(offline: Path, sweep: Path) -> str:
    """Forward rows compiled offline (`regs_offline.py --kernels fwd --loops --rows-fwd`) beside the same
    rows timed on a card (`launch_sweep.py --kinds fwd --rows-fwd`): per shape and row, registers, spill
    bytes, warps an SM by registers, the source loop's instructions and local-memory loads / stores an
    iteration (offline), then route_fwd's device ms and its ratio to the card's row (the sweep's first)."""
    doc = json.loads(offline.read_text())
    comp = {(r["shape"] + "-train", tuple(r["cfg"])): r for r in doc["rows"]}
    rows = [r for r in json.loads(sweep.read_text())["rows"] if r.get("what") == "sweep:fwd"]
    lines = [f"| shape | row (block_p, num_warps, maxnreg, stages) | registers (offline, Triton {doc['triton']}) | "
             "spill bytes | warps / SM by registers | loop instructions | loop LDL / STL | route_fwd ms on the card "
             "| x the card's row |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for shape in SHAPES:
        tried = [r for r in rows if r["shape"] == shape]
        for r in tried:
            c = comp[shape, tuple(r["cfg"])]
            lp = max(c["loops"], key=lambda x: x["instructions"])
            ms = _kernel_ms(r, ("route_fwd",))
            lines.append(f"| {shape} | {tuple(r['cfg'])}{' (the card' + chr(39) + 's)' if r is tried[0] else ''} | "
                         f"{c['regs']} | {c['spill_stack_bytes']} | {c['warps_per_sm_by_regs']} | {lp['instructions']} | "
                         f"{lp['LDL']} / {lp['STL']} | {ms:.3f} | {ms / _kernel_ms(tried[0], ('route_fwd',)):.3f} |")
    return "\n".join(lines)


def render_backends(paths: list[Path]) -> str:
    """The kernel table (`mhar bench routing --graph`, 16-bit chains, all 2L+1 calls of one
    microbatch forward and backward), one process per file: per shape and H, triton's graph-replay
    ms over the byte floor, and each other backend's graph-replay ms and its ratio to triton's;
    extra peak memory in GiB (triton / compile / eager / FLA)."""
    lines = ["| shape | H | triton ms | / floor | compile ms | compile / triton | eager ms | eager / triton "
             "| FLA ms | FLA / triton | extra peak GiB: triton / compile / eager / FLA |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for path in paths:
        rows = json.loads(path.read_text())["rows"]
        for shape, H in dict.fromkeys((r["shape"], r["H"]) for r in rows):
            by = {r["backend"]: r for r in rows if (r["shape"], r["H"]) == (shape, H)}
            tri = by["triton"]["graph_fwdbwd_ms"]
            cell = {b: (f"{by[b]['graph_fwdbwd_ms']:.2f}", f"**{by[b]['graph_fwdbwd_ms'] / tri:.1f}x**")
                    if b in by else ("", "") for b in ("compile", "eager", "fla")}
            peak = " / ".join(f"{by[b]['peak_extra_gib']:.2f}" if b in by else "-"
                              for b in ("triton", "compile", "eager", "fla"))
            lines.append(f"| {shape} | {H} | {tri:.3f} | {tri / by['triton']['floor_ms']:.2f}x | "
                         f"{' | '.join(x for b in ('compile', 'eager', 'fla') for x in cell[b])} | {peak} |")
    return "\n".join(lines)


#: the H100's fold rows at 15a4c8d (launch_tables.json, devices -> "NVIDIA H100 80GB HBM3")
H100_ROWS = {"1B-train": (1, 2, 0, 0, 1, 2), "350M-train": (1, 2, 2, 0, 1, 2), "100M-train": (1, 1, 2, 0, 0, 2)}


#: mode -> renderer(files, masked A/B files, variant A/B files)
RENDER = {
    "profile": lambda f, a, b: render_profile(f),
    "rows": lambda f, a, b: render_rows(f),
    "offline": lambda f, a, b: render_offline(f[0], H100_ROWS, f[1] if len(f) > 1 else None),
    "dense": lambda f, a, b: render_dense(a, b),
    "dense-step": lambda f, a, b: render_dense_step(*f),
    "merge": lambda f, a, b: render_ab(a, b, "held", "merged sums"),
    "steps": lambda f, a, b: render_steps(f),
    "ahead-offline": lambda f, a, b: render_ahead_offline(f[0]),
    "lookahead": lambda f, a, b: render_lookahead(f),
    "held-offline": lambda f, a, b: render_held_offline(*f),
    "held-rows-offline": lambda f, a, b: render_held_rows_offline(f[0]),
    "butterfly-offline": lambda f, a, b: render_butterfly_offline(f[0]),
    "prefetch2-offline": lambda f, a, b: render_prefetch2_offline(f[0]),
    "fwd-profile": lambda f, a, b: render_profile(f, "forward launch"),
    "pair-e-profile": lambda f, a, b: render_profile(f, "pair_e launch"),
    "fwd-rows": lambda f, a, b: render_fwd_rows(f[0]),
    "fwd-offline": lambda f, a, b: render_fwd_offline(f[0]),
    "fwd-caps": lambda f, a, b: render_fwd_caps(*f),
    "backends": lambda f, a, b: render_backends(f),
    "fwd-ab": lambda f, a, b: render_fwd_ab(a, [p for p in f if p not in a]),
    "fold-ab": lambda f, a, b: render_ab(a, [p for p in f if p not in a], "base", "variant"),
    "pair-e-ab": lambda f, a, b: render_pair_e_ab(a, [p for p in f if p not in a]),
    "pair-e-hb-offline": lambda f, a, b: render_pair_e_hb_offline(*f),
    "dot-offline": lambda f, a, b: render_dot_offline(f[0]),
    "pipe-dot": lambda f, a, b: render_pipe_dot(*f),
    "held-stages": lambda f, a, b: render_pipe_dot(f[0]),
    "stored-r-offline": lambda f, a, b: render_stored_r_offline(f),
}
#: mode -> (how many files it takes, what they are), for the modes that take a fixed number
FILES = {
    "dense-step": (2, "two files, the masked loop's step then DENSE's"),
    "prefetch2-offline": (1, "one file, the prefetch-2 experiment's regs_offline record"),
    "ahead-offline": (1, "one file, the lookahead experiment's regs_offline record (--kernels fwd --ahead)"),
    "butterfly-offline": (1, "one file, the butterfly experiment's regs_offline record"),
    "held-offline": (2, "two files, the held rows' regs_offline file, then the --dense one"),
    "held-rows-offline": (1, "one file, a regs_offline.py --kernels fold_rows --dense --loops record"),
    "pair-e-hb-offline": (2, "two files, main's regs_offline.py --kernels pair_e record, then the variant's"),
    "dot-offline": (1, "one file, regs_offline.py's --kernels fold_rows --dense --loops record with dot rows"),
    "pipe-dot": (2, "two files, the fold rows' launch_sweep.py --out record, then pair_e's"),
    "held-stages": (1, "one file, the held rows' launch_sweep.py --out record (prefetch 1-4)"),
    "fwd-rows": (1, "one file, the forward's launch_sweep.py --out record"),
    "fwd-offline": (1, "one file, regs_offline.py's --kernels fwd record"),
    "stored-r-offline": (4, "four files, regs_offline.py's fwd and fold records of the base tree (*_base_*) "
                            "and of the variant"),
    "fwd-caps": (2, "two files, regs_offline.py's --kernels fwd --rows-fwd record, then the card's "
                    "launch_sweep.py --out record of the same rows"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=list(RENDER))
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    missing = [str(p) for p in args.files if not p.is_file()]
    if missing:
        ap.error(f"no such file: {', '.join(missing)}")
    masked = [p for p in args.files if "_ab_base_" in p.name]
    dense = [p for p in args.files if f"_ab_{'merge' if args.what == 'merge' else 'dense'}_" in p.name]
    if args.what == "dense" and not (masked and dense):
        ap.error("dense: give the masked loop's *_ab_base_* files and DENSE's *_ab_dense_* files")
    if args.what in ("fwd-ab", "fold-ab", "pair-e-ab") and not (masked and len(masked) < len(args.files)):
        ap.error(f"{args.what}: give the base tree's *_ab_base_* files and the variant's *_ab_<variant>_* files")
    if args.what == "merge" and not (masked and dense):
        ap.error("merge: give the held kernel's *_ab_base_* files and the merged sums' *_ab_merge_* files")
    if args.what in FILES and len(args.files) != FILES[args.what][0]:
        ap.error(f"{args.what}: {FILES[args.what][1]}")
    if args.what == "offline" and len(args.files) > 2:
        ap.error("offline: the wide rows' regs_offline file, then optionally the --dense one")
    try:
        table = RENDER[args.what](args.files, masked, dense)
    except (KeyError, StopIteration, ValueError, IndexError) as exc:
        ap.error(f"{args.what}: the files are not what this table reads ({type(exc).__name__}: {exc})")
    print(table)


if __name__ == "__main__":
    main()
