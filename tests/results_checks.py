"""Shared by the tests that regenerate a committed study folder (results/ladder, results/study100m)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


def without_paths(obj, approx: bool = False):
    """`obj` less its "path" keys; with `approx`, floats compare to 1e-9 (least-squares fits differ
    in their last bits between machines)."""
    if isinstance(obj, dict):
        return {k: without_paths(v, approx) for k, v in obj.items() if k != "path"}
    if isinstance(obj, list):
        return [without_paths(v, approx) for v in obj]
    if approx and isinstance(obj, float):
        return pytest.approx(obj, rel=1e-9, abs=1e-12, nan_ok=True)
    return obj


def baseline_only_study(study_dir: Path, dest: Path) -> list[dict]:
    """`study_dir`'s runs/ copied into `dest`/runs as the study stood before its first routed run:
    no attnres or MHAR run, no evaluation, the manifest listing the baselines alone (returned)."""
    shutil.copytree(study_dir / "runs", dest / "runs",
                    ignore=shutil.ignore_patterns("100m-mhar-*", "100m-attnres-*", "evals"))
    manifest = json.loads((dest / "runs" / "manifest.json").read_text())
    manifest["runs"] = [r for r in manifest["runs"] if r["axes"]["method"] == "baseline"]
    (dest / "runs" / "manifest.json").write_text(json.dumps(manifest))
    return manifest["runs"]
