"""Issue 55's lever table from `run_on_device.sh levers` results files, as results.md shows it.

    python benchmarks/train_throughput/levers_table.py benchmarks/train_throughput/h200_levers_*.json

One row per configuration (the preset, with 8,192 words where the file says so); per arm its
tokens/s over the baseline's in the same process (the median over interleaved rounds, the rounds'
range in brackets), then each arm's peak memory over the baseline's. A test
(tests/test_levers_table.py) checks that results.md holds this table as rendered from the
committed files, so the page cannot drift from them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ARMS = {  # results-file arm name -> column title
    "mhar": "stored design",
    "mhar/stack_douts=in_place": "douts in place",
    "mhar/stack_weights=logits": "weights as logits",
    "mhar/stack_append=into_buffer": "append into buffer",
    "mhar/stack_douts=in_place,stack_weights=logits,stack_append=into_buffer": "all three",
}
ORDER = ["100m_vocab8192", "100m", "350m", "1b"]


def config_name(meta: dict) -> str:
    """`100M, vocab 8,192` / `350M` from a results file's arguments."""
    preset = meta["args"]["presets"][0].upper()
    vocab = meta["args"]["vocab"]
    return f"{preset}, vocab {vocab:,}" if vocab != 151936 else preset


def row(doc: dict) -> str:
    by_arm = {r["arm"]: r for r in doc["results"]}
    base = by_arm["baseline"]
    speed = [f"{by_arm[a]['vs_baseline']:.3f} ({by_arm[a]['vs_baseline_range'][0]:.3f}-"
             f"{by_arm[a]['vs_baseline_range'][1]:.3f})" for a in ARMS]
    memory = " / ".join(f"{by_arm[a]['memory_vs_baseline']:.3f}" for a in ARMS)
    return (f"| {config_name(doc['meta'])} | {base['tokens_per_s']:,.0f} | " + " | ".join(speed)
            + f" | {base['peak_memory_gb']:.2f} | {memory} |")


def render(paths: list[Path]) -> str:
    """The markdown table, rows in the order 100M (8k words), 100M, 350M, 1B."""
    docs = {p.stem.split("_levers_")[1]: json.loads(p.read_text()) for p in paths}
    missing = [a for d in docs.values() for a in ["baseline", *ARMS] if a not in {r["arm"] for r in d["results"]}]
    if missing:
        raise SystemExit(f"levers_table: results files lack the arms {sorted(set(missing))}")
    head = ("| configuration | baseline tokens/s | " + " | ".join(f"{t} / baseline" for t in ARMS.values())
            + " | baseline peak GB | peak memory / baseline (" + " / ".join(ARMS.values()) + ") |")
    rule = "|---|---:|" + "---:|" * len(ARMS) + "---:|---|"
    keys = sorted(docs, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))
    return "\n".join([head, rule, *(row(docs[k]) for k in keys)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path, help="<tag>_levers_<config>.json results files")
    print(render(p.parse_args().files))


if __name__ == "__main__":
    main()
