"""The one exception the data layer raises for user-fixable problems."""

from __future__ import annotations


class DataError(ValueError):
    """A data source, tokenizer or split cannot be used as given.

    The message always names the path (or corpus) and says what is wrong, so a CLI can
    print it as is and exit non-zero.
    """
