"""Issue 55's lever tables from `run_on_device.sh levers` results files, as results.md shows them (the
levers and that mode were deleted on 2026-12-06 after these timings; they live at commit 56b6ecf).

    python benchmarks/train_throughput/levers_table.py benchmarks/train_throughput/h100_levers_*.json

One table per card (the files' `meta.device`), one row per process: the configuration (the preset,
with 8,192 words where the file says so) and, where a card could not hold every arm in one process
(six 1B arms need about 100 GB), the arms that process timed; per arm its tokens/s over the
baseline's in the same process (the median over interleaved rounds, the rounds' range in
brackets; "-" where the process did not time it), then each arm's peak memory over the
baseline's. Every process times the baseline and the stored design, so each lever is read beside
the stored design of its own process. A test (tests/test_levers_table.py) checks that results.md
holds these tables as rendered from the committed files, so the page cannot drift from them.
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
REQUIRED = ("baseline", "mhar")  # in every process: each lever is read beside its own process's


def config_key(meta: dict) -> str:
    """`100m_vocab8192` / `350m`: the configuration a results file timed."""
    preset, vocab = meta["args"]["presets"][0], meta["args"]["vocab"]
    return f"{preset}_vocab{vocab}" if vocab != 151936 else preset


def config_name(meta: dict) -> str:
    """`100M, vocab 8,192` / `350M` from a results file's arguments."""
    preset = meta["args"]["presets"][0].upper()
    vocab = meta["args"]["vocab"]
    return f"{preset}, vocab {vocab:,}" if vocab != 151936 else preset


def row(doc: dict) -> str:
    by_arm = {r["arm"]: r for r in doc["results"]}
    base = by_arm["baseline"]
    speed = [f"{by_arm[a]['vs_baseline']:.3f} ({by_arm[a]['vs_baseline_range'][0]:.3f}-"
             f"{by_arm[a]['vs_baseline_range'][1]:.3f})" if a in by_arm else "-" for a in ARMS]
    memory = " / ".join(f"{by_arm[a]['memory_vs_baseline']:.3f}" if a in by_arm else "-" for a in ARMS)
    name = config_name(doc["meta"])
    if any(a not in by_arm for a in ARMS):
        name += " (" + ", ".join(t for a, t in ARMS.items() if a in by_arm and a != "mhar") + ")"
    return (f"| {name} | {base['tokens_per_s']:,.0f} | " + " | ".join(speed)
            + f" | {base['peak_memory_gb']:.2f} | {memory} |")


def render_card(docs: list[dict]) -> str:
    """One card's table: rows in the order 100M (8k words), 100M, 350M, 1B, a configuration's
    processes in the order of their lever columns."""
    for doc in docs:
        lacking = [a for a in REQUIRED if a not in {r["arm"] for r in doc["results"]}]
        if lacking:
            raise SystemExit(f"levers_table: a {config_name(doc['meta'])} results file lacks the arms {lacking}")
    configs = {config_key(d["meta"]) for d in docs}
    timed = {(config_key(d["meta"]), r["arm"]) for d in docs for r in d["results"]}
    missing = sorted({a for c in configs for a in ARMS if (c, a) not in timed})
    if missing:
        raise SystemExit(f"levers_table: results files lack the arms {missing}")

    def order(doc: dict) -> tuple[int, int]:
        key = config_key(doc["meta"])
        arms = {r["arm"] for r in doc["results"]}
        first = min(i for i, a in enumerate(ARMS) if a in arms and (a != "mhar" or len(arms) == 2))
        return (ORDER.index(key) if key in ORDER else len(ORDER), first)

    head = ("| configuration | baseline tokens/s | " + " | ".join(f"{t} / baseline" for t in ARMS.values())
            + " | baseline peak GB | peak memory / baseline (" + " / ".join(ARMS.values()) + ") |")
    rule = "|---|---:|" + "---:|" * len(ARMS) + "---:|---|"
    return "\n".join([head, rule, *(row(d) for d in sorted(docs, key=order))])


def render(paths: list[Path]) -> str:
    """The markdown tables of `paths`, one per card (in the order the cards first appear), each
    under a line naming the card."""
    by_card: dict[str, list[dict]] = {}
    for p in sorted(paths):
        doc = json.loads(p.read_text())
        by_card.setdefault(doc["meta"].get("device", "unknown card"), []).append(doc)
    if len(by_card) == 1:
        return render_card(next(iter(by_card.values())))
    return "\n\n".join(f"{card}:\n\n{render_card(docs)}" for card, docs in by_card.items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path, help="<tag>_levers_<config>[_<suffix>].json results files")
    print(render(p.parse_args().files))


if __name__ == "__main__":
    main()
