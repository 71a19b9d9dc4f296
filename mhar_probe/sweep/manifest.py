"""manifest.json of a sweep directory: the grid, every run's name, axes and status.

    {"format": 1, "grid": {...SweepGrid...}, "updated": ISO time,
     "runs": [{"name", "axes": {preset, method, H, kv, lr, seed, steps}, "status",
               "tail_mean_val_loss", "error"}]}

Status of a run, read from its directory (the manifest is a record, the run directory is
the truth): finished (summary.json says so), interrupted (a checkpoint, no summary),
partial (files but nothing resumable), pending (nothing yet); failed is recorded by the
runner when training raised.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..atomic import write_json
from ..runfiles import RunFiles, read_json

MANIFEST = "manifest.json"
FORMAT = 1


def run_status(run_dir: Path) -> str:
    """finished | interrupted | partial | pending, from the files in `run_dir`."""
    files = RunFiles(run_dir)
    if files.finished:
        return "finished"
    if files.state_path.exists():
        return "interrupted"
    if run_dir.is_dir() and any(run_dir.iterdir()):
        return "partial"
    return "pending"


def read_manifest(out: Path) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.exists():
        return None
    doc = read_json(path)  # not UTF-8, not JSON: "PATH:LINE: ..." (runfiles.RunFileError)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("runs"), list):
        raise UserError(f"{path} is not a sweep manifest (format {FORMAT}); use another --out")
    for i, run in enumerate(doc["runs"]):
        if not (isinstance(run, dict) and isinstance(run.get("name"), str) and isinstance(run.get("axes"), dict)
                and isinstance(run.get("status"), str)):
            raise UserError(f"{path}: runs[{i}] is not an object with a name, axes and status; fix or remove it")
    return doc


def write_manifest(out: Path, grid: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    doc = dict(format=FORMAT, grid=grid, runs=runs,
               updated=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    write_json(out / MANIFEST, doc)


def merge_into_manifest(target: Path, new: dict[str, Any]) -> Path:
    """Merge the manifest `new` into `target`'s, row by run name (`new`'s row wins, the others stay),
    under `new`'s grid; returns the manifest written. A machine that made `new` may know only its own
    runs, so copying it over the committed manifest would drop every other run."""
    old = read_manifest(target)
    rows = {r["name"]: r for r in (old or {}).get("runs", [])}
    rows.update({r["name"]: r for r in new["runs"]})
    write_manifest(target, new["grid"], [rows[k] for k in sorted(rows)])
    return target / MANIFEST


def run_entry(name: str, axes: dict[str, Any], run_dir: Path, status: str | None = None,
              error: str | None = None) -> dict[str, Any]:
    """A manifest row; the tail-mean comes from the run's summary when it finished."""
    status = status or run_status(run_dir)
    entry: dict[str, Any] = dict(name=name, axes=axes, status=status)
    if status == "finished":
        entry["tail_mean_val_loss"] = RunFiles(run_dir).summary().get("tail_mean_val_loss")
    if error:
        entry["error"] = error
    return entry
