"""Captured routing datasets (RUNS_DIR/<run>/routing.nc) for the routing figures and tables:
loading with the run's identity, choosing which run stands for a method, the paper's routing
numbers (figures/paper_values_routing.json), and the depth-read matrix of one site."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import xarray as xr

from mhar_probe.capture import open_routing_dataset
from mhar_probe.model.methods import routing_heads_of
from mhar_probe.runfiles import RunFiles

from .common import choose_mhar_H

PAPER_ROUTING = Path(__file__).with_name("paper_values_routing.json")


def load_paper_routing() -> dict[str, Any]:
    """The paper's probe, head-alignment and per-head numbers."""
    return json.loads(PAPER_ROUTING.read_text())


@dataclass
class Captured:
    """One run's routing dataset and who it belongs to."""

    name: str  # the run directory's name
    path: Path

    @cached_property
    def ds(self) -> xr.Dataset:
        return open_routing_dataset(self.path, load=True)

    @property
    def method(self) -> str:
        return str(self.ds.attrs.get("method"))

    @property
    def H(self) -> int:
        return routing_heads_of(self.method, self.ds.attrs, default=1) or 1

    @property
    def G(self) -> int:
        return int(self.ds.attrs.get("G", 0))

    @property
    def shape(self) -> tuple[int, int, int]:
        a = self.ds.attrs
        return int(a.get("d", 0)), int(a.get("L", 0)), int(a.get("G", 0))

    @property
    def preset(self) -> str:
        return str(self.ds.attrs.get("preset") or "")

    @cached_property
    def seed(self) -> int:
        """The training seed from RUN/train_config.json (0 when the file or the field is missing;
        a damaged file is its one-line `RunFileError`)."""
        return int(RunFiles(self.path.parent).train_config().get("seed", 0))

    @property
    def has_probes(self) -> bool:
        return "slice_kl" in self.ds

    @property
    def scale(self) -> str:
        d, L, G = self.shape
        return f"{self.preset} d{d}/L{L}/kv{G}" if self.preset else f"d{d}/L{L}/kv{G}"


def load_captured(paths: Iterable[Path]) -> list[Captured]:
    return [Captured(Path(p).parent.name, Path(p)) for p in paths]


def first_run(runs: list[Captured]) -> Captured | None:
    """The lowest seed (then name) of `runs`."""
    return min(runs, key=lambda c: (c.seed, c.name)) if runs else None


def pick(runs: list[Captured], method: str, *, shape: tuple[int, int, int] | None = None,
         H: int | None = None, prefer: int | None = None) -> Captured | None:
    """The run standing for `method` (of `shape` if given): for mhar `H`, else the head count
    `choose_mhar_H` picks (`prefer`, the study's --mhar-heads, if captured; else H = 8, else H = KV,
    else the largest <= 8), then the lowest seed."""
    cands = [c for c in runs if c.method == method and (shape is None or c.shape == shape)]
    if method == "mhar" and cands:
        want = H if H is not None else choose_mhar_H([c.H for c in cands], cands[0].G, prefer=prefer)
        cands = [c for c in cands if c.H == want]
    return first_run(cands)


def depth_read_matrix(ds: xr.Dataset, site: int) -> np.ndarray:
    """[source, channel] token-mean weight channel c gives source n at `site` (sources the site
    reads only). Head h owns channels [h d/H, (h+1) d/H) (the query reshaped to (H, d/H)), so a
    single-head site gives d identical columns (rank 1) and an MHAR site H blocks."""
    n = int(ds.site_num_sources.values[site])
    heads = int(ds.site_num_heads.values[site])
    d = int(ds.attrs["d"])
    if d % heads:
        raise ValueError(f"width {d} does not split into {heads} heads")
    w = ds.weight_mean.values[site, :n, :heads]  # [n, heads]
    return np.repeat(w, d // heads, axis=1)


def prenorm_read_matrix(num_sources: int, d: int) -> np.ndarray:
    """The standard pre-norm residual as the same [row, channel] picture: row n is the running
    state h_n after source n (h_n = sum of sources 0..n); every channel reads only the latest
    state, a one-hot column."""
    m = np.zeros((num_sources, d))
    m[-1] = 1.0
    return m


def default_site(ds: xr.Dataset) -> int:
    """The last sublayer site (not the final read-out), the one reading the most depth history."""
    kinds = [str(k) for k in ds.site_kind.values]
    inner = [i for i, k in enumerate(kinds) if k != "final"]
    return inner[-1] if inner else len(kinds) - 1
