"""One base for user errors (mhar_probe.model.errors.UserError, imported as mhar_probe.errors):
every user-facing error class derives from it, and `mhar` turns each into one line and exit 2."""

from __future__ import annotations

import pytest

import mhar_probe.info
from analysis.stats.errors import StatsError
from cli_checks import cli
from mhar_probe.capture.errors import CaptureError
from mhar_probe.convert.errors import ConversionError
from mhar_probe.data.errors import DataError
from mhar_probe.errors import UserError
from mhar_probe.evaluate.errors import EvalError
from mhar_probe.model import errors as model_errors
from mhar_probe.model.config import ConfigError

DERIVED = [ConversionError, DataError, CaptureError, EvalError, StatsError]


def test_one_definition_of_the_base():
    assert UserError is model_errors.UserError
    assert issubclass(UserError, ValueError)  # callers and tests catch ValueError


@pytest.mark.parametrize("cls", DERIVED, ids=lambda c: c.__name__)
def test_every_user_error_derives_from_the_base(cls):
    assert issubclass(cls, UserError) and issubclass(cls, ValueError)


def test_config_error_derives_from_the_base():
    assert issubclass(ConfigError, UserError)


@pytest.mark.parametrize("cls", [UserError, ConfigError, *DERIVED], ids=lambda c: c.__name__)
def test_the_cli_prints_each_user_error_on_one_line_and_exits_2(cls, monkeypatch, capsys, tmp_path):
    def refuse(*args, **kwargs):
        raise cls("bad   input:\n  fix\tthis")

    monkeypatch.setattr(mhar_probe.info, "describe", refuse)
    assert cli("info", str(tmp_path)) == 2  # (a folder that exists: a missing one is refused before describe)
    out, err = capsys.readouterr()
    assert out == "" and err == "mhar info: error: bad input: fix this\n"


def test_the_cli_does_not_swallow_other_value_errors(monkeypatch, tmp_path):
    """A plain ValueError is a bug, not a user error: it keeps its traceback."""
    def bug(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(mhar_probe.info, "describe", bug)
    with pytest.raises(ValueError, match="a bug"):
        cli("info", str(tmp_path))


def test_debug_shows_the_traceback_of_a_user_error(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise DataError("no corpus")

    monkeypatch.setattr(mhar_probe.info, "describe", refuse)
    with pytest.raises(DataError, match="no corpus"):
        cli("--debug", "info", str(tmp_path))
