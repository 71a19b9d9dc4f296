"""Merge device parts (``part_<args>.tar.gz`` from ``run_on_device.sh``) into a committed study folder.

    python results/study100m/merge_parts.py results/study100m/scale350m /tmp/out/part_scale350m_mhar_0.tar.gz

A part holds the files its call wrote (an exported run, a capture, an evaluation) and every manifest of
the machine that made it. A fresh machine knows none of the committed runs, so a part's
``runs/manifest.json`` is merged row by row (the part's row wins), never copied over the committed one;
every other file of the part replaces the committed file of the same path. Prompt shards (named by their
content) then move to the one shared copy in ``--prompts-root``'s ``prompts/``
(``mhar_probe.samplestore.share_shards``). A part that does not read as a tar archive, or that holds a
path outside ``runs/``, stops the merge before anything is written.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from mhar_probe.samplestore import share_shards
from mhar_probe.errors import UserError
from mhar_probe.sweep.manifest import MANIFEST, merge_into_manifest, read_manifest


def merge_part(part: Path, study: Path) -> list[Path]:
    """Unpack `part` beside `study` and merge it in; returns the files written under `study`."""
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = Path(tmp)
        try:
            with tarfile.open(part) as archive:
                names = archive.getnames()
                outside = [n for n in names if Path(n).parts and Path(n).parts[0] != "runs"]
                if outside:
                    raise SystemExit(f"merge_parts: {part} holds {outside[0]!r}, outside runs/; nothing merged")
                archive.extractall(unpacked, filter="data")
        except (tarfile.TarError, OSError) as error:
            raise SystemExit(f"merge_parts: {part} is not a readable part ({error}); nothing merged") from None
        written: list[Path] = []
        manifests = sorted(p.parent for p in unpacked.rglob(MANIFEST))
        parsed = [(sweep, read_manifest(sweep), read_manifest(study / sweep.relative_to(unpacked)))
                  for sweep in manifests]  # every manifest read (and refused if malformed) before any write
        for sweep, new, _ in parsed:
            target = study / sweep.relative_to(unpacked)
            target.mkdir(parents=True, exist_ok=True)
            written.append(merge_into_manifest(target, new))  # type: ignore[arg-type]
        for f in sorted(p for p in unpacked.rglob("*") if p.is_file() and p.name != MANIFEST):
            dst = study / f.relative_to(unpacked)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
            written.append(dst)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path, help="the committed study folder (holds runs/)")
    parser.add_argument("parts", type=Path, nargs="+", help="part_*.tar.gz files, merged in order")
    parser.add_argument("--prompts-root", type=Path, default=Path("results/study100m"),
                        help="folder whose prompts/ keeps the one copy of each prompt shard")
    args = parser.parse_args(argv)
    for part in args.parts:
        if not part.is_file():
            raise SystemExit(f"merge_parts: no part at {part}; nothing merged")
    for part in args.parts:
        try:
            written = merge_part(part, args.study)
        except UserError as error:  # a malformed manifest, the part's or the committed one
            raise SystemExit(f"merge_parts: {part}: {error}; nothing merged") from None
        print(f"{part.name}: {len(written)} files into {args.study}")
    moved = share_shards(args.prompts_root)
    print(f"prompt shards already shared, removed from the parts: {len(moved)}")


if __name__ == "__main__":
    sys.exit(main())
