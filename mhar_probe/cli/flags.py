"""Command-line flags made from an options dataclass (`mhar_probe.options`): one flag per field
that declares one, with the field's help, default, choices and check, in the field's help group.

    add_option_flags(parser, TrainConfig, exclude=("out", "resume", "overwrite"))
    cfg = options_from_args(TrainConfig, args)

How a field becomes a flag:
    bool = False         --name (store_true)            bool | None   --name / --no-name
    bool = True          its flag (e.g. --no-progress) stores False
    int / float / str    --name VALUE, parsed by the type and refused by the field's check or
                         choices in one argparse line (the dataclass runs the same check)
    dict with entries    one flag per entry (--layers, --hidden-size, ...), collected into the dict
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, Field, fields
from typing import Any, Callable, Iterable

from ..options import flag_of, problem_of

#: the help groups of the run commands (`mhar train`, `mhar cpt`, `mhar sweep`), in the order
#: --help shows them
TRAIN_GROUPS = {
    "basics": "what to train",
    "model": "override the preset's shape",
    "data": "corpus and tokenizer",
    "schedule": "steps, learning rate, optimizer, batches, evaluation and checkpoints",
    "GPU step": "where and how a step runs (the defaults suit the device: CUDA graphs, fused loss and "
                "compiled sublayers on CUDA, one process or DDP (FSDP2: compiled sublayers, eager step), "
                "the eager reference on a CPU)",
    "output": "the run directory",
}


def train_groups(p: argparse.ArgumentParser, titles: Iterable[str] | None = None
                 ) -> dict[str, argparse._ArgumentGroup]:
    """The `TRAIN_GROUPS` of parser `p` (those in `titles`, default all), made on first use (so a
    command can add to them), in `TRAIN_GROUPS` order."""
    have = {g.title: g for g in p._action_groups}
    wanted = set(TRAIN_GROUPS if titles is None else titles)
    return {title: have.get(title) or p.add_argument_group(title, description)
            for title, description in TRAIN_GROUPS.items() if title in wanted}


def _default(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default  # type: ignore[misc]


def _scalar(hint: Any) -> type:
    """The one non-None type of `hint` (int | None -> int)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def value_type(f: Field, hint: Any) -> Callable[[str], Any]:
    """The argparse type of field `f`: parse the text as the field's type, then run its checks."""
    kind = _scalar(hint)

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        problem = problem_of(f, value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem if problem.startswith("unknown") else f"{text} {problem}")
        return value
    check = f.metadata.get("check")
    parse.__name__ = getattr(check, "__name__", kind.__name__) if check is not None else kind.__name__
    return parse


def flag_fields(cls: type, exclude: Iterable[str] = ()) -> list[Field]:
    """The fields of `cls` that have a command-line flag (or entries), but those in `exclude`."""
    skip = set(exclude)
    return [f for f in fields(cls) if f.name not in skip and (flag_of(f) or f.metadata.get("entries"))]


def add_option_flags(p: argparse.ArgumentParser, cls: type, exclude: Iterable[str] = ()
                     ) -> dict[str, argparse._ArgumentGroup]:
    """One flag per field of `cls` (see the module doc), in the `TRAIN_GROUPS` of `p`; returns
    the groups, so a command adds its own flags to them."""
    own = set(vars(cls).get("__annotations__", {}))  # a command's own options first in each group
    flagged = sorted(flag_fields(cls, exclude), key=lambda f: f.name not in own)
    groups = train_groups(p, {f.metadata["group"] for f in flagged if f.metadata.get("group")})
    hints = typing.get_type_hints(cls)
    for f in flagged:
        where = groups[f.metadata["group"]] if f.metadata.get("group") else p
        meta, flag, default = f.metadata, flag_of(f), _default(f)
        if meta.get("entries"):
            for dest, (_, text) in meta["entries"].items():
                where.add_argument(f"--{dest.replace('_', '-')}", dest=dest, default=None, help=text,
                                   type=value_type(f, int))
            continue
        hint = hints[f.name]
        if not flag.startswith("-"):  # positional
            where.add_argument(f.name, metavar=flag, help=meta["help"])
            continue
        # a required flag has no default (its field's is for code that builds the options itself)
        kw: dict[str, Any] = dict(dest=f.name, default=None if meta.get("required") else default, help=meta["help"])
        if hint is bool or _scalar(hint) is bool:
            if typing.get_args(hint):  # bool | None: --x / --no-x, None = the device's default
                kw["action"] = argparse.BooleanOptionalAction
            else:  # a switch away from the default
                kw["action"] = "store_false" if default else "store_true"
        else:
            kw["type"] = value_type(f, hint)
            if meta.get("choices"):
                kw["metavar"] = "{" + ",".join(map(str, meta["choices"])) + "}"
            if meta.get("required"):
                kw["required"] = True
        where.add_argument(flag, **kw)
    return groups


def field_of_dest(cls: type) -> dict[str, str]:
    """Command-line destinations that set another field of `cls` (--layers -> extra)."""
    return {dest: f.name for f in fields(cls) for dest in (f.metadata.get("entries") or {})}


def option_values(cls: type, args: argparse.Namespace, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """{field: value} of every flag of `cls` in the parsed `args` (as `add_option_flags` made
    them, but those in `exclude`): command-line values converted (--corpus-max-bytes 0 -> None),
    a dict field's entry flags collected into it."""
    values: dict[str, Any] = {}
    for f in flag_fields(cls, exclude):
        entries = f.metadata.get("entries")
        if entries:
            values[f.name] = {key: getattr(args, dest) for dest, (key, _) in entries.items()
                              if getattr(args, dest, None) is not None}
        else:
            value = getattr(args, f.name)
            convert = f.metadata.get("cli")
            values[f.name] = convert(value) if convert is not None and value is not None else value
    return values


def options_from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """The `cls` options that the parsed `args` describe (every flag of `add_option_flags`, and
    which options the user gave, `args.explicit`); fields without a flag keep their defaults
    unless in `given`."""
    values = option_values(cls, args)
    if "explicit" in {f.name for f in fields(cls)}:
        values["explicit"] = getattr(args, "explicit", None)
    return cls(**{**values, **given})
