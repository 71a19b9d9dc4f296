"""The one exception user-facing capture and probe code raises."""

from __future__ import annotations

try:  # the project's common base, so `mhar` prints the message on one line and exits 2
    from ..errors import UserError as _Base
except ImportError:  # pragma: no cover - the base lands with the CLI
    _Base = ValueError  # type: ignore[misc,assignment]


class CaptureError(_Base):  # type: ignore[valid-type,misc]
    """A user error (bad run directory, bad file, bad flag) with one clear message.

    Always a `ValueError`; the message names the path or option to fix.
    """
