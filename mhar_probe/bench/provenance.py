"""What a benchmark result was measured with: the commit and the software versions.

A results file names the commit it measured. On the GPU machine the tree is a copy without
`.git`, so the device scripts pass the commit (`--commit`); `git_commit` is the fallback where
the checkout has its history."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch


def git_commit(where: str | Path | None = None) -> str | None:
    """The short commit of the checkout holding `where` (default: this package), or None where
    there is no git history (a copied tree) or no git."""
    cwd = Path(where) if where is not None else Path(__file__).parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def software() -> dict[str, str | None]:
    """Python, torch, CUDA (None on a CPU build) and Triton (None where it is not installed)."""
    try:
        import triton

        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    return dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
                triton=triton_version)
