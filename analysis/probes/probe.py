"""The forced-compromise probes of runs or routing datasets as paper-style tables (`mhar probe`).

Each input is a routing dataset (.nc from `mhar capture`) or a run directory; a run with
RUN/routing.nc uses it, otherwise its held-out text is captured in memory (not saved: use
`mhar capture` to keep it). `probe` writes under `out`: probe.{md,tex,csv} (Table tab:probe),
perhead.* (figure fig:perhead statistics, multi-head runs), headalign.* (mhar vs mhar_hw of the
same shape and head count: MHAR H = MHAR-HW's KV groups; an mhar_hw run without such a partner is
named in `ProbeTables.unmatched` and left out) and sites.* (per-site values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd
import xarray as xr

from mhar_probe.capture.capture import capture_routing
from mhar_probe.capture.errors import CaptureError
from mhar_probe.capture.io import open_routing_dataset
from mhar_probe.capture.runs import check_same_weights, heldout_rows, load_run, row_batches
from mhar_probe.runfiles import RunFiles

from .alignment import heads_of
from .provenance import run_label
from .tables import headalign_table, perhead_table, probe_table, site_table, write_table

#: the tables `probe` writes, each under its stem as Markdown, LaTeX and CSV (.md, .tex, .csv)
STEMS = ("probe", "sites", "perhead", "headalign")
#: query slices and random-query draws when a run is captured in memory
DEFAULT_SLICES, DEFAULT_DRAWS = 4, 8


@dataclass
class ProbeTables:
    """The probe's tables (None: no multi-head run / no mhar-mhar_hw pair among the inputs), the
    labels of the mhar_hw runs no mhar run matched, and the files written (empty until written)."""

    probe: pd.DataFrame
    sites: pd.DataFrame
    perhead: pd.DataFrame | None = None
    headalign: pd.DataFrame | None = None
    unmatched: list[tuple[str, int]] = field(default_factory=list)  # (run label, H) of each mhar_hw left out
    written: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What `mhar probe` prints: the runs left out of the head alignment, then the files written."""
        return [f"head alignment: no mhar run of {label}'s shape with H = {heads} among the inputs; "
                f"{label} is not compared" for label, heads in self.unmatched] + (
            ["wrote " + ", ".join(str(p) for p in self.written)] if self.written else [])


def _compatible(ds: xr.Dataset, slices: int | None, draws: int | None) -> bool:
    return ((slices is None or ds.attrs.get("slices") == slices)
            and (draws is None or ds.attrs.get("null_draws") == draws) and "slice_kl" in ds)


def load_input(path: str | Path, *, slices: int | None = None, draws: int | None = None, tokens: int = 65536,
               batch_size: int = 8, progress: bool = True) -> xr.Dataset:
    """The routing dataset of `path`: a .nc file (captured with `slices`/`draws` when given), a run's
    saved RUN/routing.nc when it fits, else the run's held-out text captured in memory
    (`tokens` tokens, `batch_size` sequences per forward)."""
    p = Path(path)
    if p.is_file():
        ds = open_routing_dataset(p)
        if not _compatible(ds, slices, draws):
            raise CaptureError(f"{p} was captured with slices={ds.attrs.get('slices')}, draws="
                               f"{ds.attrs.get('null_draws')}, probes={ds.attrs.get('probes')}; capture it again "
                               f"with the --slices/--draws you want, or drop those flags")
        return ds
    if not p.is_dir():
        raise CaptureError(f"{p} is neither a routing dataset file nor a run directory")
    files = RunFiles(p)
    saved = files.routing_path  # RUN/routing.nc, what `mhar capture RUN` writes
    if saved.is_file():
        ds = open_routing_dataset(saved)
        check_same_weights(ds, saved, files.weights_path)
        if _compatible(ds, slices, draws):
            return ds
    model, tokenizer, train_cfg = load_run(p)
    seq_len = train_cfg.get("seq_len") or model.config.max_position_embeddings // 2
    batches, _ = row_batches(heldout_rows(tokenizer, train_cfg, seq_len), tokens, batch_size)
    return capture_routing(model, batches, slices=slices or DEFAULT_SLICES,
                           draws=DEFAULT_DRAWS if draws is None else draws, run_path=p, progress=progress,
                           total=len(batches), attrs={"seq_len": int(seq_len)})


