"""How long stock `lm_eval` will take on the exported tasks here, and the command sized for it.

An estimate, not a measurement of the harness: the work is counted in forward passes and their
FLOPs, and the machine's speed is measured on the run's own model.

    requests   per item: ppl one per document (rolling windows of the context), lastword one,
               nextline one per choice, nextline_gen one prompt then up to max_gen_toks steps
    tokens     of each request, with the run's tokenizer (context + continuation, at most the context)
    FLOPs      tokens x forward FLOPs per token (`mhar_probe.flops`, training=False)
    passes     ceil(requests / batch) for the scored tasks, ceil(items / batch) x (1 + max_gen_toks)
               for generation; each pass costs at least the measured time of a one-token batch
    time       sum over passes of max(FLOPs of the pass / rate, floor), rate = FLOP/s measured on a
               full [batch, context] forward of the model (the harness's own overhead is left out)

`--limit N` is added when the whole set would take longer than `budget_s`: N items per task, the
most that fit it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .heldout import LASTWORD_TASK, NEXTLINE_GEN_TASK, NEXTLINE_TASK, NLG_MAX_TOKENS, PPL_TASK

#: a printed command longer than this (seconds, estimated) gets a --limit that fits it
BUDGET_S = 120.0


@dataclass(frozen=True)
class TaskWork:
    """One task's items and the work they give: forward tokens, scored passes' requests, generation steps."""

    task: str
    items: int
    requests: int  # scored sequences (loglikelihood requests, rolling windows)
    tokens: int  # tokens of those sequences (each capped at the context)
    prompts: int  # generation prompts (each then up to max_gen_toks one-token steps)


@dataclass(frozen=True)
class MachineSpeed:
    """The measured forward speed of the model here: FLOP/s at a full batch, and one pass's floor."""

    device: str
    flops_per_s: float
    floor_s: float  # a [batch, 1] forward: the least one pass costs


def task_work(task: str, rows: list[dict[str, Any]], count, max_length: int) -> TaskWork:
    """The work of `rows` of a shipped task; `count(text)` is its length in tokens."""
    if task == PPL_TASK:
        lengths = [count(r["text"]) for r in rows]
        windows = [max(1, math.ceil(n / max_length)) for n in lengths]
        return TaskWork(task, len(rows), sum(windows), sum(lengths), 0)
    if task == LASTWORD_TASK:
        lengths = [min(max_length, count(r["context"] + r["target"])) for r in rows]
        return TaskWork(task, len(rows), len(rows), sum(lengths), 0)
    if task == NEXTLINE_TASK:
        lengths = [min(max_length, count(r["context"] + "\n" + c)) for r in rows for c in r["choices"]]
        return TaskWork(task, len(rows), len(lengths), sum(lengths), 0)
    if task == NEXTLINE_GEN_TASK:
        lengths = [min(max_length, count(r["context"] + "\n")) for r in rows]
        return TaskWork(task, len(rows), len(rows), sum(lengths), len(rows))
    raise ValueError(f"no work model for task {task!r}")


def seconds(work: TaskWork, *, batch: int, flops_per_token: float, speed: MachineSpeed, limit: int | None = None
            ) -> float:
    """Estimated seconds of `work` (its first `limit` items) at `batch` on a machine of `speed`."""
    share = 1.0 if limit is None or work.items == 0 else min(1.0, limit / work.items)
    requests, tokens, prompts = work.requests * share, work.tokens * share, work.prompts * share
    if requests == 0:
        return 0.0
    passes = math.ceil(requests / batch)
    scored = max(tokens * flops_per_token / speed.flops_per_s, passes * speed.floor_s)
    steps = math.ceil(prompts / batch) * NLG_MAX_TOKENS
    generated = max(prompts * NLG_MAX_TOKENS * flops_per_token / speed.flops_per_s, steps * speed.floor_s)
    return scored + generated


def measure_speed(model, *, batch: int, max_length: int, device: str, flops_per_token: float,
                  repeats: int = 2) -> MachineSpeed:
    """Time the model's forward on [batch, max_length] and [batch, 1] token batches (after a warm-up)."""
    import torch

    def timed(length: int) -> float:
        ids = torch.zeros(batch, length, dtype=torch.long, device=device)
        with torch.no_grad():
            model(input_ids=ids)  # warm-up
            t0 = time.perf_counter()
            for _ in range(repeats):
                model(input_ids=ids)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        return (time.perf_counter() - t0) / repeats

    full = timed(max_length)
    return MachineSpeed(device, batch * max_length * flops_per_token / full, timed(1))


def fitting_limit(works: list[TaskWork], budget_s: float, **kw: Any) -> int | None:
    """The most items per task whose estimate fits `budget_s` (None: the whole set fits)."""
    total = sum(seconds(w, **kw) for w in works)
    if total <= budget_s:
        return None
    lo, hi = 1, max(w.items for w in works)
    while lo < hi:  # the largest N with seconds(N) <= budget (at least 1)
        mid = (lo + hi + 1) // 2
        if sum(seconds(w, limit=mid, **kw) for w in works) <= budget_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def read_rows(root: Path, task: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / f"{task}.jsonl").read_text(encoding="utf-8").splitlines() if line]


def clock(s: float) -> str:
    """45 s, 3.2 min, 1.4 h."""
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"
