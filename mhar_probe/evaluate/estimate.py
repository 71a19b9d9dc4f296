"""How long stock `lm_eval` will take on the exported tasks here, and the command sized for it.

An estimate: the work of each task is counted from its items, and its cost per unit is measured
here on the run's own model through the harness's own model class (HFLM), so the harness's per-request
overhead, which dominates a small model on a CPU, is in it; its start-up (imports, task index, model
load) is not.

    requests   per item: ppl one rolling window per `max_length` tokens of the document, lastword one,
               nextline one per choice; nextline_gen one prompt, then up to max_gen_toks greedy steps
    tokens     of each request, with the run's tokenizer (context + continuation, at most the context)
    scored     requests x seconds per request (measured on one batch of real lastword requests),
               scaled by the task's tokens per request over the measured ones' (FLOPs grow with them)
    generated  ceil(prompts / batch) x seconds of one batch of generation (measured on real prompts)

`--limit N` is added when the whole set would take longer than `BUDGET_S`: the most items per task
that fit it.
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
    """One task's items and the work they give: scored requests and their tokens, generation prompts."""

    task: str
    items: int
    requests: int  # scored sequences (loglikelihood requests, rolling windows)
    tokens: int  # tokens of those sequences (each capped at the context)
    prompts: int  # generation prompts (each then up to max_gen_toks greedy steps)


@dataclass(frozen=True)
class HarnessSpeed:
    """Measured here: seconds per scored request (of `request_tokens` tokens on average) and per batch
    of generation, both at the command's batch size."""

    request_s: float
    request_tokens: float
    generate_batch_s: float


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


def seconds(work: TaskWork, *, batch: int, speed: HarnessSpeed, limit: int | None = None) -> float:
    """Estimated seconds of `work` (its first `limit` items) at `batch`, at the measured `speed`."""
    share = 1.0 if limit is None or work.items == 0 else min(1.0, limit / work.items)
    requests, tokens, prompts = work.requests * share, work.tokens * share, work.prompts * share
    if requests == 0:
        return 0.0
    if prompts:
        return math.ceil(prompts / batch) * speed.generate_batch_s
    length = max(1.0, (tokens / requests) / max(speed.request_tokens, 1.0))
    return requests * speed.request_s * length


def measure_speed(lm, pairs: list[tuple[str, str]], prompts: list[str], *, batch: int, count) -> HarnessSpeed:
    """Time the harness's model `lm` (an HFLM) on one batch of real scored requests `pairs`
    (context, continuation) and one batch of generation from `prompts`, after a one-request warm-up."""
    from lm_eval.api.instance import Instance

    pairs, prompts = pairs[:batch], prompts[:batch]
    scored = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    lm.loglikelihood(scored[:1], disable_tqdm=True)  # warm-up
    t0 = time.perf_counter()
    lm.loglikelihood(scored, disable_tqdm=True)
    request_s = (time.perf_counter() - t0) / len(scored)
    until = {"until": ["\n"], "do_sample": False, "max_gen_toks": NLG_MAX_TOKENS}
    t0 = time.perf_counter()
    lm.generate_until([Instance("generate_until", {}, (p, dict(until)), i) for i, p in enumerate(prompts)],
                      disable_tqdm=True)
    generate_s = time.perf_counter() - t0 if prompts else 0.0
    tokens = sum(count(c + t) for c, t in pairs) / len(pairs)
    return HarnessSpeed(request_s, tokens, generate_s)


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
