"""The training step's fused cross-entropy: its float64 reference (`naive.py`) and the Triton
kernel pair (`fused.py`)."""

from mhar_probe.kernels.cross_entropy.fused import fused_cross_entropy
from mhar_probe.kernels.cross_entropy.naive import cross_entropy_reference_f64

__all__ = ["cross_entropy_reference_f64", "fused_cross_entropy"]
