"""User-facing errors: the CLI prints their message on one line and exits with status 2."""

from __future__ import annotations


class UserError(ValueError):
    """Something the user can fix (a flag, a path, a file); the message names what to fix."""