def pairs_of(datasets: Sequence[xr.Dataset]) -> tuple[list[tuple[xr.Dataset, xr.Dataset]], list[xr.Dataset]]:
    """(mhar, mhar_hw) of the same d, L and KV groups with equal head count (MHAR's H = MHAR-HW's
    H = G), in input order; and the mhar_hw datasets no mhar run matches (compared with nothing)."""
    key = lambda ds: (ds.attrs.get("d"), ds.attrs.get("L"), ds.attrs.get("G"), heads_of(ds))  # noqa: E731
    mhar = [ds for ds in datasets if ds.attrs.get("method") == "mhar"]
    out, unmatched = [], []
    for hw in (ds for ds in datasets if ds.attrs.get("method") == "mhar_hw"):
        match = next((mh for mh in mhar if key(mh) == key(hw)), None)
        if match is None:
            unmatched.append(hw)
        else:
            out.append((match, hw))
            mhar.remove(match)
    return out, unmatched


def probe_tables(datasets: Sequence[xr.Dataset], first_sites: int = 10) -> ProbeTables:
    """The tables of routing datasets (`first_sites`: the sites the per-head statistics use)."""
    multi = [ds for ds in datasets if ds.sizes["head"] > 1]
    pairs, unmatched = pairs_of(datasets)
    return ProbeTables(probe=probe_table(datasets), sites=site_table(datasets),
                       perhead=perhead_table(multi, first_sites) if multi else None,
                       headalign=headalign_table(pairs) if pairs else None,
                       unmatched=[(run_label(hw), heads_of(hw)) for hw in unmatched])


def output_paths(out: str | Path) -> list[Path]:
    """Every file `probe` may write under `out`."""
    return [Path(out) / f"{stem}.{ext}" for stem in STEMS for ext in ("md", "tex", "csv")]


def probe(inputs: Sequence[str | Path], out: str | Path = "probes", *, slices: int | None = None,
          draws: int | None = None, tokens: int = 65536, batch_size: int = 8, first_sites: int = 10,
          overwrite: bool = False, progress: bool = True) -> ProbeTables:
    """The probe tables of `inputs` (routing datasets or run directories, see `load_input`), written
    under `out` as STEM.{md,tex,csv}; refuses before any work when one exists and not `overwrite`."""
    existing = [str(p) for p in output_paths(out) if p.exists()]
    if existing and not overwrite:  # fail before any work
        raise CaptureError(f"output file(s) already exist: {', '.join(existing)}; pass --overwrite to replace them")
    datasets = [load_input(p, slices=slices, draws=draws, tokens=tokens, batch_size=batch_size, progress=progress)
                for p in inputs]
    try:
        tables = probe_tables(datasets, first_sites)
    finally:
        for ds in datasets:
            ds.close()
    out = Path(out)
    tables.written += write_table(tables.probe, out, "probe", overwrite=overwrite, label="tab:probe",
                                  caption="Direct probe of the routing queries (S slices; random-query null; "
                                          "learned excess).")
    tables.written += write_table(tables.sites, out, "sites", overwrite=overwrite,
                                  caption="Per-site width-disagreement (contiguous slices) and source collinearity.")
    if tables.perhead is not None:
        tables.written += write_table(tables.perhead, out, "perhead", overwrite=overwrite,
                                      caption="Per-head deviation from the head consensus (figure fig:perhead "
                                              "statistics).")
    if tables.headalign is not None:
        tables.written += write_table(tables.headalign, out, "headalign", overwrite=overwrite,
                                      label="tab:headalign", caption="Head alignment: MHAR vs MHAR-HW.")
    return tables
