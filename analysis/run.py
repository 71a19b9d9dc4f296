"""One training run read from its directory: the one model of a run that the analyses and the
figures share.

A run directory (`mhar_probe.rundir`) holds config.json (the model's Hugging Face config),
train_config.json (every training option), summary.json (written last), corpus.json and
metrics.jsonl. `Run.read(path)` loads them through their checked readers
(`mhar_probe.runfiles.RunFiles`); the properties give the run's axes
(method, heads, kv, lr, seed, preset, size, corpus) with one rule each for where they come from,
and its curves. Two views are built from it, never from the files again:

- `analysis.runs.load_runs`: many runs as one xarray dataset (the figures' grid);
- `Run.record`: the plain dict `analysis.stats.curves` pairs and averages.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from mhar_probe.errors import UserError
from mhar_probe.model.saved import check_config_values
from mhar_probe.runfiles import (CONFIG, METRICS, METRICS_GZ, SUMMARY, TRAIN_CONFIG, MetricsRow, RunFiles,
                                 SummaryDoc, TrainConfigDoc, read_metrics)
from mhar_probe.model.methods import routing_heads_of
from mhar_probe.tail import TAIL_K, Tail, tail_of

#: files any one of which makes a directory a run directory
RUN_MARKERS = (TRAIN_CONFIG, SUMMARY, CONFIG, METRICS, METRICS_GZ)


def is_run_path(path: str | Path) -> bool:
    """Whether `path` is a run: a directory holding any of `RUN_MARKERS`, or a metrics.jsonl."""
    path = Path(path)
    if path.is_file():
        return path.name in (METRICS, METRICS_GZ)
    return path.is_dir() and any((path / name).exists() for name in RUN_MARKERS)


def run_paths(paths: Iterable[str | Path], *, error: type[UserError] = UserError,
              note: Callable[[str], object] = lambda line: print(line, file=sys.stderr)) -> list[Path]:
    """The runs among `paths` as a shell glob gives them (`mhar stats ceg runs/*`).

    The rule: a path that does not exist is an error; of several paths, the ones that are not
    runs (`is_run_path`: e.g. a sweep's manifest.json or its evals/ folder) are skipped, each
    with one `note`; a single path is always read as a run, so that what is wrong with it is said.
    No run left is an error."""
    paths = [Path(p) for p in paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise error(f"run {missing[0]} does not exist")
    if len(paths) == 1:
        return paths
    kept = [p for p in paths if is_run_path(p)]
    for p in paths:
        if p not in kept:
            note(f"skipped {p}: not a run (no {', '.join(RUN_MARKERS)})")
    if not kept:
        raise error(f"none of the {len(paths)} paths given is a run directory "
                    f"(one holding {' or '.join(RUN_MARKERS)})")
    return kept


@contextlib.contextmanager
def reraised_as(error: type[UserError]) -> Iterator[None]:
    """A damaged run file (`mhar_probe.runfiles.RunFileError`, any `UserError`) raised as the
    caller's `error` class, with the same one-line message."""
    try:
        yield
    except UserError as exc:
        if isinstance(exc, error):
            raise
        raise error(str(exc)) from None


def parse_metrics(path: Path, *, error: type[UserError] = UserError) -> list[MetricsRow]:
    """The checked lines of a metrics.jsonl (`mhar_probe.runfiles.read_metrics`: blank lines
    skipped, every line an object with an integer `step` whose values are numbers a run can
    log); a malformed line raises `error` naming file and line."""
    with reraised_as(error):
        return read_metrics(path)


def eval_curve(rows: Iterable[dict[str, Any]]) -> list[dict[str, float]]:
    """The evaluation points (lines carrying val_loss): step, tokens, flops, val_loss, in step order."""
    pts = [{"step": r["step"], "tokens": r.get("tokens"), "flops": r.get("flops"), "val_loss": float(r["val_loss"])}
           for r in rows if r.get("val_loss") is not None]
    return sorted(pts, key=lambda p: p["step"])


def scale_label(preset: Any, d: Any, L: Any) -> str:
    """The preset's name, or "preset/d{d}L{L}" when the run overrode the preset's width or depth
    (e.g. the rungs of a compute ladder), so that runs of different sizes are never pooled."""
    from mhar_probe.model.config import PRESETS

    dims = PRESETS.get(str(preset))
    if dims is None or d is None or L is None:
        return str(preset)
    if (int(d), int(L)) == (dims["hidden_size"], dims["num_hidden_layers"]):
        return str(preset)
    return f"{preset}/d{d}L{L}"


def _preset_value(preset: str | None, key: str) -> Any:
    from mhar_probe.model.config import PRESETS

    return PRESETS.get(preset or "", {}).get(key)


@dataclass(frozen=True)
class Run:
    """One run directory: its documents as read (empty where a file is missing) and its metrics."""

    path: Path
    config: dict[str, Any]  # config.json: the model's Hugging Face config
    train_config: TrainConfigDoc  # train_config.json
    summary: SummaryDoc  # summary.json ({} until the run has finished or failed)
    corpus_info: dict[str, Any]  # corpus.json
    metrics: list[MetricsRow]  # metrics.jsonl, one dict a line ([] if there is none)
    metrics_path: Path

    @classmethod
    def read(cls, path: str | Path, *, error: type[UserError] = UserError) -> Run:
        """Read the run at `path` (its directory, or its metrics.jsonl). Missing documents read
        as {}; unreadable ones, and a run with no method recorded, raise `error`."""
        path = Path(path)
        if path.is_file() and path.name not in (METRICS, METRICS_GZ):  # e.g. a sweep's manifest.json
            raise error(f"{path} is a file, not a run directory (or a run's {METRICS})")
        run_dir = path.parent if path.is_file() else path
        if not run_dir.exists():
            raise error(f"run {path} does not exist")
        files = RunFiles(run_dir)
        with reraised_as(error):  # each document by the one reader of its kind (`mhar_probe.runfiles`)
            run = cls(path=run_dir, config=files.model_config(check_config_values),
                      train_config=files.train_config(), summary=files.summary(), corpus_info=files.corpus(),
                      metrics=files.metrics(), metrics_path=files.metrics_path)
        if run._method is None:
            raise error(f"{run_dir}: no method recorded ({TRAIN_CONFIG}, {SUMMARY} and {CONFIG} missing?)")
        return run

    # ------------------------------------------------------------------------ axes
    @property
    def _method(self) -> Any:
        return self.summary.get("method") or self.train_config.get("method") or self.config.get("residual_method")

    @property
    def method(self) -> str:
        return str(self._method)

    @property
    def _extra(self) -> dict[str, Any]:
        return self.train_config.get("extra") or {}

    @property
    def preset(self) -> str | None:
        return self.summary.get("preset") or self.train_config.get("preset")

    @property
    def kv(self) -> int | None:
        """KV heads: summary, train options, model config, model overrides, else the preset's."""
        kv = (self.summary.get("kv_heads") or self.train_config.get("kv_heads")
              or self.config.get("num_key_value_heads") or self._extra.get("num_key_value_heads")
              or _preset_value(self.preset, "num_key_value_heads"))
        return int(kv) if kv else None

    @property
    def heads(self) -> int | None:
        """Routing heads H: None for methods without them, 1 for attnres, else the recorded
        count (H = KV where none is recorded)."""
        return routing_heads_of(self.method, self.summary, self.train_config, self.config, default=self.kv)

    @property
    def lr(self) -> float | None:
        lr = self.summary.get("lr") or self.train_config.get("lr")
        return float(lr) if lr is not None else None

    @property
    def seed(self) -> int | None:
        seed = self.summary.get("seed", self.train_config.get("seed"))
        return int(seed) if seed is not None else None

    @property
    def steps(self) -> int:
        """The planned budget: summary, train options, else the last logged step."""
        return int(self.summary.get("steps") or self.train_config.get("steps")
                   or (self.metrics[-1].get("step", 0) if self.metrics else 0))

    @property
    def hidden_size(self) -> int | None:
        d = (self.config.get("hidden_size") or self._extra.get("hidden_size")
             or _preset_value(self.preset, "hidden_size"))
        return int(d) if d else None

    @property
    def layers(self) -> int | None:
        L = (self.config.get("num_hidden_layers") or self._extra.get("num_hidden_layers")
             or _preset_value(self.preset, "num_hidden_layers"))
        return int(L) if L else None

    @property
    def scale(self) -> str:
        return scale_label(self.preset, self.hidden_size, self.layers)

    @property
    def corpus(self) -> str:
        return str(self.corpus_info.get("name") or self.train_config.get("corpus") or "embedded")

    @property
    def finished(self) -> bool:
        return bool(self.summary.get("finished", False))

    @property
    def reached_last_step(self) -> bool:
        """Whether the run logged an evaluation at its planned last step (summary or train options'
        `steps`; False where neither records one). True of every finished run, and of a run cut
        after its last step, while writing its final weights and summary: its curve and tail-mean
        are complete though it is not `finished`."""
        planned = self.summary.get("steps") or self.train_config.get("steps")
        evals = self.evals
        return bool(planned) and bool(evals) and evals[-1]["step"] >= int(planned)

    # ------------------------------------------------------------------------ curves
    @property
    def evals(self) -> list[dict[str, float]]:
        """Evaluation points {step, tokens, flops, val_loss}, in step order."""
        return eval_curve(self.metrics)

    @property
    def train_points(self) -> list[dict[str, Any]]:
        """Metrics lines with a training loss, in step order."""
        return sorted((r for r in self.metrics if r.get("loss") is not None), key=lambda r: r["step"])

    def tail(self, k: int = TAIL_K) -> Tail:
        """The run's tail-mean (`mhar_probe.tail`: None for a run too short for it)."""
        return tail_of(((p["step"], p["val_loss"]) for p in self.evals), k)

    def record(self, k: int = TAIL_K, *, full: bool = True,
               error: type[UserError] = UserError) -> dict[str, Any]:
        """The run as `analysis.stats.curves` reads it: method, H, kv, lr, seed, preset, curve,
        path, scale, tail_mean. A run too short for the tail-mean (`mhar_probe.tail`) is an
        `error` (`full`), as the statistics require, or has tail_mean NaN."""
        curve = self.evals
        tail = self.tail(k)
        if tail.mean is None and full:
            raise error(tail.note(str(self.metrics_path)) + " (lower it with --k)")
        return {"method": self.method, "H": self.heads, "kv": self.kv, "lr": self.lr, "seed": self.seed,
                "preset": self.preset, "curve": curve, "path": str(self.path), "scale": self.scale,
                "tail_mean": math.nan if tail.mean is None else tail.mean}

    def scalar(self, key: str, default: float = math.nan) -> float:
        """A number from summary.json, else from the last metrics line, else `default`."""
        last = self.metrics[-1] if self.metrics else {}
        return float(self.summary.get(key, last.get(key, default)))
