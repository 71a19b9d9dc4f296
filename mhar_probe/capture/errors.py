"""The one exception user-facing capture and probe code raises."""

from __future__ import annotations

from ..errors import UserError


class CaptureError(UserError):
    """A user error (bad run directory, bad file, bad flag) with one clear message.

    A `UserError` (so a `ValueError`), which `mhar` prints on one line, exiting 2; the message
    names the path or option to fix.
    """
