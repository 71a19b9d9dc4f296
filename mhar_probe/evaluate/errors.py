"""The error `mhar eval` raises for input the user can fix."""

from __future__ import annotations

from ..errors import UserError


class EvalError(UserError):
    """A bad run directory, task name, task file or output directory (one clear message)."""
