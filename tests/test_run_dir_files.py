"""`mhar_probe.runfiles.RunFiles`, the one reader of a run directory: what it reads back from a
run `mhar train` wrote equals the files read independently (plain `json`) and the trainer's own
options type; a missing file reads as empty; a damaged one is a single line naming the file
(and line); and no module of the packages spells a run file's name or scans its text itself."""

from __future__ import annotations

import ast
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from cli_checks import train_tiny_run
from mhar_probe.errors import UserError
from mhar_probe.model.saved import check_config_values
from mhar_probe.runfiles import (CONFIG, CORPUS, METRICS, SUMMARY, SUMMARY_TYPES, TRAIN_CONFIG, TRAIN_CONFIG_TYPES,
                                 MetricsRow, RunFileError, RunFiles, has_type)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A 2-step MHAR run: evaluation and checkpoint at every step."""
    return train_tiny_run(tmp_path_factory.mktemp("runfiles"), "--method", "mhar")


def raw(run: Path, name: str):
    return json.loads((run / name).read_text())


def test_what_the_trainer_wrote_reads_back_as_written(run):
    from mhar_probe.train import NOT_SETTINGS, TrainConfig, saved_settings

    files = RunFiles(run)
    assert files.train_config() == raw(run, TRAIN_CONFIG)
    assert files.summary() == raw(run, SUMMARY)
    assert files.corpus() == raw(run, CORPUS)
    assert files.model_config(check_config_values) == raw(run, CONFIG)
    lines = [json.loads(line) for line in (run / METRICS).read_text().splitlines() if line.strip()]
    assert files.metrics() == lines and [m["step"] for m in lines] == [0, 1, 2]
    # the train config round-trips through the trainer's own options type
    options = TrainConfig.from_dict({k: v for k, v in files.train_config().items() if k not in NOT_SETTINGS})
    assert (options.method, options.steps, options.eval_every) == ("mhar", 2, 1)
    assert {k: v for k, v in saved_settings(options).items() if k not in NOT_SETTINGS} == {
        k: v for k, v in raw(run, TRAIN_CONFIG).items() if k not in NOT_SETTINGS}
    assert asdict(options)["seed"] == files.train_config()["seed"]


def test_the_declared_types_are_what_the_trainer_writes(run):
    files = RunFiles(run)
    config, summary = files.train_config(), files.summary()
    assert set(TRAIN_CONFIG_TYPES) <= set(config)
    assert all(has_type(config[k], t) for k, t in TRAIN_CONFIG_TYPES.items())
    assert set(SUMMARY_TYPES) <= set(summary)
    assert all(has_type(summary[k], t) for k, t in SUMMARY_TYPES.items())
    logged = set().union(*files.metrics())
    assert logged <= set(MetricsRow.__annotations__), logged - set(MetricsRow.__annotations__)


def test_summary_and_metrics_agree(run):
    """The summary's losses are the metrics' evaluations; with 2 evaluations after step 0 the run
    has no tail-mean (`mhar_probe.tail`: the last 11), and says how many it had."""
    files = RunFiles(run)
    evals = np.array([m["val_loss"] for m in files.metrics() if "val_loss" in m], dtype=np.float64)
    summary = files.summary()
    assert len(evals) == 3 and (summary["tail_k"], summary["tail_evaluations"]) == (11, 2)
    assert summary["tail_mean_val_loss"] is None
    assert (summary["initial_val_loss"], summary["final_val_loss"]) == (evals[0], evals[-1])


def test_paths_and_flags(run):
    files = RunFiles(str(run))  # a str is taken as a path
    assert files.path == run and files.finished and files.has_tokenizer
    for path in (files.config_path, files.weights_path, files.train_config_path, files.corpus_path,
                 files.metrics_path, files.summary_path, files.state_path):
        assert path.is_file() and path.parent in (run, run / "checkpoint"), path
    assert files.state(steps=2)["step"] == 2
    assert not files.routing_path.exists()  # nothing captured yet


def test_missing_files_read_as_empty(tmp_path):
    files = RunFiles(tmp_path)
    assert (files.train_config(), files.summary(), files.corpus(), files.model_config(), files.metrics()) == (
        {}, {}, {}, {}, [])
    assert not files.finished and not files.has_tokenizer
    (tmp_path / SUMMARY).write_text(json.dumps({"finished": False, "failed": "the training loss is nan"}))
    assert not files.finished


DAMAGED = [  # (file, bytes, reader, what the one line says after "PATH")
    (TRAIN_CONFIG, b"{oops", "train_config", ":1: not valid JSON"),
    (TRAIN_CONFIG, b"[1, 2]", "train_config", ": a training config must be a JSON object"),
    (TRAIN_CONFIG, b'{"steps": 0}', "train_config", ": steps = 0 must be at least 1"),
    (SUMMARY, b'{"finished": "yes"}', "summary", ": finished = 'yes' is not of type bool"),
    (SUMMARY, b'{"tail_mean_val_loss": NaN}', "summary", ": not valid JSON (NaN is not a JSON number)"),
    (SUMMARY, b'{\n "a": "\xc3\x28"}', "summary", ":2: not UTF-8 text (byte 0xc3"),
    (METRICS, b'{"step": 0}\n{"step": 1, "val_loss": 1e308}\n', "metrics", ":2: 'val_loss' = 1e+308 is outside"),
    (METRICS, b'{"step": 0}\n\n{oops\n', "metrics", ":3: not valid JSON"),
    (METRICS, b'{"step": 0}\n\xff\xfe\n', "metrics", ":2: not UTF-8 text (byte 0xff"),
    (METRICS, b'{"loss": 1.0}\n', "metrics", ":1: expected an object with a 'step' field"),
    (CORPUS, b'["docs"]', "corpus", ": a corpus record must be a JSON object"),
    (CONFIG, b'{"hidden_size": "wide"}', "model_config", ": hidden_size='wide' must be"),
]


@pytest.mark.parametrize("name, data, reader, says", DAMAGED, ids=[f"{c[0]}-{i}" for i, c in enumerate(DAMAGED)])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, name, data, reader, says):
    (tmp_path / name).write_bytes(data)
    read = getattr(RunFiles(tmp_path), reader)
    with pytest.raises(UserError) as exc:
        read(check_config_values) if reader == "model_config" else read()
    message = str(exc.value)
    assert message.startswith(f"{tmp_path / name}{says}"), message
    assert "\n" not in message
    assert isinstance(exc.value, RunFileError) or reader == "model_config"  # the model's ConfigError there


def test_the_config_check_is_the_callers(tmp_path):
    """Without the model's check, config.json is read as the object it is (a converted or future
    model may hold fields this project does not size-check)."""
    (tmp_path / CONFIG).write_text(json.dumps({"hidden_size": "wide", "rms_norm_eps": 1e-6}))
    assert RunFiles(tmp_path).model_config() == {"hidden_size": "wide", "rms_norm_eps": 1e-6}


RUN_ONLY_FILES = (TRAIN_CONFIG, SUMMARY, METRICS, CORPUS)


def _literals(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def test_no_module_spells_a_run_file_or_scans_its_text():
    """The names of the files only a run has are `runfiles` constants, and metrics.jsonl is parsed
    only by `runfiles.read_metrics` (no text search for '"val_loss"')."""
    found = []
    for package in ("mhar_probe", "analysis", "figures"):
        for module in sorted((ROOT / package).rglob("*.py")):
            if module == ROOT / "mhar_probe" / "runfiles.py":
                continue
            for line, value in _literals(module):
                if value == '"val_loss"' or any(value == n or value.endswith("/" + n) for n in RUN_ONLY_FILES):
                    found.append(f"{module.relative_to(ROOT)}:{line}: {value!r}")
    assert not found, found


def test_a_routing_figures_seed_comes_from_the_checked_train_config(tmp_path):
    """figures.routing reads the run's seed through `RunFiles`: missing is seed 0 as before, but a
    damaged train_config.json is its one-line error, not silently seed 0."""
    from figures.routing import Captured

    def seed() -> int:
        return Captured("run", tmp_path / "routing.nc").seed  # the dataset itself is not opened

    assert seed() == 0
    (tmp_path / TRAIN_CONFIG).write_text(json.dumps({"seed": 7, "method": "mhar"}))
    assert seed() == 7
    (tmp_path / TRAIN_CONFIG).write_text("{oops")
    with pytest.raises(RunFileError, match=rf"^{tmp_path / TRAIN_CONFIG}:1: not valid JSON"):
        seed()
