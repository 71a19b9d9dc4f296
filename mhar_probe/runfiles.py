"""A run directory's files: their names, the `RunFiles` type that reads them, and what each
JSON file must hold, checked where it is read.

    RUN/                                   (names: the constants below; layout: `mhar_probe.rundir`)
      config.json, model.safetensors       CONFIG, WEIGHTS: the final model (Hugging Face format)
      tokenizer.json                       TOKENIZER (or TOKENIZER_CONFIG)
      train_config.json                    TRAIN_CONFIG: every training option (`TrainConfigDoc`)
      corpus.json                          CORPUS: the corpus the run trained on
      metrics.jsonl                        METRICS: one line per step (`MetricsRow`)
      summary.json                         SUMMARY: written last (`SummaryDoc`)
      sessions.json                        SESSIONS: each process that trained it (`mhar_probe.provenance`)
      checkpoint/state.json                CHECKPOINT, STATE: the resumable step
      routing.nc                           ROUTING: what `mhar capture` measured

`RunFiles(run)` gives each file's path and reads it through the one reader of its kind; a
document that is missing reads as empty ({} or []). The readers return the parsed document or
raise `RunFileError` with one line that names the file (and line) and what is wrong:

    read_json(path)            any JSON document: UTF-8 text, valid JSON, no NaN in the text
    read_train_config(path)    train_config.json: an object whose fields have `TRAIN_CONFIG_TYPES`
    read_state(path, steps)    checkpoint/state.json: an object whose `step` is an integer in [0, steps]
    read_summary(path)         summary.json: an object, `finished` a bool, numbers where numbers belong
    read_metrics(path)         metrics.jsonl: every line checked by `check_metrics_row` ([] if missing)
    read_sessions(path)        sessions.json: a list of objects, each with an integer `step` >= 0 and
                               a string `time`
    check_metrics_row(row, at) one metrics.jsonl line: an object, `step` an integer >= 0, its values
                               numbers within `METRIC_LIMITS`

The checks are on types and on ranges a real run can have, so that a hand-edited or damaged
file is refused before anything is allocated or looped over from it. (The model config's size
limits belong to the model: `mhar_probe.model.saved.check_config_values`, passed to
`RunFiles.model_config` by the floors above.)
"""

from __future__ import annotations

import json
import math
import typing
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NotRequired, TypedDict

from .errors import UserError
from .jsonl import not_text, read_jsonl

# ----------------------------------------------------------------------------- file names
CONFIG = "config.json"  # the final model's Hugging Face config
WEIGHTS = "model.safetensors"  # the final model's weights
TOKENIZER = "tokenizer.json"  # the tokenizer the run used (fast tokenizers)
TOKENIZER_CONFIG = "tokenizer_config.json"  # (any tokenizer)
TRAIN_CONFIG = "train_config.json"  # every training option
CORPUS = "corpus.json"  # name, fingerprint and composition of the corpus
METRICS = "metrics.jsonl"  # one line per step; val_loss on evaluation steps
METRICS_GZ = METRICS + ".gz"  # the same gzipped: how results folders commit it (`demo.export`)
SUMMARY = "summary.json"  # written last: tail-mean, final losses, finished flag
SESSIONS = "sessions.json"  # one record per process that trained the run: code, software, card
CHECKPOINT = "checkpoint"  # the latest resumable state (a folder)
STATE = "state.json"  # in CHECKPOINT/: the step, tokens and FLOPs it holds
ROUTING = "routing.nc"  # the routing dataset `mhar capture RUN` writes by default
EVAL = "eval"  # the harness output `mhar eval RUN` writes by default (a study collects them in evals/<run>)


class RunFileError(UserError):
    """A file of a run (or of its outputs) that is damaged; the message names it and the fault."""


