"""The project's one base for errors the user can fix.

Defined here, inside `model/`, because the model's modules are also shipped as Hugging Face
remote code and may import only flatly within `model/` (`from .errors import UserError`); the
rest of the library imports it as `mhar_probe.errors.UserError`. Every user-facing error class
(`ConfigError`, `ConversionError`, `DataError`, `CaptureError`, `EvalError`, `StatsError`)
derives from it, so `mhar` catches this one class, prints the message on one line and exits
with status 2. It is a `ValueError`, as every such error has always been.
"""

from __future__ import annotations


class UserError(ValueError):
    """Something the user can fix (a flag, a path, a file); the message names what to fix."""
