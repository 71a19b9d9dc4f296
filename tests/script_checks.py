"""Load a repository script (benchmarks/...) as a module for its tests: the scripts are run as files,
not installed, and some import their siblings (adopt_rows.py imports launch_sweep.py). Run a shell
script with a command of it replaced by one that records how it was called (`recording_command`)."""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str) -> ModuleType:
    """The script at ROOT/relpath, executed as the module named by its file's stem (registered in
    sys.modules, its folder on sys.path for its siblings)."""
    path = ROOT / relpath
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def recording_command(bin_dir: Path, name: str, log: Path, line: str = "$*") -> dict[str, str]:
    """An environment whose PATH finds, first, a `name` (in `bin_dir`) that appends `line` (bash
    expands it: by default its arguments) to `log` instead of running: what a device script
    would start, read on a CPU."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    fake = bin_dir / name
    fake.write_text(f'#!/usr/bin/env bash\necho "{line}" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
