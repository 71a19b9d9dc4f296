"""Readers for benchmark result files (JSON): training throughput (benchmarks/train_throughput/train_throughput.py:
{meta: {args: {...}, device}, results: [{preset, method, step, backend, tokens_per_s, vs_baseline,
peak_memory_gb}]}; older files: the preset and backend in meta.args),
or several such documents under "runs")
and routing kernels (benchmarks/kernels/bench_routing.py: {meta: {device}, rows: [{shape, H,
backend, fwdbwd_ms | microbatch_ms | oom}]}). Files of other shapes are ignored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _is_throughput(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("results"), list) and bool(doc["results"]) and all(
        isinstance(r, dict) and "method" in r and "tokens_per_s" in r for r in doc["results"])


def throughput_files(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every throughput document: a file holding one, or one per backend under "runs"
    ({meta, runs: {backend: {meta, results}}}, as one device call over several backends writes)."""
    out = []
    for p in paths:
        doc = _load(p)
        if _is_throughput(doc):
            out.append((p, doc))
        elif doc and isinstance(doc.get("runs"), dict):
            out.extend((p, sub) for _, sub in sorted(doc["runs"].items()) if _is_throughput(sub))
    return out


def kernel_files(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for p in paths:
        doc = _load(p)
        if doc and isinstance(doc.get("rows"), list) and doc["rows"] and all(
                isinstance(r, dict) and "shape" in r and "backend" in r for r in doc["rows"]):
            out.append((p, doc))
    return out
