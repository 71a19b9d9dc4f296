"""Run options declared once (issue 34, item 2): `RunOptions` holds what `mhar train` and `mhar cpt`
share, each command's flags are made from its configuration's fields, a flag refuses exactly
what the configuration refuses (one check per option), and every committed train_config.json
still loads."""

from __future__ import annotations

import argparse
import json

from mhar_probe.data import resolve_cap
import re
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from mhar_probe.cli.args import OneLineParser, add_train_arguments
from mhar_probe.cli.cpt import add_cpt_arguments
from mhar_probe.cli.flags import field_of_dest, flag_fields, options_from_args
from mhar_probe.cpt import CPTConfig
from mhar_probe.errors import UserError
from mhar_probe.options import flag_of
from mhar_probe.runoptions import NOT_SETTINGS, RunOptions, saved_settings
from mhar_probe.train import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def _parser(cls: type) -> argparse.ArgumentParser:
    p = OneLineParser(prog="x")
    if cls is TrainConfig:
        add_train_arguments(p, exclude=())
    else:
        add_cpt_arguments(p)
    return p


def test_train_and_cpt_share_the_base_fields_with_one_declaration():
    base = {f.name: f for f in fields(RunOptions)}
    for cls in (TrainConfig, CPTConfig):
        mine = {f.name: f for f in fields(cls)}
        assert set(base) <= set(mine)
        for name, f in base.items():  # the same check, flag and group; a default may differ
            assert {k: v for k, v in mine[name].metadata.items() if k != "help"} == {
                k: v for k, v in f.metadata.items() if k != "help"}, name
    shared = {f.name for f in fields(RunOptions)}
    assert len(shared) >= 27 and {"compile_sublayers", "cuda_graphs", "loss_kernel", "routing_douts"} <= shared


@pytest.mark.parametrize("cls", [TrainConfig, CPTConfig])
def test_each_flag_is_a_field(cls):
    """The command's flags are its configuration's flagged fields (and a dict's entries), nothing else."""
    parser = _parser(cls)
    dests = {field_of_dest(cls).get(a.dest, a.dest) for a in parser._actions
             if not isinstance(a, argparse._HelpAction)}
    assert dests == {f.name for f in flag_fields(cls)}
    for action in parser._actions:
        if not isinstance(action, argparse._HelpAction):
            assert (action.help or "").strip(), action.dest


@pytest.mark.parametrize("cls", [TrainConfig, CPTConfig])
def test_defaults_on_the_command_line_are_the_configurations(cls, tmp_path):
    argv = [str(tmp_path / "src")] if cls is CPTConfig else []
    args = _parser(cls).parse_args([*argv, "--out", str(tmp_path / "r")])
    got = options_from_args(cls, args)
    want = cls(out=str(tmp_path / "r"), **({"src": argv[0]} if argv else {}))
    assert {k: v for k, v in vars(got).items() if k != "explicit"} == {
        k: v for k, v in vars(want).items() if k != "explicit"}


#: a bad value of every checked option (as typed, as a value) and what both refusals say
BAD = [("steps", "0", 0, "is too small"), ("lr", "-1", -1.0, "must be a finite number above 0"),
       ("lr", "nan", float("nan"), "must be a finite number above 0"), ("warmup", "-1", -1, "must not be negative"),
       ("weight_decay", "-0.5", -0.5, "must not be negative"),
       ("grad_clip", "0", 0.0, "must be a finite number above 0"), ("batch_size", "0", 0, "is too small"),
       ("micro_batch", "0", 0, "is too small"), ("seq_len", "0", 0, "is too small"),
       ("eval_every", "0", 0, "is too small"), ("eval_batches", "0", 0, "is too small"),
       ("checkpoint_every", "0", 0, "is too small"), ("corpus_max_bytes", "-1", -1, "must not be negative"),
       ("routing_backend", "cuda-magic", "cuda-magic", "unknown routing backend 'cuda-magic'"),
       ("loss_kernel", "fast", "fast", "unknown loss kernel 'fast'"),
       ("routing_douts", "fp8", "fp8", "unknown routing douts 'fp8'"),
       ("routing_forward", "ahead", "ahead", "unknown routing forward 'ahead'"),
       ("routing_backward", "scatter", "scatter", "unknown routing backward 'scatter'")]
