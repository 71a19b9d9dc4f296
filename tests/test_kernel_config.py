"""The kernels' configuration (issue 34, item 5): the dout policy has one name (`routing_douts`,
the `--routing-douts` flag) and one tuple of choices that every parser and check uses; a saved
record with the old spelling (`dout_dtype` in a run's summary.json) reads back mapped."""

from __future__ import annotations

import argparse
import importlib.util
import json
from dataclasses import fields
from pathlib import Path

import pytest

from mhar_probe.errors import UserError
from mhar_probe.kernels.config import LEGACY_FIELDS, ROUTING_DOUTS, KernelConfig, kernel_config_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_the_dout_policy_has_one_name_and_one_tuple_of_choices(tmp_path):
    from mhar_probe.cli import build_parser
    from mhar_probe.train import TrainConfig

    parser = build_parser()
    assert next(f for f in fields(TrainConfig) if f.name == "routing_douts").metadata["choices"] is ROUTING_DOUTS
    for command in ("train", "sweep"):  # the flags are made from the field: its choices, its check
        sub = _subcommand(parser, command)
        assert _action(sub, "--routing-douts").metavar == "{" + ",".join(ROUTING_DOUTS) + "}", command
        for policy in ROUTING_DOUTS:
            assert sub.parse_known_args(["--out", "x", "--routing-douts", policy])[0].routing_douts == policy
        with pytest.raises(SystemExit):
            sub.parse_known_args(["--out", "x", "--routing-douts", "bf16"])
    spec = importlib.util.spec_from_file_location("train_throughput",
                                                  ROOT / "benchmarks/train_throughput/train_throughput.py")
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    assert tt.ROUTING_DOUTS is ROUTING_DOUTS  # the benchmark's flag takes the same tuple
    assert "routing_douts" in {f.name for f in fields(KernelConfig)} and "dout_dtype" not in LEGACY_FIELDS.values()
    for policy in ROUTING_DOUTS:
        assert KernelConfig(routing_douts=policy).routing_douts == policy
    with pytest.raises(ValueError, match="routing_douts='bf16': choose from promoted, storage"):
        KernelConfig(routing_douts="bf16")
    with pytest.raises(UserError, match="routing.douts"):
        TrainConfig(out=str(tmp_path / "run"), routing_douts="bf16")


def test_saved_kernel_records_read_back_with_old_spellings_mapped():
    """Every committed run's `routing_kernels` (summary.json; written as `dout_dtype` before the
    rename) reads back as a KernelConfig with its dout policy; today's record round-trips."""
    records = [json.loads(p.read_text())["routing_kernels"] for p in sorted(ROOT.glob("results/**/summary.json"))
               if "routing_kernels" in json.loads(p.read_text())]
    old = dict(dout_dtype="storage", poison=False, launch_table=None, stack_backward="fold", fold_calls=8,
               triton="3.6.0")  # a record as runs before the rename wrote it
    assert kernel_config_from_dict(old) == KernelConfig(routing_douts="storage")
    for record in records:
        want = record.get("routing_douts", record.get("dout_dtype"))
        assert kernel_config_from_dict(record).routing_douts == want
    cfg = KernelConfig(routing_douts="storage", fold_calls=4)
    assert kernel_config_from_dict(dict(cfg.as_dict(), triton="3.6.0")) == cfg


def test_every_field_with_choices_refuses_another_value_by_name():
    """Each field of CHOICES takes each of its choices and refuses anything else with a message
    that names the field, the value and the choices (one check in __post_init__ serves them all)."""
    from mhar_probe.kernels.config import CHOICES

    assert set(CHOICES) == {"routing_douts", "stack_backward", "forward"}
    for name, choices in CHOICES.items():
        for choice in choices:
            assert getattr(KernelConfig(**{name: choice}), name) == choice
        with pytest.raises(ValueError, match=f"KernelConfig.{name}='other': choose from {', '.join(choices)}$"):
            KernelConfig(**{name: "other"})


def test_records_holding_the_deleted_levers_fields_still_load():
    """Issue 55's levers (stack_douts, stack_weights, stack_append) were deleted on 2026-12-06;
    runs recorded before then hold their fields at the defaults they ran with. Those keys are
    ignored on load (`REMOVED_FIELDS`), so such a record reads back as the default design."""
    from mhar_probe.kernels.config import REMOVED_FIELDS

    assert not set(REMOVED_FIELDS) & {f.name for f in fields(KernelConfig)}
    record = dict(routing_douts="promoted", poison=False, launch_table=None, stack_backward="fold", fold_calls=8,
                  stack_douts="slots", stack_weights="stored", stack_append="stored", triton="3.6.0")
    assert kernel_config_from_dict(record) == KernelConfig()
    assert kernel_config_from_dict(dict(record, stack_backward="gather", fold_calls=4)) == \
        KernelConfig(stack_backward="gather", fold_calls=4)
    with pytest.raises(TypeError):  # the constructor itself no longer takes them
        KernelConfig(stack_douts="slots")
