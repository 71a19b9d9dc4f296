"""The one place `mhar` turns an exception into an exit status: input the user can fix and
files the OS refused become one line on stderr and exit status 2, Ctrl-C is 130."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from ..errors import UserError


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors the library raises for input the user can fix: `UserError`, the one base."""
    return (UserError,)


def describe(exc: BaseException) -> str:
    """One line for an expected failure: the library's message, or the OS's with the path."""
    if isinstance(exc, OSError) and not isinstance(exc, user_errors()) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return " ".join(str(exc).split())


def run_command(command: str, handler: Callable[[argparse.Namespace], int | None], args: argparse.Namespace,
                debug: bool = False) -> int:
    """Run a subcommand's handler; its exit status, or 2 / 130 for the failures above
    (`debug`: re-raise a refused input so its traceback shows)."""
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print(f"mhar {command}: interrupted", file=sys.stderr)
        return 130
    except (*user_errors(), OSError) as exc:  # input the user can fix, a file the OS refused
        if debug:
            raise
        print(f"mhar {command}: error: {describe(exc)}", file=sys.stderr)
        return 2