TRAIN_BAD = [("vocab_size", "256", 256, "must be at least 257"), ("heads", "0", 0, "is too small"),
             ("kv_heads", "0", 0, "is too small"), ("method", "resnet", "resnet", "unknown method 'resnet'"),
             ("preset", "7b", "7b", "unknown preset '7b'")]
CPT_BAD = [("ema", "1", 1.0, "must lie in [0, 1)"), ("z_loss", "-1", -1.0, "must not be negative"),
           ("min_lr", "-1", -1.0, "must not be negative"), ("decay", "step", "step", "unknown decay 'step'")]


@pytest.mark.parametrize("cls,name,text,value,needle", [(TrainConfig, *b) for b in BAD + TRAIN_BAD]
                         + [(CPTConfig, *b) for b in BAD + CPT_BAD])
def test_a_flag_refuses_what_its_field_refuses(cls, name, text, value, needle, capsys):
    """One check per option: the flag's argparse type and the configuration run the same one."""
    f = next(f for f in fields(cls) if f.name == name)
    argv = ["SRC"] if cls is CPTConfig else []
    with pytest.raises(SystemExit) as exc:
        _parser(cls).parse_args([*argv, "--out", "r", f"{flag_of(f)}={text}"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and needle in err and len(err.splitlines()) == 1, err
    with pytest.raises(UserError, match=re.escape(needle)):
        cls(**{name: value})


def test_cross_option_checks_of_mid_training():
    with pytest.raises(UserError, match=r"--min-lr 0.1 must lie in \[0, --lr 0.0004\]"):
        CPTConfig(min_lr=0.1)
    with pytest.raises(UserError, match=r"--warmup 20 must lie in \[0, --steps 10\]"):
        CPTConfig(steps=10, warmup=20)


def test_the_model_override_flags_fill_extra():
    args = _parser(TrainConfig).parse_args(["--out", "r", "--layers", "3", "--ffn", "96"])
    assert options_from_args(TrainConfig, args).extra == {"num_hidden_layers": 3, "intermediate_size": 96}
    with pytest.raises(UserError, match="extra"):
        TrainConfig(extra={"num_hidden_layers": 0})


def _committed_train_configs() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*train_config.json"], cwd=ROOT, capture_output=True, text=True)
    return sorted(p for p in out.stdout.split() if p)


@pytest.mark.parametrize("path", _committed_train_configs())
def test_every_committed_train_config_still_loads(path):
    """Runs saved before the options moved (results/, tests/) resume and are read as before: the
    file's settings load, and saving them again gives the same values (plus any newer option at
    its default)."""
    raw = json.loads((ROOT / path).read_text())
    cls = CPTConfig if "src" in raw else TrainConfig
    options = cls.from_dict({k: v for k, v in raw.items() if k not in NOT_SETTINGS})
    again = saved_settings(options)
    # an unset cap is saved as the cap the run trained with (resolve_cap: 0 for no cap), the one change
    want = {k: v for k, v in raw.items() if k not in NOT_SETTINGS}
    if "corpus_max_bytes" in want:
        want["corpus_max_bytes"] = resolve_cap(raw.get("corpus"), raw["corpus_max_bytes"])
    assert {k: again[k] for k in raw if k not in NOT_SETTINGS} == want


def test_a_resumed_run_may_change_the_kernels_order_but_not_its_douts():
    """The stack's forward and backward sum the same terms in another order, so a run may resume
    under the other one (as it may under another backend); the dout policy rounds gradients
    differently, so a resume that contradicts the saved one is refused."""
    from mhar_probe.runoptions import resumed_options

    saved = TrainConfig(out="r", steps=10)
    cfg = TrainConfig(out="r", steps=10, resume=True, routing_forward="plain", routing_backward="gather",
                      explicit=("routing_forward", "routing_backward"))
    got = resumed_options(cfg, saved)
    assert (got.routing_forward, got.routing_backward, got.steps) == ("plain", "gather", 10)
    with pytest.raises(UserError, match=r"--routing-douts storage \(the run has promoted\)"):
        resumed_options(TrainConfig(out="r", resume=True, routing_douts="storage", explicit=("routing_douts",)), saved)