def has_type(value: Any, hint: Any) -> bool:
    """Whether a JSON-like `value` fits the annotation `hint` (int, float, str, bool, None,
    unions, tuple[...], list[...], dict[...], Any)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(has_type(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return isinstance(value, (tuple, list)) and all(has_type(v, args[0]) for v in value)
    if origin is tuple:
        return isinstance(value, (tuple, list)) and len(value) == len(args) and all(
            has_type(v, a) for v, a in zip(value, args))
    if origin is list:
        return isinstance(value, list) and all(has_type(v, args[0]) for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # an annotation this check does not know: left to the code that uses it


def type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def read_text(path: str | Path) -> str:
    """The UTF-8 text of `path`; a decode error is a `RunFileError` naming the line it is on."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFileError(not_text(path, exc, data[: exc.start].count(b"\n") + 1)) from None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: str | Path) -> Any:
    """A JSON document; text that is not UTF-8 or not JSON (NaN / Infinity included) is a
    `RunFileError` "PATH:LINE: ..."."""
    text = read_text(path)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # NaN / Infinity
        raise RunFileError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise RunFileError(f"{path}: not valid JSON (nested too deeply)") from None


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise RunFileError(f"{path}: {what} must be a JSON object, got {type(doc).__name__}")
    return doc


def check_fields(doc: Mapping[str, Any], schema: Mapping[str, Any], where: str | Path) -> None:
    """Every key of `schema` present in `doc` has the declared type; floats are finite."""
    for name, hint in schema.items():
        if name not in doc:
            continue
        value = doc[name]
        if not has_type(value, hint) or (isinstance(value, float) and not math.isfinite(value)):
            raise RunFileError(f"{where}: {name} = {value!r:.80} is not of type {type_name(hint)}")


class TrainConfigDoc(TypedDict, total=False):
    """The fields of train_config.json that readers other than `mhar train` use, with the types
    `mhar_probe.train.TrainConfig` declares for them (tests/test_run_files.py keeps them equal);
    the file holds every other option too."""

    preset: str
    method: str
    heads: int | None
    kv_heads: int | None
    steps: int
    lr: float
    batch_size: int
    seq_len: int | None
    eval_every: int
    seed: int
    corpus: str | None
    corpus_max_bytes: int | None
    vocab_size: int
    tokenizer: str | None
    extra: dict[str, Any]


#: the declared fields of train_config.json and their types, as `read_train_config` checks them
TRAIN_CONFIG_TYPES: dict[str, Any] = typing.get_type_hints(TrainConfigDoc)
#: positive sizes of train_config.json (0 or below is no run this project makes)
TRAIN_CONFIG_POSITIVE = ("heads", "kv_heads", "steps", "batch_size", "seq_len", "eval_every", "vocab_size")


def read_train_config(path: str | Path) -> TrainConfigDoc:
    """train_config.json, checked: an object, `TRAIN_CONFIG_TYPES`, positive sizes, lr > 0."""
    doc = read_json_object(path, "a training config")
    check_fields(doc, TRAIN_CONFIG_TYPES, path)
    for name in TRAIN_CONFIG_POSITIVE:
        if doc.get(name) is not None and doc[name] < 1:
            raise RunFileError(f"{path}: {name} = {doc[name]} must be at least 1")
    if doc.get("corpus_max_bytes") is not None and doc["corpus_max_bytes"] < 0:
        raise RunFileError(f"{path}: corpus_max_bytes = {doc['corpus_max_bytes']} must not be negative")
    if "lr" in doc and not doc["lr"] > 0:
        raise RunFileError(f"{path}: lr = {doc['lr']} must be above 0")
    return typing.cast(TrainConfigDoc, doc)


def read_state(path: str | Path, steps: int | None = None) -> dict[str, Any]:
    """checkpoint/state.json: an object whose `step` is an integer in [0, steps] (`steps`: the
    run's budget, None: unchecked above)."""
    doc = read_json_object(path, "a checkpoint state")
    step = doc.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        raise RunFileError(f"{path}: step = {step!r:.80} is not an integer")
    if step < 0 or (steps is not None and step > steps):
        bound = f"[0, {steps}] (the run's steps)" if steps is not None else "0 or above"
        raise RunFileError(f"{path}: step = {step} is not in {bound}")
    for name in ("tokens", "flops"):
        value = doc.get(name, 0)
        if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
                or value < 0):
            raise RunFileError(f"{path}: {name} = {value!r:.80} is not a number >= 0")
    return doc


