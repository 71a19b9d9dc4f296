"""Options declared once: a dataclass field carries its help, its one check and its command-line
flag, and everything else is read off the field.

    steps: int = option(300, "optimizer steps", check=at_least(1), group="basics")

`check_options(obj, what)` checks every field of an options dataclass (its declared type, then
its check) and raises `UserError("--steps 0 is too small; it must be at least 1")`; `mhar_probe.cli.flags`
makes the argparse flags from the same fields (the check becomes the flag's argparse type, so
the command line refuses what the dataclass would). The run configurations
(`mhar_probe.runoptions`) are written with it.

A check is a function value -> problem (None when the value is fine), a phrase that follows the
value ("0 is too small; it must be at least 1"); a value outside a field's choices is its own
sentence ("unknown loss kernel 'x'; choose one of fused, torch"). None values skip the check
(an optional option left at its default).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import MISSING, fields
from typing import Any, Callable

from .errors import UserError
from .runfiles import has_type

Check = Callable[[Any], "str | None"]

#: how a field's command-line flag is made (`mhar_probe.cli.flags`): the keys of `field.metadata`
#: help     the flag's help text (also the field's documentation)
#: check    the value's one check (argparse type and `check_options` both run it)
#: flag     "--name" (default: the field's name with dashes), a bare NAME for a positional
#:          argument, or None: no flag
#: choices  the values the flag takes (also checked by `check_options`)
#: group    the help group the flag is shown in
#: required the flag must be given
#: cli      how a command-line value becomes the field's value (e.g. 0 -> None)
#: entries  for a dict field: {flag dest: (key in the dict, help)} -- one flag per entry


def option(default: Any = MISSING, help: str = "", *, check: Check | None = None, flag: str | None = "",
           choices: tuple[Any, ...] | None = None, group: str | None = None, required: bool = False,
           cli: Callable[[Any], Any] | None = None, entries: dict[str, tuple[str, str]] | None = None,
           default_factory: Any = MISSING) -> Any:
    """A dataclass field with its option metadata (see the module doc)."""
    meta = dict(help=help, check=check, flag=flag, choices=choices, group=group, required=required, cli=cli,
                entries=entries)
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_of(f: dataclasses.Field) -> str | None:
    """The command-line spelling of field `f` (--name-with-dashes unless it says otherwise)."""
    flag = f.metadata.get("flag", "")
    return f"--{f.name.replace('_', '-')}" if flag == "" else flag


# ---------------------------------------------------------------------- checks
def at_least(low: int) -> Check:
    """An integer >= `low`."""
    def check(value: Any) -> str | None:
        return None if value >= low else f"is too small; it must be at least {low}"
    check.__name__ = f"integer >= {low}"
    return check


def finite_above_zero(value: Any) -> str | None:
    """A finite number > 0."""
    return None if math.isfinite(value) and value > 0 else "must be a finite number above 0"


def in_unit_interval(value: Any) -> str | None:
    """A number in [0, 1]."""
    return None if 0 <= value <= 1 else "must lie in [0, 1]"


def non_negative(value: Any) -> str | None:
    """A number >= 0."""
    return None if value >= 0 else "must not be negative"


def problem_of(f: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with `value` for field `f` (its choices, then its check); None if nothing."""
    if value is None:
        return None
    entries = f.metadata.get("entries")
    if entries and isinstance(value, dict):  # a dict of entries: each entry's value is checked
        return next((p for key, _ in entries.values() if key in value
                     for p in [problem_of_entry(f, value[key])] if p is not None), None)
    return problem_of_entry(f, value)


def problem_of_entry(f: dataclasses.Field, value: Any) -> str | None:
    """`problem_of` for one value (of the field, or of one of its entries)."""
    if value is None:
        return None
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        return f"unknown {f.name.replace('_', ' ')} {value!r}; choose one of {', '.join(map(str, choices))}"
    check = f.metadata.get("check")
    return check(value) if check is not None else None


# ---------------------------------------------------------------------- whole objects
def check_options(options: Any, what: str) -> None:
    """Every field of the options dataclass `options` holds a value of its declared type (values
    read from JSON or a sweep grid carry no type guarantee) that passes its check; `UserError`
    names the first that does not."""
    hints = typing.get_type_hints(type(options))
    for f in fields(options):
        value = getattr(options, f.name)
        if not has_type(value, hints[f.name]):
            hint = hints[f.name]
            kind = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
            raise UserError(f"{what} option {f.name} = {value!r} is not of type {kind}")
        problem = problem_of(f, value)
        if problem is not None:
            raise UserError(problem if problem.startswith("unknown") else f"{flag_of(f) or f.name} {value!r} {problem}")


def options_from_dict(cls: Any, values: dict[str, Any], what: str) -> Any:
    """Build the options dataclass `cls` from JSON-like values; unknown keys are a UserError.
    (A JSON list where the field is a tuple, e.g. betas, becomes the tuple.)"""
    known = {f.name: f for f in fields(cls)}
    unknown = set(values) - set(known)
    if unknown:
        raise UserError(f"unknown {what} options: {', '.join(sorted(unknown))}")
    hints = typing.get_type_hints(cls)
    values = {k: tuple(v) if isinstance(v, list) and typing.get_origin(hints[k]) is tuple else v
              for k, v in values.items()}
    return cls(**values)
