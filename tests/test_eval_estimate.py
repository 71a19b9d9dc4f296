"""The time estimate printed beside the stock `lm_eval` command (`mhar eval --export-tasks`): the
work of each shipped task counted by hand on small rows, the time model's two regimes (FLOP-bound,
per-pass floor), and the --limit that fits a budget."""

from __future__ import annotations

import math

import pytest

from mhar_probe.evaluate.estimate import MachineSpeed, TaskWork, clock, fitting_limit, seconds, task_work
from mhar_probe.evaluate.heldout import (LASTWORD_TASK, NEXTLINE_GEN_TASK, NEXTLINE_TASK, NLG_MAX_TOKENS,
                                         PPL_TASK)


def words(text: str) -> int:
    """A stand-in tokenizer: one token per space-separated word (newlines count as separators)."""
    return len(text.split())


def test_task_work_counts_requests_and_tokens_as_the_harness_forms_them():
    ppl = task_work(PPL_TASK, [{"text": "a " * 10}, {"text": "b " * 3}], words, max_length=4)
    assert (ppl.requests, ppl.tokens) == (math.ceil(10 / 4) + 1, 13)  # rolling windows of the context
    last = task_work(LASTWORD_TASK, [{"context": "a b c", "target": " d"}], words, max_length=3)
    assert (last.requests, last.tokens) == (1, 3)  # capped at the context
    mc = task_work(NEXTLINE_TASK, [{"context": "a b", "choices": ["c", "d e"], "label": 0}], words, max_length=8)
    assert (mc.requests, mc.tokens) == (2, 3 + 4)  # one request per choice
    gen = task_work(NEXTLINE_GEN_TASK, [{"context": "a b", "target": "c"}] * 3, words, max_length=8)
    assert (gen.requests, gen.tokens, gen.prompts) == (3, 6, 3)
    with pytest.raises(ValueError, match="no work model"):
        task_work("other", [], words, 8)


def test_seconds_are_flop_bound_or_floor_bound():
    fast = MachineSpeed("cpu", flops_per_s=1e9, floor_s=0.01)
    big = TaskWork("t", items=100, requests=100, tokens=100_000, prompts=0)
    # 1e5 tokens x 1e6 FLOPs = 1e11 FLOPs at 1e9/s: 100 s, far above 13 passes x 0.01 s
    assert seconds(big, batch=8, flops_per_token=1e6, speed=fast) == pytest.approx(100.0)
    small = TaskWork("t", items=100, requests=100, tokens=1000, prompts=100)
    # scored: 13 passes at the floor; generation: 13 batches x NLG_MAX_TOKENS steps at the floor
    want = 13 * 0.01 + 13 * NLG_MAX_TOKENS * 0.01
    assert seconds(small, batch=8, flops_per_token=1e3, speed=fast) == pytest.approx(want)
    assert seconds(small, batch=8, flops_per_token=1e3, speed=fast, limit=8) == pytest.approx(0.01 + NLG_MAX_TOKENS * 0.01)


def test_the_limit_is_the_most_items_that_fit_the_budget():
    speed = MachineSpeed("cpu", flops_per_s=1e9, floor_s=0.0)
    works = [TaskWork("a", 1000, 1000, 1_000_000, 0), TaskWork("b", 10, 10, 10_000, 0)]
    kw = dict(batch=8, flops_per_token=1e6, speed=speed)  # 1 s per 1,000 tokens
    assert fitting_limit(works, 2000.0, **kw) is None  # 1,010 s: everything fits
    n = fitting_limit(works, 100.0, **kw)
    assert sum(seconds(w, limit=n, **kw) for w in works) <= 100.0 < sum(seconds(w, limit=n + 1, **kw) for w in works)
    assert clock(45) == "45 s" and clock(600) == "10.0 min" and clock(7200) == "2.0 h"
