"""Capture memory must not grow with the number of tokens: 10x more tokens, same peak.

Peak resident memory is read from /proc/self/status (VmHWM), reset before each capture by
writing 5 to /proc/self/clear_refs; Python-level allocations (numpy included) by tracemalloc.
Batches are generated lazily, so the input itself does not grow either.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest
import torch

import mhar_probe  # noqa: F401
from mhar_probe.capture import capture_routing
from mhar_probe.model import MHARConfig, MHARForCausalLM

CLEAR_REFS = Path("/proc/self/clear_refs")
MB = 1 << 20


def _hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _batches(n: int, B: int = 8, T: int = 64):
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        yield torch.randint(0, 97, (B, T), generator=g)


def _peak(model, n_batches: int, out: Path) -> tuple[int, int]:
    """(peak RSS above the starting RSS, tracemalloc peak) of one capture of n_batches."""
    gc.collect()
    CLEAR_REFS.write_text("5")
    start = _rss_bytes()
    tracemalloc.start()
    capture_routing(model, _batches(n_batches), per_token=True, out=out, progress=False, draws=4).close()
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return _hwm_bytes() - start, py_peak


@pytest.mark.skipif(not CLEAR_REFS.exists(), reason="needs Linux /proc/self/clear_refs to reset VmHWM")
def test_memory_is_flat_for_ten_times_more_tokens(tmp_path):
    torch.manual_seed(0)
    cfg = MHARConfig(vocab_size=97, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=128, max_position_embeddings=128,
                     residual_method="mhar")
    model = MHARForCausalLM(cfg).eval()
    with torch.no_grad():
        for site in model.sites:
            site.query.normal_()
    _peak(model, 1, tmp_path / "warm.nc")  # first-call allocations (allocator pools, h5py)
    short_rss, short_py = _peak(model, 2, tmp_path / "short.nc")
    long_rss, long_py = _peak(model, 20, tmp_path / "long.nc")
    # a capture that kept one batch's sources would add ~1.3 MB per batch (~24 MB over 18 batches)
    assert long_rss <= short_rss + 12 * MB, (short_rss / MB, long_rss / MB)
    assert long_py <= short_py + 1 * MB, (short_py / MB, long_py / MB)
