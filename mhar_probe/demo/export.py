"""Export what a study's report needs, without weights, into a results folder.

The GPU ladder trains, captures and evaluates on the device machine, one call per group of
grids; each call exports its runs here, and the folder is merged call by call. The report
stages (probe, stats, claims, figures, report) then read nothing else, so the folder can be
committed and regenerated on any CPU.

Copied: each sweep's manifest.json (merged: a run's row from the newer export wins), and of
every run its RUN_FILES (configs, summary, the sessions that trained it, corpus composition, metrics gzipped as
metrics.jsonl.gz, routing dataset with its random-query null kept as the per-draw statistics the
probes and claims read, `analysis.probes.null_summary`: 2.1 MB -> ~0.3 MB for 8 heads), and
every file of the harness outputs under runs/evals/, its samples files in the compact form
(`mhar_probe.samplestore`: `samples_<task>_<date>.compact.jsonl.gz` holds the run's per-item
results, and the prompts, the same for every run of a plan, go once into
`runs/evals/prompts/<task>.<digest>.jsonl.gz`, named by their content so that parts unpacked
over a committed folder add a prompt set, never change one; 0.66 MB -> 0.07 MB a run for 1,000
items of each of two tasks). Not copied: weights, checkpoints, tokenizers, model code.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from ..runfiles import CONFIG, CORPUS, METRICS, METRICS_GZ, ROUTING, SESSIONS, SUMMARY, TRAIN_CONFIG
from ..samplestore import (PROMPTS_DIR, compact, compact_name, find_shard, is_compact, is_harness_samples, read_header,
                           read_shard, write_shard)
from ..sweep.manifest import merge_into_manifest, read_manifest

RUN_FILES = (CONFIG, TRAIN_CONFIG, SUMMARY, SESSIONS, CORPUS, METRICS, ROUTING)


def sweep_dirs(out: Path) -> list[Path]:
    """Sweep directories of a study: OUT/runs and OUT/ladder/d<width>."""
    found = [out / "runs"] + sorted((out / "ladder").glob("d*"))
    return [d for d in found if (d / "manifest.json").exists()]


def export_study(out: Path, dest: Path) -> list[Path]:
    """Copy the report's inputs from `out` into `dest` (merging manifests); returns the files written."""
    written: list[Path] = []
    for sweep in sweep_dirs(out):
        target = dest / sweep.relative_to(out)
        target.mkdir(parents=True, exist_ok=True)
        new = read_manifest(sweep)
        for row in new["runs"]:  # type: ignore[index]
            src, dst = sweep / row["name"], target / row["name"]
            for name in RUN_FILES:
                if (src / name).exists():
                    dst.mkdir(exist_ok=True)
                    if name == METRICS:  # 3.5x smaller; RunFiles reads either form
                        gzip_copy(src / name, dst / METRICS_GZ)
                        written.append(dst / METRICS_GZ)
                        continue
                    if name == ROUTING:  # ~7x smaller; the probes read either form of the null
                        summarise_routing(src / name, dst / name)
                        written.append(dst / name)
                        continue
                    shutil.copy2(src / name, dst / name)
                    written.append(dst / name)
        written.append(merge_into_manifest(target, new))  # type: ignore[arg-type]
    evals = out / "runs" / "evals"
    prompts = dest / "runs" / "evals" / PROMPTS_DIR
    for f in sorted(p for p in evals.rglob("*") if p.is_file()) if evals.is_dir() else []:
        dst = dest / f.relative_to(out)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if is_harness_samples(f):  # ~9x smaller; analysis.stats.lm_eval_io reads it as the harness's file
            dst = dst.with_name(compact_name(f))
            tmp = dst.with_name(f".tmp.{dst.name}")  # a re-export replaces the file only once the new one reads back
            tmp.unlink(missing_ok=True)
            done = compact(f, prompts, tmp)
            shutil.copystat(f, tmp)
            os.replace(tmp, dst)
            written += [dst] + ([done.shard] if done.shard not in written else [])
        elif f.parent.name == PROMPTS_DIR and f.parent.parent == evals:  # a prompt set (exporting an export)
            shard, _ = write_shard(read_shard(f), dst.parent)  # checked; one already there must be the same
            written += [shard] if shard not in written else []
        elif is_compact(f):  # exporting an export: its prompt set may be shared above it (share_shards)
            shutil.copy2(f, dst)
            shard, _ = write_shard(read_shard(find_shard(f, read_header(f)["prompts"])), prompts)
            written += [dst] + ([shard] if shard not in written else [])
        else:
            shutil.copy2(f, dst)
            written.append(dst)
    return written


def summarise_routing(src: Path, dst: Path) -> bool:
    """Write `src`'s routing dataset to `dst` (may be `src`: converted in place, atomically) with its
    null maps replaced by their per-draw statistics (`analysis.probes.null_summary.summarise_null`);
    returns whether it summarised. A dataset already without null maps is copied as it is, and so is
    a file that is not a routing dataset (the report stage's reader names it)."""
    from analysis.probes.null_summary import has_null_draws, summarise_null

    from ..capture.errors import CaptureError
    from ..capture.io import open_routing_dataset, write_dataset

    try:
        ds = open_routing_dataset(src, load=False)
    except CaptureError:
        ds = None
    try:
        if ds is None or not has_null_draws(ds) or any("sample" in ds[v].dims for v in ds.data_vars):
            if src.resolve() != dst.resolve():
                shutil.copy2(src, dst)
            return False
        out = summarise_null(ds.load())
    finally:
        if ds is not None:
            ds.close()
    write_dataset(out, dst, overwrite=True)
    return True


def gzip_copy(src: Path, dst: Path) -> None:
    """`src` gzipped into `dst` (level 9, no name or time in the header, so the bytes depend on
    the content alone), with `src`'s modification time (metrics.jsonl: 3.5x smaller; `RunFiles`
    reads either form)."""
    with src.open("rb") as fin, dst.open("wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as fout:
        shutil.copyfileobj(fin, fout)
    shutil.copystat(src, dst)
