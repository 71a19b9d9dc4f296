"""Hooks, activation caches and streaming capture of the depth routing into xarray.

    from mhar_probe.capture import hooks, run_with_cache, capture_routing, open_routing_dataset

Hook names: `sites.{s}.hook_sources` / `hook_weights` / `hook_out` (see `hooks.py`).
Dataset schema: `schema.py`; the reductions: `reducers.py`.
"""

from .capture import capture_routing, routing_backend
from .errors import CaptureError
from .hooks import ActivationCache, hook_points, hooks, run_with_cache
from .io import open_routing_dataset, write_dataset
from .of_run import RunCapture, capture_run, capture_summary
from .schema import Layout, layout_of

__all__ = ["ActivationCache", "CaptureError", "Layout", "RunCapture", "capture_routing", "capture_run",
           "capture_summary", "hook_points", "hooks", "layout_of", "open_routing_dataset", "routing_backend",
           "run_with_cache", "write_dataset"]
