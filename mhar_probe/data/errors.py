"""The one exception the data layer raises for user-fixable problems."""

from __future__ import annotations

from ..errors import UserError


class DataError(UserError):
    """A data source, tokenizer or split cannot be used as given.

    A ``ValueError`` (through the project's ``UserError``, which the CLI prints on one line
    before exiting with status 2); the message always names the path (or corpus) and says
    what is wrong.
    """
