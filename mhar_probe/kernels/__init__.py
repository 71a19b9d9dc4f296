"""Fused Triton kernels, organised by op (as FLA's `ops/<op>/`): each op's package holds its plain
float64 reference (`naive.py`) beside the kernels. This package only exports; the model side
registers the routing op as routing backend 'triton' (`mhar_probe.model.routing.register_triton_backend`).

Layout:
  config.py        -- `KernelConfig` (the kernels' options, passed explicitly: no global, no
                      environment switches) and `ROUTING_DOUTS`, the dout policy's choices
  launch.py        -- direct launches of the compiled kernels
  launch_tables.py / launch_tables.json -- launch configs per shape (data) and their lookups
  route/           -- eq. (mh): naive.py (float64 references of every routing kernel), fwd.py,
                      bwd.py, bwd_collect.py, bwd_fold.py, autograd.py (`route_triton`,
                      `TritonSourceStack`, `kernel_settings`)
  cross_entropy/   -- the fused next-token cross-entropy of the training step: naive.py, fused.py

`config` imports neither torch nor Triton, so the command line can read `ROUTING_DOUTS` without
them; the kernels are imported on first access of their names here.
"""

from __future__ import annotations

import importlib
from typing import Any

from mhar_probe.kernels.config import ROUTING_DOUTS, STACK_BACKWARDS, KernelConfig, kernel_config_from_dict

_LAZY = {"TritonSourceStack": "route", "check_heads": "route", "kernel_settings": "route", "route_triton": "route",
         "fused_cross_entropy": "cross_entropy"}

__all__ = ["KernelConfig", "ROUTING_DOUTS", "STACK_BACKWARDS", "kernel_config_from_dict", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"mhar_probe.kernels.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'mhar_probe.kernels' has no attribute {name!r}")
