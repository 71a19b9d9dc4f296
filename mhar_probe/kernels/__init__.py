"""Fused Triton routing kernels; importing this module registers routing backend 'triton'.

Layout (kernel beside its plain reference):
  route_fwd.py  -- online-softmax forward with the key RMSNorm fused (+ `route_fwd_reference`)
  route_bwd.py  -- per-call backward, and the earlier shared-stack backward (call part + gather;
                   `MHAR_STACK_COLLECT=0`) (+ `route_bwd_reference`)
  route_bwd_collect.py -- the default shared-stack backward at 4 bytes per pair-element
                   (+ `collect_reference`)
  launch.py     -- direct launches of the compiled kernels
  autograd.py   -- autograd Functions, `route_triton`, `TritonSourceStack`, `kernel_settings`
"""

from mhar_probe.kernels.autograd import TritonSourceStack, kernel_settings, route_triton
from mhar_probe.model.routing import RoutingBackend, register_backend

register_backend(RoutingBackend("triton", route_triton, TritonSourceStack))

__all__ = ["TritonSourceStack", "kernel_settings", "route_triton"]
