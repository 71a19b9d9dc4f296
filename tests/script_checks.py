"""Load a repository script (benchmarks/...) as a module for its tests: the scripts are run as files,
not installed, and some import their siblings (adopt_rows.py imports launch_sweep.py)."""

from __future__ import annotations

import importlib.util
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