class SummaryDoc(TypedDict, total=False):
    """The fields of summary.json checked where present (the trainer writes more: parameters,
    tokens, flops, seed, lr, routing_heads, ...; `mhar_probe.train.Trainer.summary`)."""

    finished: bool
    steps: int
    tail_mean_val_loss: float | None
    initial_val_loss: float | None
    final_val_loss: float | None
    tail_k: int
    tail_evaluations: int  # evaluations after step 0 (`mhar_probe.tail`; absent before issue 54)
    method: str | None
    preset: str | None


#: the numbers summary.json may hold, where present (non-finite ones refused)
SUMMARY_TYPES: dict[str, Any] = typing.get_type_hints(SummaryDoc)


def read_summary(path: str | Path) -> SummaryDoc:
    """summary.json: an object with `SUMMARY_TYPES` (non-finite numbers refused)."""
    doc = read_json_object(path, "a run summary")
    check_fields(doc, SUMMARY_TYPES, path)
    return typing.cast(SummaryDoc, doc)


class MetricsRow(TypedDict):
    """One line of metrics.jsonl: every step has `step`, `tokens`, `flops`, `lr`; training steps
    `loss`, `grad_norm`, `tokens_per_s` (and the step's extra terms: cpt's `z_loss`); evaluation
    steps (and step 0) `val_loss`."""

    step: int
    tokens: NotRequired[int]
    flops: NotRequired[float]
    lr: NotRequired[float]
    loss: NotRequired[float]
    grad_norm: NotRequired[float]
    tokens_per_s: NotRequired[float]
    val_loss: NotRequired[float]
    z_loss: NotRequired[float]


#: values of a metrics line, where present: (lowest, highest) a real run can log; a loss of a
#: few hundred nats, or more FLOPs than all the world's computers have done, is a damaged file
METRIC_LIMITS: dict[str, tuple[float, float]] = {
    "loss": (0.0, 1e4), "val_loss": (0.0, 1e4), "flops": (0.0, 1e32), "tokens": (0.0, 1e18),
    "lr": (0.0, 1e3), "grad_norm": (0.0, math.inf), "tokens_per_s": (0.0, math.inf),
}


