"""User-facing errors: the CLI prints their message on one line and exits with status 2.

`UserError` is defined in `mhar_probe.model.errors` (so that the model's remote code, which
imports only within `model/`, can derive from it too); this is its address for the rest of the
library.

That module is loaded here on its own, without running `mhar_probe/model/__init__.py` (which
imports torch and transformers and registers the model), and put in `sys.modules` under its
real name, so the model package finds it there later and there is one `UserError` class:
what does not need the model (`mhar --help`, the statistics) does not pay for torch.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _model_errors():
    name = "mhar_probe.model.errors"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "model" / "errors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


UserError = _model_errors().UserError

__all__ = ["UserError"]
