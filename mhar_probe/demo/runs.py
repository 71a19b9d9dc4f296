"""Finding the demo's runs: through each sweep directory's manifest.json (its grid axes and
statuses), not by the spelling of folder names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..sweep.manifest import read_manifest, run_status


@dataclass(frozen=True)
class SweptRun:
    """One run of a sweep as its manifest records it."""

    path: Path
    method: str
    heads: int | None
    seed: int
    status: str
    kv: int | None = None

    @property
    def name(self) -> str:
        return self.path.name


def swept_runs(sweep_dir: Path) -> list[SweptRun]:
    """Every run the manifest of `sweep_dir` lists, in name order. A run whose own summary says it
    finished counts as finished whatever the manifest recorded (the run directory is the truth: a
    device call stopped by its budget after the last step leaves the manifest at "interrupted")."""
    manifest = read_manifest(sweep_dir)
    if manifest is None:
        raise UserError(f"{sweep_dir} has no manifest.json; run the demo's sweep stage first")

    def status(r: dict) -> str:
        return "finished" if run_status(sweep_dir / r["name"]) == "finished" else r["status"]

    runs = [SweptRun(path=sweep_dir / r["name"], method=r["axes"]["method"], heads=r["axes"]["H"],
                     seed=r["axes"]["seed"], status=status(r), kv=r["axes"].get("kv")) for r in manifest["runs"]]
    return sorted(runs, key=lambda r: r.name)


def swept_so_far(sweep_dir: Path) -> list[SweptRun]:
    """`swept_runs`, or none before the sweep's first run (no manifest.json yet): a study that fills
    call by call reads its file stages with no run in."""
    return swept_runs(sweep_dir) if (sweep_dir / "manifest.json").is_file() else []


def finished(runs: list[SweptRun]) -> list[SweptRun]:
    return [r for r in runs if r.status == "finished"]


def one(runs: list[SweptRun], *, method: str, seed: int, heads: int | None = None,
        kv: int | None = None) -> SweptRun:
    """The single run of `method` (with `heads` and `kv`, if given) and `seed`."""
    hits = [r for r in runs if r.method == method and r.seed == seed and (heads is None or r.heads == heads)
            and (kv is None or r.kv == kv)]
    if len(hits) != 1:
        what = (f"method={method}" + (f" H={heads}" if heads is not None else "")
                + (f" KV={kv}" if kv is not None else "") + f" seed={seed}")
        raise UserError(f"expected one run with {what} in the manifest, found {len(hits)}")
    return hits[0]
