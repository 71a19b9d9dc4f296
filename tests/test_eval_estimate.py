"""The time estimate printed beside the stock `lm_eval` command (`mhar eval --export-tasks`): the
work of each shipped task counted by hand on small rows, the time model (requests at the measured
cost, longer ones in proportion; generation by batches), and the --limit that fits a budget."""

from __future__ import annotations

import math

import pytest

from mhar_probe.evaluate.estimate import HarnessSpeed, TaskWork, clock, fitting_limit, seconds, task_work
from mhar_probe.evaluate.heldout import (LASTWORD_TASK, NEXTLINE_GEN_TASK, NEXTLINE_TASK,
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


def test_seconds_count_requests_at_the_measured_cost_and_generation_by_batches():
    speed = HarnessSpeed(request_s=0.1, request_tokens=20.0, generate_batch_s=3.0)
    short = TaskWork("t", items=100, requests=200, tokens=2000, prompts=0)  # 10 tokens a request: no faster
    assert seconds(short, batch=8, speed=speed) == pytest.approx(200 * 0.1)
    long = TaskWork("t", items=100, requests=100, tokens=8000, prompts=0)  # 80 tokens a request: 4x the FLOPs
    assert seconds(long, batch=8, speed=speed) == pytest.approx(100 * 0.1 * 4)
    gen = TaskWork("t", items=100, requests=100, tokens=1000, prompts=100)
    assert seconds(gen, batch=8, speed=speed) == pytest.approx(13 * 3.0)  # ceil(100 / 8) batches
    assert seconds(gen, batch=8, speed=speed, limit=8) == pytest.approx(3.0)
    assert seconds(long, batch=8, speed=speed, limit=50) == pytest.approx(50 * 0.1 * 4)


def test_the_limit_is_the_most_items_that_fit_the_budget():
    speed = HarnessSpeed(request_s=1.0, request_tokens=1.0, generate_batch_s=0.0)
    works = [TaskWork("a", 1000, 1000, 1000, 0), TaskWork("b", 10, 10, 10, 0)]  # 1 s a request
    kw = dict(batch=8, speed=speed)
    assert fitting_limit(works, 2000.0, **kw) is None  # 1,010 s: everything fits
    n = fitting_limit(works, 100.0, **kw)
    assert n == 90 and sum(seconds(w, limit=n, **kw) for w in works) <= 100.0
    assert clock(45) == "45 s" and clock(600) == "10.0 min" and clock(7200) == "2.0 h"
