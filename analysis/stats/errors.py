"""The one exception type user-facing statistics code raises."""

from __future__ import annotations

from mhar_probe.errors import UserError


class StatsError(UserError):
    """A user error (bad file, bad flag, mismatched inputs) with one clear message.

    The main CLI prints the message and exits with status 2.
    """
