"""Table cost (and maincost): training throughput relative to the same-run baseline and peak
memory, per preset and routing backend, from benchmarks/train_throughput/train_throughput.py result files.

A file may run methods several times (`--methods baseline mhar baseline mhar`) and kernel variants
(`mhar/padded`): each row is compared with the nearest baseline run before it (pairwise), and a
variant is labelled with its kernels. A method over the shared source stack is labelled with the
stack backward it ran (the row's `routing_backward`, files since 2026-11-26: `--routing-backward
fold gather` times both in one file, whose rows share the method's name and differ by arm)."""

from __future__ import annotations

from mhar_probe.model.methods import REPLACEMENT_METHODS, ROUTED_METHODS

from .benchfiles import throughput_files
from .common import scale_label
from .registry import Output, Skip, generator
from .style import method_label
from .tables import Cell, Table

NEEDS = ("a throughput file: python benchmarks/train_throughput/train_throughput.py --presets P "
         "--out benchmarks/train_throughput/DEVICE.json (read from train_throughput/ and the top of "
         "RUNS_DIR/benchmarks, or of the folders given with --benchmarks, e.g. the repository's benchmarks/)")
COLUMNS = ["Preset", "Method", "Routing backend", "Tokens/s", "vs baseline", "Peak mem. (GB)", "Device", "File"]


def backward_label(r: dict, method: str) -> str | None:
    """"fold backward, Cb 8" / "gather backward" for a row of a method over the shared source
    stack whose file records the backward; None otherwise (other methods, older files)."""
    backward = r.get("routing_backward")
    if method not in REPLACEMENT_METHODS or not backward:
        return None
    return f"{backward} backward" + (f", Cb {r['fold_calls']}" if backward == "fold" and r.get("fold_calls") else "")


def _nearest_baseline(results: list[dict], i: int) -> float | None:
    before = [r["tokens_per_s"] for r in results[:i + 1] if r["method"] == "baseline"]
    if before:
        return before[-1]
    return next((r["tokens_per_s"] for r in results[i:] if r["method"] == "baseline"), None)


@generator("table_cost", kind="table", paper_ref="tab:cost, tab:maincost", needs=NEEDS)
def make(ctx) -> list[Output]:
    files = throughput_files(ctx.benchmark_files("train_throughput") + ctx.benchmark_files())
    if not files:
        raise Skip("no training-throughput benchmark files found in " +
                   (", ".join(str(b) for b in ctx.benchmarks) or "any benchmark directory"), [NEEDS])
    t = Table("table_cost", "Training throughput and peak memory vs baseline (measured in one run per file)", COLUMNS)
    ratios = {}
    for path, doc in files:
        meta = doc.get("meta", {})
        args = meta.get("args", {})
        results = doc["results"]
        seen: dict[str, int] = {}
        for i, r in enumerate(results):
            # pairwise: against the nearest baseline run before this row (else the first after it);
            # a file that runs every method twice then gives one ratio per pair
            base = _nearest_baseline(results, i)
            ratio = r["tokens_per_s"] / base if base else None
            for key in ("vs_baseline", "vs_baseline_round_median"):  # interleaved: median of per-round ratios
                if r.get(key) is not None:
                    ratio = r[key]
            method, _, variant = r["method"].partition("/")  # METHOD/VARIANT: an A/B kernel variant
            preset = str(r.get("preset") or args.get("preset", "?"))  # per row: files over several presets
            backend = str(r.get("backend") or args.get("backend", "?")) if method in ROUTED_METHODS else "-"
            if r.get("step"):  # files of the training-step benchmark say which step ran
                parts = [f"{r['step']} step"]
                if r.get("loss_kernel"):  # the step's options (files since the fused loss)
                    parts.append(f"{r['loss_kernel']} loss")
                if r.get("compile_sublayers"):
                    parts.append("compiled sublayers")
                if r.get("routing_douts") == "storage":
                    parts.append("bf16 routing douts")
                step = ", ".join(parts)
                backend = step if backend == "-" else f"{backend} ({step})"
            if variant:
                backend = f"{backend}-{variant}"
            label = method_label(method) + (f" ({variant} kernels)" if variant else "")
            stack_backward = backward_label(r, method)
            if stack_backward:
                label = f"{label} ({stack_backward})"
            arm = str(r.get("arm") or r["method"])  # "mhar/gather": a second arm of one method
            t.add([Cell(scale_label(preset), preset),
                   Cell(label, arm), Cell(backend, backend),
                   Cell.num(r["tokens_per_s"], "{:,.0f}"), Cell.num(ratio, "{:.2f}", suffix="x"),
                   Cell.num(r.get("peak_memory_gb"), "{:.2f}"), Cell(str(meta.get("device", "?")), meta.get("device")),
                   Cell(path.name, path.name)], rule_before=i == 0 and bool(t.rows))
            k = seen[r["method"]] = seen.get(r["method"], -1) + 1
            ratios[(path.name, r["method"], k)] = ratio
            ratios.setdefault((path.name, r["method"]), ratio)  # the first run of each method
            if arm != r["method"]:
                ratios.setdefault((path.name, arm), ratio)
        kind = str(r.get("peak_memory_kind", "cuda"))
        if "interleaved" in kind:
            t.notes.append(f"{path.name}: arms interleaved round by round; ratio = median of per-round "
                           f"ratios; peak memory = {kind}")
        elif meta.get("device") and "cuda" not in kind:
            t.notes.append(f"{path.name}: peak memory is the process max RSS ({r.get('peak_memory_kind')}), "
                           "not GPU memory")
    paper = ctx.paper["cost"]
    first = True
    for row in paper["rows"]:
        for scale in ("100m", "350m", "1b"):
            v = row[scale]
            t.add([Cell(f"{scale_label(scale)} (paper)", scale), Cell(row["label"], row["impl"]),
                   Cell(row["impl"], row["impl"]),
                   Cell.num(paper["baseline_tokens_per_s"][scale] * v[0] if v else None, "{:,.0f}"),
                   Cell.num(v[0] if v else None, "{:.2f}", suffix="x") if v else Cell("OOM"),
                   Cell.num(v[1] if v else None, "{:.1f}") if v else Cell("OOM (>80 GB)"), Cell("H100"), Cell("-")],
                  source="paper", rule_before=first)
            first = False
    t.notes.append("Paper: " + paper["what"] + f" ({paper['ref']}); paper tokens/s = its absolute baseline median x ratio.")
    return [Output("table_cost", ctx.write_table(t), dict(table=t, ratios=ratios))]
