"""`mhar probe RUN_OR_DATASET...`: the forced-compromise probes as paper-style tables.

Each argument is a routing dataset (.nc from `mhar capture`) or a run directory; a run with
RUN/routing.nc uses it, otherwise its held-out text is captured in memory (not saved: use
`mhar capture` to keep it). Writes under --out: probe.{md,tex,csv} (Table tab:probe),
perhead.* (figure fig:perhead statistics, multi-head runs), headalign.* (mhar vs mhar_hw of
the same shape and head count: MHAR H = MHAR-HW's KV groups; an mhar_hw run without such a partner
is named on stdout and left out) and sites.* (per-site values).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import xarray as xr

from mhar_probe.capture.capture import capture_routing
from mhar_probe.capture.errors import CaptureError
from mhar_probe.capture.io import open_routing_dataset
from mhar_probe.capture.runs import check_same_weights, heldout_rows, load_run, row_batches
from mhar_probe.runfiles import RunFiles

from .alignment import heads_of
from .provenance import run_label
from .tables import headalign_table, perhead_table, probe_table, site_table, write_table


def add_probe_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("probe", help="forced-compromise probes of runs / routing datasets as tables")
    p.add_argument("inputs", nargs="+", metavar="RUN_OR_DATASET", help="run directories or routing .nc files")
    p.add_argument("--out", default="probes", help="output directory (default ./probes)")
    p.add_argument("--slices", type=int, default=None, help="query slices S (default 4; must match given datasets)")
    p.add_argument("--draws", type=int, default=None, help="random-query draws (default 8; must match given datasets)")
    p.add_argument("--tokens", type=int, default=65536, help="tokens to capture for runs without routing.nc")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward when capturing")
    p.add_argument("--first-sites", type=int, default=10, help="sites used for the per-head statistics")
    p.add_argument("--overwrite", action="store_true", help="replace existing tables")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=cmd_probe)
    return p


def _compatible(ds: xr.Dataset, slices: int | None, draws: int | None) -> bool:
    return ((slices is None or ds.attrs.get("slices") == slices)
            and (draws is None or ds.attrs.get("null_draws") == draws) and "slice_kl" in ds)


def load_input(path: str, args: argparse.Namespace) -> xr.Dataset:
    p = Path(path)
    if p.is_file():
        ds = open_routing_dataset(p)
        if not _compatible(ds, args.slices, args.draws):
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
        if _compatible(ds, args.slices, args.draws):
            return ds
    model, tokenizer, train_cfg = load_run(p)
    seq_len = train_cfg.get("seq_len") or model.config.max_position_embeddings // 2
    batches, _ = row_batches(heldout_rows(tokenizer, train_cfg, seq_len), args.tokens, args.batch_size)
    return capture_routing(model, batches, slices=args.slices or 4, draws=8 if args.draws is None else args.draws,
                           run_path=p, progress=not args.no_progress, total=len(batches),
                           attrs={"seq_len": int(seq_len)})


def _pairs(datasets: list[xr.Dataset]) -> tuple[list[tuple[xr.Dataset, xr.Dataset]], list[xr.Dataset]]:
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


def cmd_probe(args: argparse.Namespace) -> int:
    out = Path(args.out)
    stems = ["probe", "sites", "perhead", "headalign"]
    existing = [str(out / f"{s}.{e}") for s in stems for e in ("md", "tex", "csv") if (out / f"{s}.{e}").exists()]
    if existing and not args.overwrite:  # fail before any work
        raise CaptureError(f"output file(s) already exist: {', '.join(existing)}; pass --overwrite to replace them")
    datasets = [load_input(p, args) for p in args.inputs]
    written = []
    written += write_table(probe_table(datasets), out, "probe", overwrite=args.overwrite, label="tab:probe",
                           caption="Direct probe of the routing queries (S slices; random-query null; learned excess).")
    written += write_table(site_table(datasets), out, "sites", overwrite=args.overwrite,
                           caption="Per-site width-disagreement (contiguous slices) and source collinearity.")
    multi = [ds for ds in datasets if ds.sizes["head"] > 1]
    if multi:
        written += write_table(perhead_table(multi, args.first_sites), out, "perhead", overwrite=args.overwrite,
                               caption="Per-head deviation from the head consensus (figure fig:perhead statistics).")
    pairs, unmatched = _pairs(datasets)
    for hw in unmatched:
        print(f"head alignment: no mhar run of {run_label(hw)}'s shape with H = {heads_of(hw)} among the inputs; "
              f"{run_label(hw)} is not compared")
    if pairs:
        written += write_table(headalign_table(pairs), out, "headalign", overwrite=args.overwrite,
                               label="tab:headalign", caption="Head alignment: MHAR vs MHAR-HW.")
    for ds in datasets:
        ds.close()
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
