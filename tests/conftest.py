"""Suite-wide set-up.

* Without CUDA, Triton kernels run in its CPU interpreter: TRITON_INTERPRET=1 must be set
  before triton is first imported, whichever test module imports it first.
* GPU-only test modules are not collected on a machine without CUDA (`make test` deselects
  the `gpu` marker; this keeps their module-level imports from running).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if "gpu" in collection_path.parts and not torch.cuda.is_available():
        return True
    return None
