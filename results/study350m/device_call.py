"""The steps of a 350M study device call around training (results/study350m/run_on_device.sh):

    python results/study350m/device_call.py prepare [--tiny] [--roots DIR ...] [--new-manifest] [--unstamped]
    python results/study350m/device_call.py export STUDY_DIR OUT_DIR TAG

prepare: (1) refuses a tree whose code is not named by a valid stamp (`python -m mhar_probe.provenance
stamp` here, before the call: the commit on the record; --unstamped only for the CPU check), (2) unpacks
the carried registry prose corpus (PAPER350_CARRIED + .tar.xz) when its folder is missing, (3) builds the corpus (`mhar corpus
image`, PAPER350_CORPUS) from this machine's text and the carried corpus against the lock in PAPER350_LOCK unless the
folder is there already (an earlier call of the same hold), and copies the lock of what it built, with its
composition, to OUT/corpus_lock.tar.gz; (4) refuses a plan whose vocabulary is not the built corpus's
(`PAPER350_VOCAB`), so that no run trains a tokenizer of its own. --tiny: a CPU stand-in (the roots given,
three small BPE sizes, no vocabulary check).

export: the study folder's runs without weights (`mhar_probe.demo.export`), the files this call wrote and
every manifest, as OUT/part_TAG.tar.gz, for `results/study100m/merge_parts.py results/study350m PART`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from mhar_probe.demo.plan import PAPER350_CARRIED, PAPER350_CORPUS, PAPER350_LOCK, PAPER350_VOCAB
from mhar_probe.provenance import code_record

TINY_VOCAB_SIZES = ("300", "420")


def refuse(message: str) -> int:
    print(f"device_call: {message}", file=sys.stderr)
    return 2


def prepare(args: argparse.Namespace, out: Path) -> int:
    code = code_record()
    print(f"code: {code['commit'] or 'no commit'} dirty={code['dirty']} from {code['source']} "
          f"(package {code['code_sha256'][:12]})", flush=True)
    if code["source"] != "stamp" and not args.unstamped:
        return refuse("no stamp names this tree's code (stale or missing .mhar-stamp.json): run `python -m "
                      "mhar_probe.provenance stamp` before the call and carry .mhar-stamp.json")
    carried = Path(PAPER350_CARRIED)
    if not (carried / "mhar_corpus.json").is_file():
        archive = next((a for a in (Path(f"{PAPER350_CARRIED}.tar.xz"), Path(f"{PAPER350_CARRIED}.tar.gz"))
                        if a.is_file()), None)
        if archive is None:
            return refuse(f"no {carried}/ and no {carried}.tar.xz (or .tar.gz): carry it (`mhar corpus pack`)")
        subprocess.run(["tar", "-xf", str(archive)], check=True)  # (tar reads either compression)
    corpus = Path(PAPER350_CORPUS)
    if not (corpus / "mhar_corpus.json").is_file():
        cmd = [sys.executable, "-m", "mhar_probe.cli", "corpus", "image", "--out", str(corpus), "--lock",
               PAPER350_LOCK, "--with", str(carried), "--exclude", str(out)]  # (this call's log is written there)
        if args.roots:
            cmd += ["--roots", *args.roots]
        if args.new_manifest:
            cmd.append("--new-manifest")
        if args.tiny:
            cmd += ["--vocab-sizes", *TINY_VOCAB_SIZES, "--workers", "2"]
        start = time.perf_counter()
        if subprocess.run(cmd).returncode:
            return refuse("the corpus build failed (above)")
        print(f"corpus built in {time.perf_counter() - start:.0f} s", flush=True)
        with tarfile.open(out / "corpus_lock.tar.gz", "w:gz") as tar:
            tar.add(corpus / "lock", arcname="corpus")
            tar.add(corpus / "composition.md", arcname="corpus/composition.md")
            tar.add(corpus / "mhar_corpus.json", arcname="corpus/mhar_corpus.json")
    manifest = json.loads((corpus / "mhar_corpus.json").read_text())
    print(f"corpus {manifest['fingerprint'][:12]}: {manifest['train_tokens']:,} train tokens at a "
          f"{manifest['vocab_size']:,}-token vocabulary", flush=True)
    if not args.tiny and manifest["vocab_size"] != PAPER350_VOCAB:
        return refuse(f"the plan trains at PAPER350_VOCAB = {PAPER350_VOCAB:,} but the corpus's tokenizer has "
                      f"{manifest['vocab_size']:,} tokens: set PAPER350_VOCAB to it (mhar_probe/demo/plan.py)")
    return 0


def touched_runs(written: list[Path], staging: Path, since: float) -> list[Path]:
    """The files of an export that this call's part carries: every file of each run (runs/RUN/ and
    runs/evals/RUN/) that has any file written since `since`, so the last call of a run exports all of
    it (its corpus.json is written in the first call), the shared prompt shards written since, and the
    sweep's manifest."""
    def group(p: Path) -> str:
        parts = p.relative_to(staging).parts
        if len(parts) > 2 and parts[0] == "runs":
            name = parts[2] if parts[1] == "evals" else parts[1]
            if name != "prompts":
                return name
        return str(p)

    fresh = {group(p) for p in written if p.stat().st_mtime >= since or p.name == "manifest.json"}
    return sorted(p for p in written if group(p) in fresh)


def export(study: Path, out: Path, tag: str, since: float) -> int:
    from mhar_probe.demo.export import export_study

    staging = Path(f"/tmp/export_{study.name}")
    if staging.exists():
        subprocess.run(["rm", "-rf", str(staging)], check=True)
    staging.mkdir(parents=True)
    written = export_study(study, staging)
    keep = touched_runs(written, staging, since)
    with tarfile.open(out / f"part_{tag}.tar.gz", "w:gz") as tar:
        for p in keep:
            tar.add(p, arcname=str(p.relative_to(staging)))
    print(f"exported {len(keep)} of {len(written)} files to {out / f'part_{tag}.tar.gz'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    pre = sub.add_parser("prepare")
    pre.add_argument("--out", default=None, help="where the corpus lock goes (default: $OUT)")
    pre.add_argument("--roots", nargs="+", default=None)
    pre.add_argument("--new-manifest", action="store_true")
    pre.add_argument("--tiny", action="store_true")
    pre.add_argument("--unstamped", action="store_true")
    ex = sub.add_parser("export")
    ex.add_argument("study", type=Path)
    ex.add_argument("out", type=Path)
    ex.add_argument("tag")
    ex.add_argument("--since", type=float, default=0.0, help="keep files written after this time (epoch s)")
    args = p.parse_args(argv)
    if args.step == "prepare":
        import os

        out = Path(args.out or os.environ.get("OUT", "/tmp/out"))
        out.mkdir(parents=True, exist_ok=True)
        return prepare(args, out)
    return export(args.study, args.out, args.tag, args.since)


if __name__ == "__main__":
    sys.exit(main())