def check_metrics_row(row: Any, where: str) -> MetricsRow:
    """One metrics.jsonl line ("FILE:LINE" in `where`): an object with an integer step >= 0 whose
    values are numbers within `METRIC_LIMITS`. A non-finite training loss is kept (a diverged
    run logs it before it stops); a non-finite val_loss or flops is refused."""
    if not isinstance(row, dict) or "step" not in row:
        raise RunFileError(f"{where}: expected an object with a 'step' field")
    step = row["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise RunFileError(f"{where}: 'step' must be an integer >= 0, got {step!r:.80}")
    for name, (lo, hi) in METRIC_LIMITS.items():
        value = row.get(name)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RunFileError(f"{where}: {name!r} must be a number, got {value!r:.80}")
        if name in ("loss", "grad_norm") and not math.isfinite(value):
            continue
        if not (lo <= value <= hi):
            raise RunFileError(f"{where}: {name!r} = {value!r} is outside [{lo:g}, {hi:g}], no value a run logs")
    return typing.cast(MetricsRow, row)


def read_metrics(path: str | Path) -> list[MetricsRow]:
    """The rows of a metrics.jsonl, in file order ([] when it does not exist yet; blank lines
    skipped); a line that is not UTF-8 JSON, or not a row a run logs (`check_metrics_row`), is a
    `RunFileError` "FILE:LINE: ..."."""
    path = Path(path)
    if not path.exists():
        return []
    return [check_metrics_row(row, f"{path}:{lineno}") for lineno, row in read_jsonl(path, RunFileError)]


def read_sessions(path: str | Path) -> list[dict[str, Any]]:
    """sessions.json (`mhar_probe.provenance`): a list of objects, each with an integer `step`
    >= 0 and a string `time`, steps not decreasing ([] when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    doc = read_json(path)
    if not isinstance(doc, list):
        raise RunFileError(f"{path}: the sessions must be a JSON list, got {type(doc).__name__}")
    last = 0
    for k, session in enumerate(doc):
        step = session.get("step") if isinstance(session, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or step < last or not isinstance(session.get("time"), str):
            raise RunFileError(f"{path}: session {k} needs an integer step >= {last} and a string time")
        last = step
    return doc


def read_model_config(path: str | Path, check: Callable[[dict[str, Any], str], None] | None = None
                      ) -> dict[str, Any]:
    """config.json as its raw object, before any model is built from it; `check(doc, where)`:
    the model's own value checks (`mhar_probe.model.saved.check_config_values`), which live
    above this floor."""
    doc = read_json_object(path, "a model config")
    if check is not None:
        check(doc, str(path))
    return doc


# ----------------------------------------------------------------------------- the run directory
@dataclass(frozen=True)
class RunFiles:
    """The files of one run directory `path`: where each lies, and its checked reader.

    A document that is missing reads as empty ({} or []): a run being written has only some
    of them yet, a converted model none but its config. One that is damaged raises
    `RunFileError` naming the file (and line)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # ------------------------------------------------------------------ where each file lies
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def weights_path(self) -> Path:
        return self.path / WEIGHTS

    @property
    def train_config_path(self) -> Path:
        return self.path / TRAIN_CONFIG

    @property
    def corpus_path(self) -> Path:
        return self.path / CORPUS

    @property
    def metrics_path(self) -> Path:
        """metrics.jsonl, or metrics.jsonl.gz where only that exists (an exported run)."""
        plain, packed = self.path / METRICS, self.path / METRICS_GZ
        return packed if packed.exists() and not plain.exists() else plain

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def sessions_path(self) -> Path:
        return self.path / SESSIONS

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def state_path(self) -> Path:
        return self.path / CHECKPOINT / STATE

    @property
    def routing_path(self) -> Path:
        return self.path / ROUTING

    @property
    def eval_path(self) -> Path:
        return self.path / EVAL

    @property
    def has_tokenizer(self) -> bool:
        return (self.path / TOKENIZER).exists() or (self.path / TOKENIZER_CONFIG).exists()

    # ------------------------------------------------------------------ what each file holds
    def model_config(self, check: Callable[[dict[str, Any], str], None] | None = None) -> dict[str, Any]:
        """config.json (`read_model_config`; {} when absent)."""
        return read_model_config(self.config_path, check) if self.config_path.exists() else {}

    def train_config(self) -> TrainConfigDoc:
        """train_config.json (`read_train_config`; {} when absent, e.g. a converted model)."""
        path = self.train_config_path
        return read_train_config(path) if path.exists() else TrainConfigDoc()

    def corpus(self) -> dict[str, Any]:
        """corpus.json, an object ({} when absent)."""
        return read_json_object(self.corpus_path, "a corpus record") if self.corpus_path.exists() else {}

    def summary(self) -> SummaryDoc:
        """summary.json (`read_summary`; {} until the run has finished or failed)."""
        return read_summary(self.summary_path) if self.summary_path.exists() else SummaryDoc()

    def sessions(self) -> list[dict[str, Any]]:
        """sessions.json (`read_sessions`; [] before the run started, or for a run trained before
        sessions were recorded)."""
        return read_sessions(self.sessions_path)

    def metrics(self) -> list[MetricsRow]:
        """metrics.jsonl (`read_metrics`; [] before its first line is written)."""
        return read_metrics(self.metrics_path)

    def state(self, steps: int | None = None) -> dict[str, Any]:
        """checkpoint/state.json (`read_state`); raises if absent: ask `state_path` first."""
        return read_state(self.state_path, steps)

    @property
    def finished(self) -> bool:
        """Whether summary.json says the run finished (a failed or running run: False)."""
        return self.summary().get("finished") is True
