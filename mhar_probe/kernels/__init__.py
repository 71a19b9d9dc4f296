"""Fused Triton routing kernels; importing this module registers routing backend 'triton'.

Layout (kernel beside its plain reference):
  route_fwd.py  -- online-softmax forward with the key RMSNorm fused (+ `route_fwd_reference`)
  route_bwd.py  -- per-call backward, shared-stack call/gather backward (+ `route_bwd_reference`)
  autograd.py   -- autograd Functions, `route_triton`, `TritonSourceStack`
"""

from mhar_probe.kernels.autograd import TritonSourceStack, route_triton
from mhar_probe.model.routing import RoutingBackend, register_backend

register_backend(RoutingBackend("triton", route_triton, TritonSourceStack))

__all__ = ["TritonSourceStack", "route_triton"]
