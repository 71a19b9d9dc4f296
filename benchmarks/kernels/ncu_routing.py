"""Hardware counters of the routing kernels (Nsight Compute), for "where the time goes".

Two modes in one file:

    python benchmarks/kernels/ncu_routing.py --shape 1B-train --heads 8 --dtype mixed
        runs the model-order chain (append source s, route over [0, s+1); fwd then bwd) twice to
        warm up, then once between cudaProfilerStart/Stop: the run `ncu --profile-from-start off`
        records.
    python benchmarks/kernels/ncu_routing.py --summarise a.csv [b.csv ...] --out summary.json
        reads `ncu --csv --page details` files and prints, per profiled kernel, its duration,
        DRAM throughput (and % of peak), achieved occupancy, registers per thread and the largest
        warp stall reasons (cycles per issued instruction).

`device_run.sh ncu` runs both on the GPU machine (`--clock-control none`: the clocks stay as
the device tool sets them). Each kernel instance is replayed once per counter pass, so only a
few instances late in the chain are profiled (`--launch-skip/--launch-count`).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections import defaultdict


def run_chain(shape: str, heads: int, dtype: str, launch_table: str | None = None) -> None:
    import torch

    import mhar_probe.bench.routing as bench
    from mhar_probe.kernels import KernelConfig
    from mhar_probe.model.routing import get_backend

    bench.DTYPE = {"mixed": "mixed", "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    d, L, B, T = bench.SHAPES[shape]
    xs, qs, gs, douts = bench.make_inputs(d, L, B, T)
    be = get_backend("triton", KernelConfig(launch_table=launch_table))
    for i in range(3):
        if i == 2:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        outs = bench.chain_fwd(be, xs, qs, gs, heads)
        torch.autograd.backward(outs, douts)
        for t in xs + qs + gs:
            t.grad = None
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
KEEP = {  # ncu metric name -> short label
    "Duration": "duration", "DRAM Throughput": "dram_pct", "Memory Throughput": "mem_pct",
    "Achieved Occupancy": "occupancy_pct", "Theoretical Occupancy": "theoretical_occupancy_pct",
    "Registers Per Thread": "registers", "Block Size": "block", "Grid Size": "grid",
    "Warp Cycles Per Issued Instruction": "cycles_per_issue", "Compute (SM) Throughput": "sm_pct",
    "L2 Hit Rate": "l2_hit_pct", "L1/TEX Hit Rate": "l1_hit_pct", "Executed Ipc Active": "ipc",
    "Eligible Warps Per Scheduler": "eligible_warps_per_scheduler", "Active Warps Per Scheduler": "active_warps_per_scheduler",
    "smsp__inst_executed.sum": "warp_instructions",
    "Issue Slots Busy": "issue_busy_pct", "dram__bytes.sum.per_second": "dram_bytes_per_s",
    "lts__t_bytes.sum.per_second": "l2_bytes_per_s", "l1tex__t_bytes.sum.per_second": "l1_bytes_per_s",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed": "l1_pct",
}


def summarise(paths: list[str]) -> list[dict]:
    rows: dict[tuple[str, str], dict] = {}
    for path in paths:
        text = open(path).read()
        start = text.find('"ID"')
        if start < 0:
            raise SystemExit(f"{path}: no ncu CSV table in it (did ncu profile any kernel?)")
        for r in csv.DictReader(text[start:].splitlines()):
            key = (path, r["ID"])
            rec = rows.setdefault(key, dict(file=path, id=int(r["ID"]), kernel=r["Kernel Name"].split("(")[0],
                                            stalls=defaultdict(float)))
            name, unit, value = r["Metric Name"], r.get("Metric Unit", ""), r["Metric Value"]
            try:
                num = float(value.replace(",", ""))
            except ValueError:
                continue
            m = STALL.fullmatch(name)
            if m:
                rec["stalls"][m.group(1)] = num
            elif name == "Memory Throughput" and unit != "%":
                continue  # the Memory Workload section's byte/s of the same name; SpeedOfLight's is the %
            elif name in KEEP:
                rec[KEEP[name]] = num
                if name == "Duration":
                    rec["duration_unit"] = unit
    out = []
    for rec in rows.values():
        top = sorted(rec.pop("stalls").items(), key=lambda kv: -kv[1])[:6]
        rec["top_stalls"] = [[k, round(v, 2)] for k, v in top]
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    from mhar_probe.bench.routing import SHAPES

    ap.add_argument("--shape", default="1B-train", choices=list(SHAPES))
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dtype", default="mixed", choices=["mixed", "bf16", "fp32"])
    ap.add_argument("--launch-table", default=None, help="a launch-table file laid over the built-in one")
    ap.add_argument("--summarise", nargs="*")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.summarise is None:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("ncu_routing.py runs the routing chain under Nsight Compute on a CUDA GPU; "
                             "none is visible here (--summarise reads its CSV files anywhere)")
        run_chain(args.shape, args.heads, args.dtype, args.launch_table)
        return
    recs = summarise(args.summarise)
    for r in recs:
        stalls = ", ".join(f"{k} {v}" for k, v in r["top_stalls"])
        print(f"{r['file'].rsplit('/', 1)[-1]:>22} {r['kernel'][:24]:24} {r.get('duration', float('nan')):9.1f} "
              f"{r.get('duration_unit', '')}  dram {r.get('dram_pct', float('nan')):5.1f}%  "
              f"occ {r.get('occupancy_pct', float('nan')):5.1f}% of {r.get('theoretical_occupancy_pct', float('nan')):5.1f}%  "
              f"regs {r.get('registers', float('nan')):4.0f}  cyc/issue {r.get('cycles_per_issue', float('nan')):5.1f}  "
              f"issue {r.get('issue_busy_pct', float('nan')):5.1f}%  L2 {r.get('l2_pct', float('nan')):5.1f}%  "
              f"L1 {r.get('l1_pct', float('nan')):5.1f}%  stalls: {stalls}")
    if args.out:
        json.dump(recs, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
