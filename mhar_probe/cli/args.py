"""Argument helpers shared by the `mhar` subcommands: the parser class, value types, the
training options (`mhar train` and `mhar sweep` share them, made from `TrainConfig`'s fields by
`cli.flags`) and which options the user gave."""

from __future__ import annotations

import argparse
import math
from typing import Callable, NoReturn, Sequence

from ..errors import UserError
from .flags import TRAIN_GROUPS, add_option_flags, field_of_dest, train_groups  # noqa: F401  (groups: for callers)


class OneLineParser(argparse.ArgumentParser):
    """Bad command-line input is one line on stderr and exit status 2 (no usage block); help
    shows defaults (`DefaultsHelpFormatter`) unless a command picks another formatter."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def bounded_int(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low` (argparse turns the error into one usage line)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is too small; it must be at least {low}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return value


positive_int, nonnegative_int = bounded_int(1), bounded_int(0)


def shows_default(action: argparse.Action) -> bool:
    """Whether help appends "(default: X)" to `action`: not when its text already says it, the
    default is None (the help then says what is used) or SUPPRESS, the option is required (it
    has no default), or it is a switch (--x, --no-x: store_true/false/const, a --x/--no-x pair),
    whose default is the switch left off, not a value to show."""
    return not ("default" in (action.help or "") or action.default in (None, argparse.SUPPRESS)
                or action.required or action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction))


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, "(default: X)", where `shows_default` says so."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return super()._get_help_string(action) if shows_default(action) else action.help or ""


class RawDescriptionDefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultsHelpFormatter):
    """`DefaultsHelpFormatter` for a command whose description is laid out by hand (kept as written)."""


def add_train_arguments(p: argparse.ArgumentParser, exclude: Sequence[str] = ("out", "resume", "overwrite")
                        ) -> dict[str, argparse._ArgumentGroup]:
    """The options of one training run (`mhar train`; `mhar sweep` replaces the axes): a flag per
    `TrainConfig` field (`cli.flags`), but the run directory's (each command adds its own), in
    the groups of `TRAIN_GROUPS`; returns the groups so a command adds its own options to them."""
    from ..runoptions import TrainConfig

    return add_option_flags(p, TrainConfig, exclude=exclude)


def check_corpus(spec: str | None) -> None:
    """--corpus names a known corpus or an existing path (before any other work)."""
    from ..corpusnames import NAMED_CORPORA, is_corpus_spec

    if not is_corpus_spec(spec):
        raise UserError(f"corpus path {spec} does not exist (or name one of: {', '.join(NAMED_CORPORA)})")


def check_run_paths(corpus: str | None, out: str | None, resume: bool, overwrite: bool = False) -> None:
    """What a training command (`mhar train`, `mhar cpt`) reads exists: --corpus (`check_corpus`)
    and, with --resume, the run directory --out (resuming a folder that does not exist would start
    a new run in a mistyped place). --resume with --overwrite is refused first, whatever the paths."""
    from pathlib import Path

    from ..outputs import refuse_together

    refuse_together(resume=resume, overwrite=overwrite)
    check_corpus(corpus)
    if resume and out is not None and not Path(out).exists():
        raise UserError(f"run directory {out} does not exist; --resume continues a run there "
                        f"(leave it off to start one)")


def require_existing(what: str, *paths: str | None) -> None:
    """Each of `paths` given exists, else one line: "{what} PATH does not exist". Commands call it
    first, before their heavy imports (torch takes seconds to load), so that a mistyped path is
    refused at once."""
    from pathlib import Path

    for path in paths:
        if path is not None and not Path(path).exists():
            raise UserError(f"{what} {path} does not exist")


def leading_words(words: Sequence[str], count: int) -> list[str]:
    """A command's first `count` positionals in its words (those after the command's name) where
    they come first, before any option, so that no option can have taken one as its value; fewer
    (maybe none) when an option comes sooner. For the checks made before a command's parser is
    built (`early_check`: building some parsers loads torch)."""
    found: list[str] = []
    for word in words:
        if word.startswith("-") or len(found) == count:
            break
        found.append(word)
    return found


def option_value(words: Sequence[str], flag: str) -> str | None:
    """The value of option `flag` in a command's words as argparse reads it (the last `FLAG VALUE`
    or `FLAG=VALUE` before a `--`), or None; for the checks made before a command's parser is
    built. An abbreviated flag is not seen here: the command's own check then refuses it later."""
    value = None
    for i, word in enumerate(words):
        if word == "--":
            break
        if word == flag and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value = words[i + 1]
        elif word.startswith(flag + "="):
            value = word[len(flag) + 1:]
    return value


def has_switch(words: Sequence[str], flag: str) -> bool:
    """Whether switch `flag` (an option without a value) is among a command's words (before a `--`)."""
    words = list(words)
    return flag in (words[:words.index("--")] if "--" in words else words)


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[str, ...]:
    """The options-dataclass fields (TrainConfig, CPTConfig) the user set on the command line
    (`argv` of one subcommand), told apart from defaults by parsing again with every default
    suppressed."""
    defaults = [(action, action.default) for action in parser._actions]
    try:
        for action, _ in defaults:
            action.default = argparse.SUPPRESS
        given, _ = parser.parse_known_args(list(argv))
    finally:
        for action, default in defaults:
            action.default = default
    from ..runoptions import TrainConfig

    other = field_of_dest(TrainConfig)  # --layers sets extra (CPTConfig has no such flags)
    return tuple(sorted({other.get(dest, dest) for dest in vars(given) if dest != "func"}))


def command_deadline(seconds: float | None):
    """The `mhar_probe.train.Deadline` of a command's --time-limit, counted from the start of the
    process (its imports and setup included); None without one."""
    from ..train import Deadline

    return Deadline.after_start(seconds) if seconds is not None else None
