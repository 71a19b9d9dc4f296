"""What the JSON files of a run directory must hold, checked where they are read.

One reader per file kind; each returns the parsed document or raises `RunFileError` with one
line that names the file (and line) and what is wrong:

    read_json(path)            any JSON document: UTF-8 text, valid JSON, no NaN in the text
    read_train_config(path)    train_config.json: an object whose fields have `TRAIN_CONFIG_TYPES`
    read_state(path, steps)    checkpoint/state.json: an object whose `step` is an integer in [0, steps]
    read_summary(path)         summary.json: an object, `finished` a bool, numbers where numbers belong
    check_metrics_row(row, at) one metrics.jsonl line: an object, `step` an integer >= 0, its values
                               numbers within `METRIC_LIMITS`

The checks are on types and on ranges a real run can have, so that a hand-edited or damaged
file is refused before anything is allocated or looped over from it.
"""

from __future__ import annotations

import json
import math
import typing
import types
from pathlib import Path
from typing import Any, Mapping

from .errors import UserError
from .jsonl import not_text


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


#: the fields of train_config.json that readers other than `mhar train` use, with the types
#: `mhar_probe.train.TrainConfig` declares for them (tests/test_run_files.py keeps them equal)
TRAIN_CONFIG_TYPES: dict[str, Any] = {
    "preset": str, "method": str, "heads": int | None, "kv_heads": int | None, "steps": int, "lr": float,
    "batch_size": int, "seq_len": int | None, "eval_every": int, "seed": int, "corpus": str | None,
    "corpus_max_bytes": int | None, "vocab_size": int, "tokenizer": str | None, "extra": dict[str, Any],
}
#: positive sizes of train_config.json (0 or below is no run this project makes)
TRAIN_CONFIG_POSITIVE = ("heads", "kv_heads", "steps", "batch_size", "seq_len", "eval_every", "vocab_size")


def read_train_config(path: str | Path) -> dict[str, Any]:
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
    return doc


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


#: the numbers summary.json may hold, where present
SUMMARY_TYPES: dict[str, Any] = {
    "finished": bool, "steps": int, "tail_mean_val_loss": float | None, "initial_val_loss": float | None,
    "final_val_loss": float | None, "tail_k": int, "method": str | None, "preset": str | None,
}


def read_summary(path: str | Path) -> dict[str, Any]:
    """summary.json: an object with `SUMMARY_TYPES` (non-finite numbers refused)."""
    doc = read_json_object(path, "a run summary")
    check_fields(doc, SUMMARY_TYPES, path)
    return doc


#: values of a metrics line, where present: (lowest, highest) a real run can log; a loss of a
#: few hundred nats, or more FLOPs than all the world's computers have done, is a damaged file
METRIC_LIMITS: dict[str, tuple[float, float]] = {
    "loss": (0.0, 1e4), "val_loss": (0.0, 1e4), "flops": (0.0, 1e32), "tokens": (0.0, 1e18),
    "lr": (0.0, 1e3), "grad_norm": (0.0, math.inf), "tokens_per_s": (0.0, math.inf),
}


def check_metrics_row(row: Any, where: str) -> dict[str, Any]:
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
    return row
