"""Atomic output: a file or directory appears whole under its final name, or not at all.

The project's one implementation of "write under a temporary name, then rename". Everything is
staged in the target's own directory (so the rename never crosses a file system) and moved into
place with ``os.replace``:

- files: `write_bytes` / `write_text` / `write_json`, or `write_with` for a writer that wants a
  path (``np.save``, ``savefig``, ``to_netcdf``). The temporary ``.NAME.XXXX.tmp`` is fsynced
  before the rename (after a crash the final name never points at unwritten data) and removed
  if anything fails, ``KeyboardInterrupt`` included.
- directories: `build_dir` fills a staging directory ``.NAME.tmp-XXXX`` through a callback and
  renames it into place -- either the first writer wins (caches shared by concurrent processes)
  or an existing directory is replaced (`replace_dir`: the old one is moved aside first and
  removed only afterwards). `staging_dir` and `replace_dir` are the two halves for callers whose
  staging outlives one function.

A killed writer leaves only dot-named temporaries beside the target, never a partial file under
the real name (`mhar_probe.rundir.TEMPORARY_GLOBS` sweeps them out of run directories).

Permissions: ``mkstemp`` / ``mkdtemp`` create owner-only temporaries (0600 / 0700), so before a
temporary takes its final name it gets what ``open`` / ``mkdir`` would have given it,
``0o666 & ~umask`` for a file and ``0o777 & ~umask`` for a directory (0644 / 0755 under the usual
umask 022): results written on a shared machine are as readable as any other file of the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

__all__ = ["temp_file", "replace_file", "write_with", "write_bytes", "write_text", "write_json",
           "staging_dir", "replace_dir", "build_dir", "move_entries", "current_umask", "file_mode", "dir_mode",
           "give_new_file_modes"]

PathLike = str | os.PathLike[str]


# ---------------------------------------------------------------------------- permissions
def current_umask() -> int:
    """The process's umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0o666 & ~umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode ``mkdir`` gives a new directory: 0o777 & ~umask."""
    return 0o777 & ~current_umask()


# ---------------------------------------------------------------------------- files
def temp_file(path: PathLike) -> Path:
    """Create an empty temporary file ``.NAME.XXXX.tmp`` beside `path` (making its folder).

    For writers that stream into the temporary over a long time (see `write_with`'s `into`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(tmp: PathLike, path: PathLike) -> Path:
    """Flush the finished temporary `tmp` to disk, give it the mode of a newly created file
    (`file_mode`: mkstemp made it 0600) and rename it over `path`.

    On any failure `tmp` is removed and `path` keeps its old content."""
    tmp, path = Path(tmp), Path(path)
    try:
        _fsync(tmp)
        tmp.chmod(file_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_with(path: PathLike, write: Callable[[Path], object], *, into: Path | None = None) -> Path:
    """Make `path` by ``write(tmp)`` on a temporary beside it, then `replace_file`.

    `into`: a temporary from `temp_file` that already holds part of the output (it is passed
    to `write` and renamed). If `write` raises, the temporary is removed and `path` untouched.
    """
    path = Path(path)
    tmp = into if into is not None else temp_file(path)
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return replace_file(tmp, path)


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically (making its folder); returns `path`."""
    return write_with(path, lambda tmp: tmp.write_bytes(data))


def write_text(path: PathLike, text: str) -> Path:
    """Write `text` as UTF-8 to `path` atomically, newlines untranslated; returns `path`."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: PathLike, obj: Any, *, sort_keys: bool = True,
               default: Callable[[Any], Any] | None = None) -> Path:
    """Write `obj` as indented JSON (keys sorted unless told otherwise) plus a final newline."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=sort_keys, default=default) + "\n")


# ---------------------------------------------------------------------------- directories
def staging_dir(final: PathLike, *, prefix: str | None = None, mode: int | None = None) -> Path:
    """Create an empty staging directory beside `final` (``.NAME.tmp-XXXX`` unless `prefix`).

    It gets the mode of a newly made directory (`dir_mode`, 0755 under umask 022; mkdtemp
    alone would make it 0700) unless `mode` says otherwise."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix if prefix is not None else f".{final.name}.tmp-",
                                dir=final.parent))
    tmp.chmod(mode if mode is not None else dir_mode())
    return tmp


def give_new_file_modes(folder: PathLike) -> None:
    """Give every file under the staging directory `folder` the mode of a newly created file
    (`file_mode`) and every folder below it that of a new directory (`dir_mode`): some writers
    (safetensors' ``save_file``) create owner-only files whatever the umask."""
    fmode, dmode = file_mode(), dir_mode()
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), dmode)
        for name in files:
            os.chmod(os.path.join(root, name), fmode)


def replace_dir(tmp: PathLike, dst: PathLike, *, aside: Path | None = None) -> Path:
    """Rename the finished directory `tmp` to `dst`, replacing whatever `dst` was.

    An existing `dst` is first renamed aside -- to `aside` if given (a stale one is removed
    first), else into a fresh ``.NAME.old-XXXX`` beside it -- and deleted only once the new one
    is in place, so at every instant either `dst` or a complete copy beside it exists.
    """
    tmp, dst = Path(tmp), Path(dst)
    old_root: Path | None = None
    if dst.exists():
        if aside is None:
            old_root = Path(tempfile.mkdtemp(prefix=f".{dst.name}.old-", dir=dst.parent))
            os.replace(dst, old_root / dst.name)
        else:
            if aside.exists():
                shutil.rmtree(aside)
            os.replace(dst, aside)
            old_root = aside
    os.replace(tmp, dst)
    if old_root is not None:
        shutil.rmtree(old_root, ignore_errors=True)
    return dst


def build_dir(final: PathLike, fill: Callable[[Path], object], *, replace: bool = False,
              aside: Path | None = None, mode: int | None = None) -> Path:
    """Create directory `final` by ``fill(tmp)`` on a `staging_dir` beside it, then one rename.

    replace=False: the first writer wins -- if another process put `final` in place meanwhile,
        this copy is discarded and theirs kept (for caches shared by concurrent processes).
    replace=True: an existing `final` is replaced through `replace_dir` (with its `aside`).
    What `fill` wrote gets the modes of new files and folders (`give_new_file_modes`).
    The staging directory is removed whatever happens (except a kill); returns `final`.
    """
    final = Path(final)
    tmp = staging_dir(final, mode=mode)
    try:
        fill(tmp)
        give_new_file_modes(tmp)
        if replace:
            replace_dir(tmp, final, aside=aside)
        else:
            try:
                os.replace(tmp, final)  # fails if another writer's non-empty `final` is there
            except OSError:
                if not final.is_dir():
                    raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def move_entries(tmp: PathLike, dst: PathLike) -> list[Path]:
    """Move every entry of the finished staging directory `tmp` into the existing directory
    `dst`, each by one fsynced rename over its namesake (files already there but not in `tmp`
    are kept). Returns the new paths in name order."""
    tmp, dst = Path(tmp), Path(dst)
    return [replace_file(entry, dst / entry.name) for entry in sorted(tmp.iterdir())]
