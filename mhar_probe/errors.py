"""User-facing errors: the CLI prints their message on one line and exits with status 2.

`UserError` is defined in `mhar_probe.model.errors` (so that the model's remote code, which
imports only within `model/`, can derive from it too); this is its address for the rest of the
library.
"""

from __future__ import annotations

from .model.errors import UserError

__all__ = ["UserError"]
