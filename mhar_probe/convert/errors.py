"""The one error conversion raises for input the user can fix."""

from __future__ import annotations


class ConversionError(ValueError):
    """A source checkpoint or option that cannot be converted; the message says what to fix and
    what is supported. The CLI prints it on one line and exits with status 2."""
