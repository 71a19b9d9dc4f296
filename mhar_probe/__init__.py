"""mhar-probe: train, capture and analyse Multi-Head Attention Residuals (MHAR) models.

Importing the package registers `MHARConfig` / `MHARForCausalLM` (and the converted
`MHARDeltaConfig` / `MHARDeltaForCausalLM`) with transformers' Auto classes, so
`AutoModelForCausalLM.from_pretrained(path)` works after `import mhar_probe`.

The registration lives in `mhar_probe.model` (importing it registers). So that `import mhar_probe`
stays cheap (`mhar --help` needs neither torch nor transformers), it happens when it is first
needed: at once if transformers is already imported, else right after transformers' own import
finishes (a one-shot import hook, removed once it has fired). `MHARConfig` / `MHARForCausalLM`
are imported from `mhar_probe.model` on first access.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

__version__ = "0.1.0"


def register_auto_classes() -> None:
    """Register the MHAR and delta classes with transformers' Auto classes (idempotent)."""
    model = sys.modules.get("mhar_probe.model")
    if model is not None and getattr(model.__spec__, "_initializing", False):
        return  # mhar_probe.model is being imported (it imported transformers) and registers at its end
    import mhar_probe.model  # noqa: F401  (registers on import)


class _RegisterAfterTransformers(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps transformers' own loader so that `register_auto_classes`
    runs once transformers has been executed, then steps out of `sys.meta_path`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "transformers":
            return None
        _remove_hook()
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            loader.exec_module = exec_module  # type: ignore[method-assign]
            register_auto_classes()

        loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def _remove_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RegisterAfterTransformers)]


if "transformers" in sys.modules:
    register_auto_classes()
elif not any(isinstance(f, _RegisterAfterTransformers) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterTransformers())


def __getattr__(name: str) -> Any:
    """`mhar_probe.MHARConfig` / `mhar_probe.MHARForCausalLM` and the subpackages
    (`mhar_probe.model.set_routing_backend`, ...), imported on first access."""
    if name in ("MHARConfig", "MHARForCausalLM"):
        from . import model

        return getattr(model, name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'mhar_probe' has no attribute {name!r}")


__all__ = ["MHARConfig", "MHARForCausalLM", "__version__", "register_auto_classes"]
