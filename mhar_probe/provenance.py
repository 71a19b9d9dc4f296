"""Where a result came from: the code that ran, the software it ran on, and the card.

A run (`mhar train`, `mhar cpt`) records one *session* per process that trains it: the fresh start
and every `--resume`. A session is

    {"step": the step it started from, "time": ISO 8601 UTC,
     "code": code_record(), "software": software(), "hardware": hardware_record(...)}

kept in the run's `sessions.json` while it trains and copied into `summary.json["provenance"]`
when it finishes (`mhar_probe.train`). `cards(...)` and `commits(...)` read them back.

The code
    `code_record()` names the commit and whether the tree differed from it (`dirty`), and always
    the SHA-256 of the package's own files (`code_sha256`: every file of `mhar_probe/` but caches,
    path and bytes), so two runs with the same digest ran the same package code. The commit comes
    from, in this order:
      1. the stamp (`STAMP` at the checkout's root), when its `code_sha256` is this tree's: the
         device scripts write it here with `python -m mhar_probe.provenance stamp` before a tree is
         copied to a machine whose git metadata does not describe the copy (it has been seen
         reading a stale id there); a stamp whose digest differs is stale and is not believed;
      2. git, where the package lies in a checkout (`git rev-parse HEAD`, `git status --porcelain`);
      3. nothing (`commit` None): an installed package, named by `package_version`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_DIR = PACKAGE_DIR.parent
#: the stamp at a checkout's root (git-ignored; the device scripts carry it with the tree)
STAMP = ".mhar-stamp.json"
_SKIPPED_PARTS = frozenset({"__pycache__"})


def code_digest(package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 over the package's files in sorted path order, each as (path, length, bytes);
    bytecode caches left out."""
    h = hashlib.sha256()
    files = sorted(p for p in package_dir.rglob("*")
                   if p.is_file() and not _SKIPPED_PARTS.intersection(p.parts) and p.suffix != ".pyc")
    for path in files:
        rel = path.relative_to(package_dir).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _git(root: Path, *args: str) -> str | None:
    """`git -C root ARGS`'s output, or None where git is missing or fails (stderr kept quiet)."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(root: Path = CHECKOUT_DIR) -> tuple[str, bool] | None:
    """(full commit id of HEAD, whether the code differs from it), or None where `root` is no git
    checkout. Dirty: a tracked file changed anywhere, or a file git does not ignore added inside
    the package (new results or logs beside it leave the code as committed)."""
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=all")
    if status is None:
        return head.strip(), True
    package = PACKAGE_DIR.name + "/"
    dirty = any(line[3:] != STAMP and (not line.startswith("??") or line[3:].startswith(package))
                for line in status.splitlines() if line)
    return head.strip(), dirty


def git_commit(where: str | Path | None = None) -> str | None:
    """The short commit of the checkout holding `where` (default: this package), or None where
    there is no git history (a copied tree) or no git."""
    out = _git(Path(where) if where is not None else PACKAGE_DIR, "rev-parse", "--short", "HEAD")
    return out.strip() or None if out else None


def write_stamp(root: Path = CHECKOUT_DIR) -> dict[str, Any]:
    """Write `root/STAMP`: this checkout's commit, dirty flag and code digest (before the tree is
    copied to a machine whose git metadata cannot be trusted). Refused where `root` is no checkout."""
    state = git_state(root)
    if state is None:
        raise RuntimeError(f"{root}: not a git checkout; a stamp names a commit")
    commit, dirty = state
    stamp = dict(commit=commit, dirty=dirty, code_sha256=code_digest(root / PACKAGE_DIR.name),
                 stamped=_now())
    tmp = root / f".{STAMP}.tmp"
    tmp.write_text(json.dumps(stamp, indent=1) + "\n")
    tmp.replace(root / STAMP)
    return stamp


def read_stamp(root: Path = CHECKOUT_DIR) -> dict[str, Any] | None:
    """The stamp at `root`, or None where there is none or it is not a stamp."""
    try:
        doc = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("commit"), str) and isinstance(doc.get("code_sha256"), str)
    return doc if ok else None


def code_record(package_dir: Path = PACKAGE_DIR) -> dict[str, Any]:
    """{"commit", "dirty", "from": "stamp" | "git" | None, "package_version", "code_sha256"} of the
    code this process imported (module docstring: which source wins)."""
    digest = code_digest(package_dir)
    root = package_dir.parent
    version = sys.modules[__package__].__version__  # (the package, imported before any of its modules)
    record: dict[str, Any] = dict(commit=None, dirty=None, source=None, package_version=version,
                                  code_sha256=digest)
    stamp = read_stamp(root)
    if stamp is not None and stamp["code_sha256"] == digest:
        return {**record, "commit": stamp["commit"], "dirty": bool(stamp.get("dirty")), "source": "stamp"}
    state = git_state(root) if (root / "pyproject.toml").exists() else None
    if state is not None:
        record.update(commit=state[0], dirty=state[1], source="git")
    if stamp is not None:  # a stamp of another tree: kept as a note, never as the commit
        record["stale_stamp"] = stamp["commit"]
    return record


def software() -> dict[str, str | None]:
    """Python, torch, CUDA (None on a CPU build), Triton and transformers (None where not installed)."""
    import torch

    def version(name: str) -> str | None:
        try:
            return __import__(name).__version__
        except ImportError:
            return None

    return dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
                triton=version("triton"), transformers=version("transformers"))


def hardware_record(device: Any, world_size: int = 1) -> dict[str, Any]:
    """The card (or CPU) a process computes on, how many the host has, and the processes of the run:
    {"device", "device_count", "world_size", "host"}."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        name, count = torch.cuda.get_device_name(dev), torch.cuda.device_count()
    else:
        import os

        name = f"cpu ({platform.machine()})"
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return dict(device=name, device_count=count, world_size=int(world_size), host=socket.gethostname())


