"""Run directories: the lock, preparing one for a run, checkpoints, metrics and saved models.

A run directory's files (config.json and model.safetensors, tokenizer, train_config.json,
corpus.json, metrics.jsonl, summary.json, checkpoint/) are named and read back in
`mhar_probe.runfiles` (`RunFiles`); this module writes and guards them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from . import atomic
from .errors import UserError
from .outputs import LOCK_FILE, OutputKind, check_output, refuse_together
from .runfiles import CHECKPOINT, CONFIG, STATE, TRAIN_CONFIG, WEIGHTS, RunFiles

T = TypeVar("T")

#: what makes a directory a run of this project (train and cpt both write them)
RUN_MARKERS = (TRAIN_CONFIG, f"{CHECKPOINT}/{STATE}")
#: temporaries a killed writer leaves behind: checkpoint staging, the swap's old copy, atomic
#: writes, Hugging Face export staging
TEMPORARY_GLOBS = (f".{CHECKPOINT}.*", ".*.tmp", ".hf-tmp-*")


class RunLock:
    """An exclusive lock on one run directory, held until `release` (or the process's end).

    `fcntl.flock` on RUN/.mhar-lock: the kernel drops it when its holder dies, so a lock left
    by a killed process is simply taken over. The file names its holder (pid, host, command,
    time) for the message a second writer gets."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.created = False
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        if self.out.exists() and not self.out.is_dir():
            raise UserError(f"output path {self.out} exists and is not a directory")
        self.created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise UserError(f"run directory {self.out} is in use by {holder}; wait for it to end "
                            f"or stop it first") from None
        command = " ".join(sys.argv)[:300]
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} ({command}) since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Unlock; a directory this lock created that holds nothing else is removed again."""
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        if self.created and [p.name for p in self.out.iterdir()] == [LOCK_FILE]:
            shutil.rmtree(self.out, ignore_errors=True)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_run_dir(out: Path) -> bool:
    return any((out / marker).exists() for marker in RUN_MARKERS)


#: what `mhar train` and `mhar cpt` write: --overwrite replaces only one of these
RUN = OutputKind("run directory", directory=True, is_own=is_run_dir, marker=" or ".join(RUN_MARKERS))

Inputs = Iterable[tuple[str, "str | os.PathLike[str] | None"]]


def _contents(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.name != LOCK_FILE) if out.is_dir() else []


def check_run_dir(out: Path, *, resume: bool, overwrite: bool, inputs: Inputs = ()) -> bool:
    """What `prepare_run_dir` will do, checked without changing anything; returns True when an
    existing run will be resumed. Raises `UserError` for what it would refuse: --resume with
    --overwrite, an `out` that is or holds one of `inputs` ((what, path) pairs: corpus,
    tokenizer, source model), a non-empty `out` without a flag, and --overwrite of a folder that
    is not a run directory (`mhar_probe.outputs.check_output`)."""
    refuse_together(resume=resume, overwrite=overwrite)
    if out.exists() and not out.is_dir():
        raise UserError(f"output path {out} exists and is not a directory")
    contents = _contents(out)
    if resume:
        if RunFiles(out).state_path.exists() or _recoverable_checkpoint(out) is not None:
            return True
        if contents and not killed_before_checkpoint(out):
            raise UserError(f"cannot resume: {out} has no checkpoint ({out / CHECKPOINT}); "
                            f"use --overwrite to start over")
        return False  # nothing yet, or a run killed before its first checkpoint: from step 0
    if contents and not overwrite:
        raise UserError(f"output directory {out} already exists and is not empty; "
                        f"pass --overwrite to replace it or --resume to continue it")
    check_output(out, RUN, overwrite=overwrite, inputs=inputs)
    return False


def prepare_run_dir(out: Path, *, resume: bool, overwrite: bool, inputs: Inputs = ()) -> bool:
    """Make `out` ready for the run, under its `RunLock` and after every other input was checked:
    recover an interrupted checkpoint swap, remove temporaries of killed writers, and with
    `overwrite` (or --resume of a run killed before its first checkpoint) empty a previous run
    (only a run directory; see `check_run_dir`). Returns True when an existing run is resumed."""
    resumed = check_run_dir(out, resume=resume, overwrite=overwrite, inputs=inputs)
    out.mkdir(parents=True, exist_ok=True)
    if resumed:
        recover_checkpoint(out)
        remove_temporaries(out)
    elif overwrite or (resume and killed_before_checkpoint(out)):
        for p in _contents(out):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    return resumed


def killed_before_checkpoint(out: Path) -> bool:
    """A run killed before its first checkpoint: train_config.json, but no checkpoint (nor a copy
    a killed swap left beside it), no summary.json and no final model. Nothing in it can be
    resumed and nothing is lost by starting it again, so --resume does that (with its saved
    settings) instead of refusing."""
    files = RunFiles(out)
    return (files.train_config_path.is_file() and not files.checkpoint_path.exists()
            and _recoverable_checkpoint(out) is None and not files.summary_path.exists()
            and not files.weights_path.exists())


def _recoverable_checkpoint(out: Path) -> Path | None:
    """Where `checkpoint/` is missing: the newest complete copy a killed swap left beside it
    (the staged new one, or the old one moved aside), else None."""
    if not out.is_dir() or (out / CHECKPOINT).exists():
        return None
    complete = []
    for d in out.glob(f".{CHECKPOINT}.*"):
        try:
            complete.append((json.loads((d / STATE).read_text())["step"], d))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # staging that was cut off before its state was written
    return max(complete, key=lambda c: c[0])[1] if complete else None


def recover_checkpoint(out: Path) -> None:
    """Finish a checkpoint swap that a kill interrupted between its renames."""
    found = _recoverable_checkpoint(out)
    if found is not None:
        os.replace(found, out / CHECKPOINT)


def remove_temporaries(out: Path) -> None:
    """Remove what killed writers left behind (call with the run's lock held)."""
    for pattern in TEMPORARY_GLOBS:
        for p in out.glob(pattern):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def save_checkpoint(out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    state: dict[str, Any]) -> None:
    """Model weights (safetensors), optimizer state and trainer state, swapped in atomically."""
    def fill(tmp: Path) -> None:
        tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(_untie(tensors), tmp / WEIGHTS)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        atomic.write_json(tmp / STATE, state)  # last: a staging copy with state.json is complete

    write_checkpoint(out, fill)


def write_checkpoint(out: Path, fill: Callable[[Path], object]) -> None:
    """Replace RUN/checkpoint by a directory that ``fill(tmp)`` writes in full beside it.

    The staging copy (``.checkpoint.tmp-*``) and the old one moved aside (``.checkpoint.old``)
    both match ``.checkpoint.*``, where `recover_checkpoint` looks after a kill between renames."""
    atomic.build_dir(out / CHECKPOINT, fill, replace=True, aside=out / f".{CHECKPOINT}.old")


def _untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage: keep one copy of tied weights (reloaded by tying)."""
    seen: dict[int, str] = {}
    kept = {}
    for k, v in tensors.items():
        ptr = v.data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = k
        kept[k] = v
    return kept


def load_checkpoint(out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    steps: int | None = None) -> dict[str, Any]:
    """Restore model and optimizer in place; returns the trainer state (its step an integer in
    [0, steps], `runfiles.read_state`). Clear errors if corrupt."""
    ckpt = out / CHECKPOINT
    state = read_checkpoint_state(out, steps)
    try:
        tensors = load_file(ckpt / WEIGHTS)
        opt_state = torch.load(ckpt / "optimizer.pt", weights_only=True, map_location="cpu")
    except FileNotFoundError as exc:
        raise UserError(f"checkpoint in {ckpt} is incomplete: {exc.filename} is missing") from exc
    except Exception as exc:  # corrupt json / safetensors / pickle
        raise UserError(f"checkpoint in {ckpt} is corrupt ({type(exc).__name__}: {exc}); "
                        f"use --overwrite to start over") from exc
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise UserError(f"checkpoint in {ckpt} does not match the model "
                        f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})")
    optimizer.load_state_dict(opt_state)
    return state


def read_checkpoint_state(out: Path, steps: int | None = None) -> dict[str, Any]:
    """RUN/checkpoint/state.json, checked (`runfiles.read_state`): read before any tensor is."""
    files = RunFiles(out)
    if not files.state_path.is_file():
        raise UserError(f"checkpoint in {files.checkpoint_path} is incomplete: {files.state_path} is missing")
    return files.state(steps)


def write_metrics(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic.write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


#: what loading a saved model or tokenizer raises for files that are missing, truncated,
#: corrupt or of the wrong types (as opposed to a bug in this code)
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, SafetensorError)


def load_pretrained(loader: Callable[..., T], path: str | os.PathLike, what: str, **kwargs: Any) -> T:
    """`loader(path, **kwargs)` -- a `from_pretrained` -- with a broken directory turned into one
    `UserError` naming it (the traceback stays available with `mhar --debug`)."""
    try:
        return loader(path, **kwargs)
    except LOAD_ERRORS as exc:
        reason = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UserError(f"cannot load the {what} in {path} ({type(exc).__name__}: {reason}); is it a "
                        f"complete model directory with uncorrupted files?") from exc


def unfinished_hint(run: Path) -> str | None:
    """Why the run directory `run` has no final model, and the `--resume` that finishes it: it has a
    checkpoint (training, or stopped), a kill cut a checkpoint swap short, or it was stopped before
    its first checkpoint; None when `run` is none of these (not a run directory at all)."""
    resume = f"`mhar train --out {run} --resume`"
    if RunFiles(run).state_path.is_file():
        return f"it has a checkpoint but no final model (still training, or stopped); {resume} finishes it"
    if _recoverable_checkpoint(run) is not None:
        return f"it was stopped while writing a checkpoint; {resume} recovers that checkpoint and finishes the run"
    if killed_before_checkpoint(run):
        return (f"it was stopped before its first checkpoint (or is still before it); {resume} starts it again "
                f"with its saved settings")
    return None


def require_run_dir(path: str | os.PathLike) -> Path:
    """A finished or checkpointed run directory, or a clear error (pointing to --resume for a run
    killed before or during a checkpoint)."""
    run = Path(path)
    if not run.is_dir():
        raise UserError(f"run directory {run} does not exist")
    if not (run / CONFIG).exists() and not RunFiles(run).state_path.exists():
        hint = unfinished_hint(run)
        raise UserError(f"{run} has no final model and no checkpoint: {hint}" if hint else
                        f"{run} is not a run directory (no {CONFIG} and no {CHECKPOINT}/)")
    return run
