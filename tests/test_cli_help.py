"""`mhar`'s help: every option explained with its default, `mhar train`'s options in groups, and
`mhar --help` answered without importing torch (command modules load lazily)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from mhar_probe.cli import COMMANDS, build_parser
from mhar_probe.cli.args import TRAIN_GROUPS


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return parser._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", ["train", "sweep", "demo"])
def test_every_option_has_help_text(name):
    parser = subcommand(build_parser(only=name), name)
    missing = [a.option_strings[0] for a in options(parser) if not (a.help or "").strip()]
    assert not missing, f"mhar {name}: no help for {missing}"


def test_train_help_shows_its_groups_in_order_and_every_default():
    parser = subcommand(build_parser(only="train"), "train")
    text = parser.format_help()
    positions = [text.index(f"\n{title}:\n") for title in TRAIN_GROUPS]
    assert positions == sorted(positions)
    grouped = {a.dest for g in parser._action_groups if g.title in TRAIN_GROUPS for a in g._group_actions}
    assert {a.dest for a in options(parser)} == grouped  # no option left in the catch-all group
    for action in options(parser):  # a value's default is either printed by the formatter or said in the text
        if action.default not in (None, False) and action.nargs != 0:
            assert "default" in parser._get_formatter()._get_help_string(action), action.option_strings


def every_parser(parser: argparse.ArgumentParser, name: str = "mhar"):
    """(name, parser) of `parser` and of every sub-command under it, all the way down."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from every_parser(sub, f"{name} {sub_name}")


def help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text `parser` prints for `action`, as one line."""
    return " ".join(parser._get_formatter()._expand_help(action).split()) if action.help else ""


def test_no_command_shows_a_default_for_a_required_option_or_a_switch():
    """A required option has no default to show (`mhar train --out`), and a switch's default is the
    switch left off (`--no-progress (default: True)` said the opposite of what the flag does)."""
    from mhar_probe.cli.bench import routing_parser

    parsers = [*every_parser(build_parser()), ("mhar bench routing", routing_parser())]
    required = switches = values = 0
    for name, parser in parsers:
        for action in options(parser):
            text = help_of(parser, action)
            if action.required or action.nargs == 0:
                assert f"(default: {action.default})" not in text, f"{name} {action.option_strings[0]}: {text}"
                required += action.required
                switches += action.nargs == 0
            elif action.default is not None and action.help and "default" not in action.help:
                assert f"(default: {action.default})" in text, f"{name} {action.option_strings[0]}: {text}"
                values += 1
    assert required >= 5 and switches >= 20 and values >= 20  # the walk reached every command
    train = subcommand(build_parser(only="train"), "train")
    lines = {a.option_strings[0]: help_of(train, a) for a in options(train)}
    assert lines["--out"] == "run directory" and lines["--no-progress"] == "no progress bar (logs and CI)"
    assert lines["--steps"].endswith("(default: 300)")


def test_the_lazy_command_table_agrees_with_the_modules():
    full = build_parser()
    choices = full._subparsers._group_actions[0]  # type: ignore[union-attr]
    registered = {a.dest: a.help for a in choices._choices_actions}
    assert list(registered) == [name for name, _, _ in COMMANDS]
    assert registered == {name: help_text for name, _, help_text in COMMANDS}


def test_mhar_help_imports_neither_torch_nor_transformers():
    code = ("import sys, json\nfrom mhar_probe.cli import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'scipy', 'mhar_probe.model') "
            "if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "train" in proc.stdout and json.loads(proc.stdout.splitlines()[-1]) == []


def test_import_mhar_probe_still_registers_the_auto_classes_once_transformers_is_imported():
    code = ("import sys, mhar_probe\nassert 'torch' not in sys.modules\n"
            "from transformers import AutoConfig\nfrom transformers.models.auto.configuration_auto import "
            "CONFIG_MAPPING\nprint(CONFIG_MAPPING['mhar'].__module__, CONFIG_MAPPING['mhar_delta'].__module__)\n"
            "print(mhar_probe.model.set_routing_backend.__name__, mhar_probe.MHARConfig.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["mhar_probe.model.config", "mhar_probe.model.delta_config",
                                   "set_routing_backend", "MHARConfig"]


def test_every_commands_help_renders():
    """`mhar stats mcnemar --help` raised a TypeError (a bare '%' in a help text)."""
    def walk(parser: argparse.ArgumentParser, name: str):
        yield name, parser
        if parser._subparsers is not None:
            for sub_name, sub in parser._subparsers._group_actions[0].choices.items():  # type: ignore[union-attr]
                yield from walk(sub, f"{name} {sub_name}")

    for name, parser in walk(build_parser(), "mhar"):
        assert parser.format_help(), name
