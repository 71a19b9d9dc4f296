"""Fused Triton routing kernels. This package only exports; the model side registers it as
routing backend 'triton' (`mhar_probe.model.routing.register_triton_backend`).

Layout:
  config.py     -- `KernelConfig` (the kernels' options, no environment switches) and how to set it
  launch_tables.py / launch_tables.json -- launch configs per shape (data) and their lookups
  naive.py      -- plain float64 references of every kernel (forward, backward, collect)
  route_fwd.py  -- online-softmax forward with the key RMSNorm fused
  route_bwd.py  -- per-call backward, and the shared-stack backward of a stack built without
                   the sites' parameters (call part + gather)
  route_bwd_collect.py -- the shared-stack backward at 4 bytes per pair-element (stacks built
                   with the sites' parameters: the model's)
  cross_entropy.py -- the fused next-token cross-entropy of the training step (not routing: the
                   largest non-matmul cost of a step at a 151,936-word vocabulary)
  launch.py     -- direct launches of the compiled kernels
  autograd.py   -- autograd Functions, `route_triton`, `TritonSourceStack`, `kernel_settings`
"""

from mhar_probe.kernels.autograd import TritonSourceStack, check_heads, kernel_settings, route_triton
from mhar_probe.kernels.config import KernelConfig, current_kernel_config, set_kernel_config, use_kernel_config

__all__ = ["KernelConfig", "TritonSourceStack", "check_heads", "current_kernel_config", "kernel_settings", "route_triton",
           "set_kernel_config", "use_kernel_config"]
