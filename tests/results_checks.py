"""Shared by the tests that regenerate a committed study folder (results/ladder, results/study100m)."""

from __future__ import annotations

import pytest


def without_paths(obj, approx: bool = False):
    """`obj` less its "path" keys; with `approx`, floats compare to 1e-9 (least-squares fits differ
    in their last bits between machines)."""
    if isinstance(obj, dict):
        return {k: without_paths(v, approx) for k, v in obj.items() if k != "path"}
    if isinstance(obj, list):
        return [without_paths(v, approx) for v in obj]
    if approx and isinstance(obj, float):
        return pytest.approx(obj, rel=1e-9, abs=1e-12, nan_ok=True)
    return obj