def session_record(step: int, device: Any, world_size: int = 1) -> dict[str, Any]:
    """One session of a run (module docstring), starting at `step`."""
    return dict(step=int(step), time=_now(), code=code_record(), software=software(),
                hardware=hardware_record(device, world_size))


def benchmark_record(device: Any, commit: str | None = None, package_dir: Path = PACKAGE_DIR) -> dict[str, Any]:
    """Where a benchmark's numbers came from: {"time", "code", "software", "hardware"}, as a run's
    session without its step. `commit` (a device script's `--commit`, for a copied tree without a
    stamp) fills `code["commit"]` only where neither the stamp nor git named one."""
    code = code_record(package_dir)
    if code["commit"] is None and commit:
        code.update(commit=commit, source="argument")
    return dict(time=_now(), code=code, software=software(), hardware=hardware_record(device))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def cards(sessions: Iterable[dict[str, Any]]) -> list[str]:
    """The distinct cards of `sessions`, as "N x NAME" (N: the processes), in first-seen order."""
    seen: dict[str, None] = {}
    for s in sessions:
        hw = s.get("hardware") or {}
        seen[f"{hw.get('world_size', 1)} x {hw.get('device')}"] = None
    return list(seen)


def commits(sessions: Iterable[dict[str, Any]], short: int = 7) -> list[str]:
    """The distinct commits of `sessions` (first `short` characters, "+dirty" where the tree
    differed, "unknown" where none was recorded), in first-seen order."""
    seen: dict[str, None] = {}
    for s in sessions:
        code = s.get("code") or {}
        commit = code.get("commit")
        seen[(commit[:short] + ("+dirty" if code.get("dirty") else "")) if commit else "unknown"] = None
    return list(seen)


def main(argv: list[str] | None = None) -> int:
    """`python -m mhar_probe.provenance stamp [ROOT]`: write the stamp, print it in one line."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "stamp" or len(args) > 2:
        print("usage: python -m mhar_probe.provenance stamp [CHECKOUT_ROOT]", file=sys.stderr)
        return 2
    root = Path(args[1]) if len(args) == 2 else CHECKOUT_DIR
    try:
        stamp = write_stamp(root)
    except RuntimeError as exc:
        print(f"mhar_probe.provenance: {exc}", file=sys.stderr)
        return 2
    print(f"stamped {root / STAMP}: {stamp['commit'][:12]}{' (dirty)' if stamp['dirty'] else ''} "
          f"code {stamp['code_sha256'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
