"""Paper-style probe tables as Markdown, LaTeX (booktabs) and CSV, written atomically (the cells
through mhar_probe.tables; the CSV is pandas' own)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import pandas as pd
import xarray as xr

from mhar_probe.atomic import write_text
from mhar_probe.capture.errors import CaptureError
from mhar_probe.model.methods import routing_heads_of
from mhar_probe.tables import booktabs, md_escape, md_row, md_rule, tex_escape, tex_row

from .alignment import head_alignment
from .collinearity import source_collinearity
from .deviation import per_head_deviation
from .provenance import run_label
from .source_count import matched_source_count
from .width import width_disagreement


def _shape(ds: xr.Dataset) -> str:
    a = ds.attrs
    return f"d{a.get('d')}/L{a.get('L')}/kv{a.get('G')}"


def probe_table(datasets: Sequence[xr.Dataset]) -> pd.DataFrame:
    """Table `tab:probe`: one column per run (single-head runs are the paper's subject)."""
    cols = {}
    matched = matched_source_count(datasets) if len(datasets) > 1 else None
    for i, ds in enumerate(datasets):
        w = width_disagreement(ds)
        c = w.sel(slicing="contiguous")
        control = bool(w.interleaved_differs)  # else the interleaved rows would repeat the contiguous ones
        col = {
            "Shape": _shape(ds),
            "Width-disagreement KL (trained)": float(c.summary_kl),
            "random-query null (mean over draws)": float(c.summary_null_mean),
            "random-query null (sd over draws)": float(c.summary_null_std),
            "learned excess (trained - null)": float(c.summary_excess),
            "head-interleaved slicing differs from contiguous": control,
            "head-interleaved slicing: KL (trained)": float(w.sel(slicing="interleaved").summary_kl)
            if control else float("nan"),
            "head-interleaved slicing: learned excess": float(w.sel(slicing="interleaved").summary_excess)
            if control else float("nan"),
            "Source collinearity (mean cos, all N)": float(source_collinearity(ds).all_sources_cosine),
            "N sources": int(ds.site_num_sources.values[-1]),
            "Routing heads H": routing_heads_of(ds.attrs.get("method"), ds.attrs, default=1) or 1,
            "Tokens": int(ds.attrs.get("tokens_seen", 0)),
        }
        if matched is not None:
            col["Matched-source-count KL (N <= N_min)"] = float(matched.matched_kl[i])
            col["median KL ratio vs first run at equal N"] = float(matched.median_ratio_to_first[i])
        cols[run_label(ds)] = col
    return pd.DataFrame(cols)


def perhead_table(datasets: Sequence[xr.Dataset], first_sites: int | None = 10) -> pd.DataFrame:
    """The per-head figure's statistics, one row per multi-head run."""
    rows = {}
    for ds in datasets:
        d = per_head_deviation(ds, first_sites)
        rows[run_label(ds)] = {
            "max |D|": float(d.max_abs), "null max |D| (mean)": float(d.null_max_abs_mean),
            "null max |D| (sd)": float(d.null_max_abs_std), "mean |D|": float(d.mean_abs),
            "null mean |D|": float(d.null_mean_abs_mean), "replication r": float(d.replication_r),
            "replication halves": d.attrs["halves"].split(" ")[0],
            "null replication r (mean)": float(d.null_replication_r_mean),
            "null replication r (sd)": float(d.null_replication_r_std),
            "cross-head r (mean)": float(d.cross_head_corr_mean),
            "cross-head r if independent": float(d.cross_head_corr_independent),
            "cross-head r spread": float(d.cross_head_spread),
            "cross-head r spread, random-query null (mean)": float(d.cross_head_spread_null_mean),
            "cross-head r spread, random-query null (sd)": float(d.cross_head_spread_null_std),
            "cross-head r spread excess (z)": float(d.cross_head_spread_z), "cells": int(d.cells),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def headalign_table(pairs: Sequence[tuple[xr.Dataset, xr.Dataset]]) -> pd.DataFrame:
    """Table `tab:headalign`: per scale and head count H (MHAR's = MHAR-HW's), MHAR vs MHAR-HW
    loss and routing statistics."""
    rows = {}
    for mh, hw in pairs:
        a = head_alignment(mh, hw)
        rows[f"{mh.attrs.get('preset') or _shape(mh)} H{a.attrs['heads']}"] = {
            "MHAR val loss": float(a.val_loss.sel(variant="mhar")),
            "MHAR-HW val loss": float(a.val_loss.sel(variant="mhar_hw")),
            "Delta (hw - mh)": float(a.delta_val_loss),
            "max |D| MHAR": float(a.max_abs_deviation.sel(variant="mhar")),
            "max |D| MHAR-HW": float(a.max_abs_deviation.sel(variant="mhar_hw")),
            "slice-KL excess MHAR": float(a.slice_kl_excess.sel(variant="mhar")),
            "slice-KL excess MHAR-HW": float(a.slice_kl_excess.sel(variant="mhar_hw")),
            "consensus routing r": float(a.consensus_corr),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


# ------------------------------------------------------------------------------ formatting
def _fmt(v: object, signed: bool = False) -> str:
    if hasattr(v, "item"):  # numpy scalar
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v):
            return "--"
        return f"{v:+.3f}" if signed else f"{v:.3f}"
    return str(v)


def _cells(df: pd.DataFrame) -> list[tuple[object, list[str]]]:
    """Each row's index and its formatted cells (a column named with "Delta" shows its sign)."""
    return [(i, [_fmt(v, "Delta" in str(c)) for c, v in row.items()]) for i, row in df.astype(object).iterrows()]


def to_markdown(df: pd.DataFrame) -> str:
    """A pipe table: an unnamed index column, then the frame's columns."""
    header = "| " + md_row([md_escape(c) for c in df.columns])  # the index column has no name: "| | a |"
    lines = [header, md_rule(len(df.columns) + 1)]
    lines += [md_row([md_escape(i), *(md_escape(v) for v in cells)]) for i, cells in _cells(df)]
    return "\n".join(lines) + "\n"


def to_latex(df: pd.DataFrame, caption: str = "", label: str = "") -> str:
    """A floating table (caption, label) around the booktabs tabular: index column, then the columns."""
    lines = [r"\begin{table}[h]", r"\centering"]
    if caption:
        lines.append(rf"\caption{{{tex_escape(caption)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    header = tex_row(["", *(rf"\textbf{{{tex_escape(c)}}}" for c in df.columns)])
    body = [tex_row([tex_escape(i), *(tex_escape(v) for v in cells)]) for i, cells in _cells(df)]
    lines += [*booktabs("l" + "c" * len(df.columns), header, body), r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(df: pd.DataFrame, out_dir: str | os.PathLike, stem: str, *, caption: str = "",
                label: str = "", overwrite: bool = False) -> list[Path]:
    """Write stem.md, stem.tex, stem.csv under out_dir (none is written if any exists without overwrite)."""
    out = Path(out_dir)
    paths = [out / f"{stem}.{ext}" for ext in ("md", "tex", "csv")]
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise CaptureError(f"output file(s) already exist: {', '.join(existing)}; pass --overwrite to replace them")
    out.mkdir(parents=True, exist_ok=True)
    md = (f"{caption}\n\n" if caption else "") + to_markdown(df)
    for path, text in zip(paths, (md, to_latex(df, caption, label), df.to_csv())):
        write_text(path, text)
    return paths


def site_table(datasets: Sequence[xr.Dataset]) -> pd.DataFrame:
    """Per-site probe values of every run (long format: one row per run and site)."""
    rows = []
    for ds in datasets:
        w = width_disagreement(ds).sel(slicing="contiguous")
        col = source_collinearity(ds)
        for s in range(ds.sizes["site"]):
            rows.append({"run": run_label(ds), "site": str(ds.site_label.values[s]),
                         "num_sources": int(ds.site_num_sources.values[s]), "kl": float(w.kl.values[s]),
                         "null_mean": float(w.null_mean.values[s]), "null_std": float(w.null_std.values[s]),
                         "excess": float(w.excess.values[s]), "collinearity": float(col.site_cosine.values[s])})
    return pd.DataFrame(rows).set_index(["run", "site"])
