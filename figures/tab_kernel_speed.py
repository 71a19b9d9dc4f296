"""Table kernelspeed: routing wall-clock per microbatch (all routing calls, forward+backward)
per backend and the speedup of the fused kernels over torch.compile, from
benchmarks/kernels/*.json (bench_routing.py). Where the file has CUDA-graph replay times
(`--graph`: the device's time without host launch cost), the fused kernels' and their speedup
over compile by that measure follow. Where several files time the same card, shape and H, the
newest run (its `meta.date`, then its file name) gives the row: a table of one row per card, shape
and H, each from the run its note names."""

from __future__ import annotations

from pathlib import Path

from mhar_probe.bench.routing import SHAPES

from .benchfiles import kernel_files
from .registry import Output, Skip, generator
from .tables import Cell, Table

NEEDS = "a kernel benchmark file on a GPU: python benchmarks/kernels/bench_routing.py --out benchmarks/kernels/results.json"
COLUMNS = ["Shape", "H", "eager (ms)", "torch.compile (ms)", "Fused Triton (ms)", "Speedup vs compile",
           "Fused Triton, graph (ms)", "Speedup, graph", "Floor (ms)", "Device"]


def _ms(row: dict, key: str = "fwdbwd_ms") -> float | None:
    if row.get("oom"):
        return None
    return row.get(key, row.get("microbatch_ms") if key == "fwdbwd_ms" else None)


def _newest_runs(files: list[tuple]) -> dict[tuple, object]:
    """(card, shape, H) -> the path of the newest file timing it (by `meta.date`, then file name)."""
    newest: dict[tuple, tuple] = {}
    for path, doc in files:
        meta = doc.get("meta", {})
        rank = (str(meta.get("date", "")), path.name)
        for r in doc["rows"]:
            key = (str(meta.get("device", "?")), r["shape"], r.get("H"))
            if key not in newest or rank > newest[key][0]:
                newest[key] = (rank, path)
    return {key: path for key, (_, path) in newest.items()}


@generator("table_kernel_speed", kind="table", paper_ref="tab:kernelspeed", needs=NEEDS)
def make(ctx) -> list[Output]:
    files = kernel_files(ctx.benchmark_files("kernels") + ctx.benchmark_files())
    if not files:
        raise Skip("no routing-kernel benchmark files found", [NEEDS])
    # files that time triton alone (against its own variants, FLA, or at the training microbatches)
    # give no speedup: where another file has the references, they stay out of this table
    compared = [(p, d) for p, d in files if any(r["backend"] in ("eager", "compile") for r in d["rows"])]
    files = compared or files
    t = Table("table_kernel_speed", "Routing per microbatch, forward+backward (ms) and fused-kernel speedup", COLUMNS)
    speedups, graph_speedups = {}, {}
    newest = _newest_runs(files)
    groups: list[tuple[str, str, object, dict, Path]] = []  # (card, shape, H, backend -> row, file)
    for path, doc in files:
        device = str(doc.get("meta", {}).get("device", "?"))
        cells: dict[tuple, dict[str, dict]] = {}
        for r in doc["rows"]:
            if newest.get((device, r["shape"], r.get("H"))) == path:
                cells.setdefault((r["shape"], r.get("H")), {})[r["backend"]] = r
        if cells:
            t.notes.append(f"{device}, {', '.join(f'{s} H={h}' for s, h in cells)}: {path.name} "
                           f"({doc.get('meta', {}).get('date', 'undated')}).")
        groups += [(device, shape, H, by, path) for (shape, H), by in cells.items()]
    # per card (in the order first met), by model size, then H (the benchmark's shapes; others after, by name)
    cards = list(dict.fromkeys(g[0] for g in groups))
    size = {name: i for i, name in enumerate(SHAPES)}  # the benchmark's shapes, smallest first
    groups.sort(key=lambda g: (cards.index(g[0]), size.get(g[1], len(size)), g[1], -1 if g[2] is None else g[2]))
    for i, (device, shape, H, by, path) in enumerate(groups):
        ms = {b: _ms(r) for b, r in by.items()}
        speed = ms["compile"] / ms["triton"] if ms.get("compile") and ms.get("triton") else None
        gms = {b: _ms(r, "graph_fwdbwd_ms") for b, r in by.items()}
        gspeed = gms["compile"] / gms["triton"] if gms.get("compile") and gms.get("triton") else None
        floor = next((r.get("floor_ms") for r in by.values() if r.get("floor_ms")), None)
        t.add([Cell(shape, shape), Cell(str(H if H is not None else "-"), H),
               *[Cell.num(ms.get(b), "{:.2f}") if not by.get(b, {}).get("oom") else Cell("OOM")
                 for b in ("eager", "compile", "triton")],
               Cell.num(speed, "{:.1f}", suffix="x", bold=True), Cell.num(gms.get("triton"), "{:.2f}"),
               Cell.num(gspeed, "{:.1f}", suffix="x"), Cell.num(floor, "{:.2f}"), Cell(device, device)],
              rule_before=i > 0 and device != groups[i - 1][0])
        speedups[(path.name, shape, H)] = speed
        graph_speedups[(path.name, shape, H)] = gspeed
    for i, r in enumerate(ctx.paper["kernel_speed"]["rows"]):
        t.add([Cell(f"{r['shape']} (paper)", r["shape"]), Cell("-"), Cell("-"), Cell.num(r["compile_ms"], "{:.1f}"),
               Cell.num(r["triton_ms"], "{:.1f}"), Cell.num(r["speedup"], "{:.1f}", suffix="x"), Cell("-"),
               Cell("-"), Cell("-"), Cell("H100")], source="paper", rule_before=i == 0)
    t.notes.append("Paper: " + ctx.paper["kernel_speed"]["what"] + f" ({ctx.paper['kernel_speed']['ref']}).")
    return [Output("table_kernel_speed", ctx.write_table(t),
                   dict(table=t, speedups=speedups, graph_speedups=graph_speedups))]
