"""The one guard every command passes before it writes, replaces or deletes an output.

A command that takes ``--overwrite`` (train, cpt, sweep, eval, capture, convert, demo) calls
`check_output` once, with every other input already checked or about to be, and deletes or
replaces nothing until it returns and every later check has passed. It refuses, with one
`UserError` line:

- an output that is one of the command's inputs (a run, a model, a corpus), or contains one;
- an output inside an input that would land in, or replace, something the input already holds
  (``RUN/model.safetensors``, ``RUN/checkpoint/x``); a new entry beside the input's files (the
  default ``RUN/routing.nc``, ``RUN/eval``) and an earlier output of the same command are fine;
- an existing, non-empty output without ``--overwrite``;
- with ``--overwrite``, an output that its own command did not write (``OutputKind.is_own``);
- contradicting flags (`refuse_together`, e.g. ``--overwrite --resume``);
- a device this machine does not have (`check_device`, e.g. ``--device cuda`` without CUDA).

Outputs themselves appear whole or not at all through `mhar_probe.atomic` (a temporary beside
the target, renamed into place), so a killed command leaves only dot-named temporaries that
never block its rerun.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .errors import UserError

__all__ = ["OutputKind", "check_output", "check_apart", "refuse_together", "check_device", "is_empty"]

#: the lock file a writer holds in its output directory (`mhar_probe.rundir.RunLock`); never content
LOCK_FILE = ".mhar-lock"


@dataclass(frozen=True)
class OutputKind:
    """What one command writes: its name in messages, whether it is a directory, and how to
    recognise one that the command wrote earlier (so that ``--overwrite`` replaces only that)."""

    what: str  # e.g. "run directory", "routing dataset"
    directory: bool
    is_own: Callable[[Path], bool]
    marker: str = ""  # how `is_own` tells, for the message (e.g. "train_config.json")
    error: type[UserError] = UserError  # what the command raises for its refused inputs


def is_empty(path: Path) -> bool:
    """A directory with nothing in it but the run lock."""
    return path.is_dir() and all(p.name == LOCK_FILE for p in path.iterdir())


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(Path(path).expanduser())).resolve()


def check_apart(out: str | os.PathLike[str], inputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
                kind: OutputKind) -> None:
    """Refuse an output that is, contains, or would write into the contents of an input.

    `inputs`: (what, path) pairs, e.g. ("run", RUN); None paths are skipped. An output strictly
    inside an input may only be a new entry of it (nothing there yet on its way down) or an
    earlier output of the same `kind` directly in it."""
    target = _resolved(out)
    for what, path in inputs:
        if path is None:
            continue
        src = _resolved(path)
        if target == src:
            raise kind.error(f"the output {out} is the input {what} {path}; choose another output")
        if src.is_relative_to(target):
            raise kind.error(f"the output {out} contains the input {what} {path}; choose another output")
        if target.is_relative_to(src) and src.is_dir():
            entry = src / target.relative_to(src).parts[0]
            own = entry == target and (kind.is_own(entry) or (kind.directory and is_empty(entry)))
            if entry.exists() and not own:
                raise kind.error(f"the output {out} would write into {entry.name}"
                                f"{'/' if entry.is_dir() else ''} of the input {what} {path}; "
                                f"choose another output")


def check_output(out: str | os.PathLike[str], kind: OutputKind, *, overwrite: bool,
                 inputs: Iterable[tuple[str, str | os.PathLike[str] | None]] = ()) -> bool:
    """Check that `out` may be written; returns True when an existing output will be replaced.

    Changes nothing: the caller replaces or deletes only after all its other checks passed."""
    path = Path(out)
    check_apart(path, inputs, kind)
    blocked = next((a for a in path.parents if a.exists() and not a.is_dir()), None)
    if blocked is not None:
        raise kind.error(f"the output {out} cannot be created: {blocked} is a file, not a directory")
    if not path.exists() and not path.is_symlink():
        return False
    if kind.directory and not path.is_dir():
        raise kind.error(f"the output {out} exists and is not a directory")
    if not kind.directory and path.is_dir():
        raise kind.error(f"the output {out} is a directory; give a file name for the {kind.what}")
    if kind.directory and is_empty(path):
        return False
    if not overwrite:
        raise kind.error(f"{out} already exists; pass --overwrite to replace it or choose another output")
    if path.is_symlink() or not kind.is_own(path):
        how = f" (no {kind.marker})" if kind.marker else ""
        article = "an" if kind.what[0] in "aeiou" else "a"
        raise kind.error(f"refusing to --overwrite {out}: it is not {article} {kind.what}{how}, so this command "
                        f"did not write it; move it away or choose another output")
    return True


def refuse_together(**flags: bool) -> None:
    """Refuse contradicting flags given together, e.g. ``refuse_together(resume=..., overwrite=...)``."""
    given = [name for name, on in flags.items() if on]
    if len(given) > 1:
        names = " and ".join("--" + n.replace("_", "-") for n in given)
        raise UserError(f"{names} contradict each other; pass only one")


def check_device(device: str | None) -> None:
    """A `--device` that names a torch device this machine has (None: the default one)."""
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise UserError(f"--device {device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--device {device}: MPS is not available on this machine; use --device cpu")
