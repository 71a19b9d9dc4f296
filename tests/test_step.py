"""The training step's host-side rules (the CUDA parts are in tests/gpu/test_graph_step.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from mhar_probe.step import gc_paused


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_gc_paused_collects_first_and_keeps_the_collector_off():
    gc.enable()
    garbage = _Cycle()
    alive = weakref.ref(garbage)
    del garbage
    with gc_paused():
        assert alive() is None  # collected before the block (a capture) begins
        assert not gc.isenabled()
        late = _Cycle()
        late_ref = weakref.ref(late)
        del late
        for _ in range(20_000):  # enough allocations to trigger an automatic collection if it were on
            _Cycle().me = None
        assert late_ref() is not None  # nothing was finalised inside
    assert gc.isenabled()


def test_gc_paused_restores_the_state_it_found():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("capture failed")
    assert gc.isenabled()
