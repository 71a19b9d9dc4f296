"""The routing op, eq. (mh): its float64 references (`naive.py`), the forward (`fwd.py`), the
backwards (`bwd.py` per call and for stacks without parameters, `bwd_collect.py` at 4 bytes per
pair-element, `bwd_fold.py` the fold-block backward) and the autograd glue (`autograd.py`).
mhar_probe/kernels/README.md says what each does and why."""

from mhar_probe.kernels.route.autograd import TritonSourceStack, check_heads, kernel_settings, route_triton

__all__ = ["TritonSourceStack", "check_heads", "kernel_settings", "route_triton"]
