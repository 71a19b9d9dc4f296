"""Suite-wide set-up: GPU-only test modules are not collected on a machine without CUDA
(`make test` deselects the `gpu` marker; this keeps their module-level imports from running)."""

from __future__ import annotations

from pathlib import Path

import torch


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if "gpu" in collection_path.parts and not torch.cuda.is_available():
        return True
    return None
