"""Run EleutherAI's LM Evaluation Harness in-process on a trained run, fully offline.

The run's final model (`model.safetensors` + `config.json`) and tokenizer are loaded with
the Auto classes and wrapped in the harness's Hugging Face class,
`HFLM(pretrained=model, tokenizer=tok, max_length=..., batch_size=...)`. Tasks come from
local YAML directories only (the shipped held-out tasks, see `heldout`, plus any
`--tasks-dir`); the harness's own task registry is indexed only when a requested name is
not found locally, and then its datasets must already be in the local Hugging Face cache.

Outputs are the harness CLI's files, written by `EvaluationTracker.save_results_aggregated`
and `save_results_samples` (`<out>/<model name>/results_<date>.json` and
`samples_<task>_<date>.jsonl`), plus `<out>/provenance.json`; the results file also carries
the provenance under the key `mhar_provenance`. Everything is written into a temporary
sibling of `<out>` and renamed into place at the end, so an interrupted evaluation leaves
nothing half-written, and an existing `<out>` is replaced only with `overwrite=True`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..atomic import replace_dir, staging_dir
from ..outputs import OutputKind, check_device, check_output
from ..model import saved
from ..rundir import load_pretrained, unfinished_hint
from ..runfiles import CONFIG, TRAIN_CONFIG, WEIGHTS, RunFiles, read_model_config
from .errors import EvalError
from .heldout import SHIPPED_TASKS, TaskFiles, heldout_tasks, sha256_file

#: datasets / hub must never reach the network
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
#: `dataset_path` values that read local files through `data_files`
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow"})


@dataclass
class EvalConfig:
    """Options of one `mhar eval` call."""

    run: str
    tasks: list[str]
    out: str | None = None  # default: <run>/eval
    limit: int | None = None
    batch_size: int = 8
    device: str | None = None  # default: cuda when available, else cpu
    max_length: int | None = None  # default: the run's training sequence length
    tasks_dirs: list[str] = field(default_factory=list)
    overwrite: bool = False
    seed: int = 0
    bootstrap_iters: int = 1000

    def out_dir(self) -> Path:
        return Path(self.out) if self.out else RunFiles(Path(self.run)).eval_path


@dataclass
class EvalSummary:
    """What an evaluation produced: file paths, headline metrics and timing."""

    out: Path
    results_path: Path
    samples_paths: dict[str, Path]
    metrics: dict[str, dict[str, Any]]  # task -> {"metric,filter": value}
    provenance: dict[str, Any]
    seconds: float

    def lines(self) -> list[str]:
        """What `mhar eval` prints: each task's headline metrics, then the files written."""
        out = []
        for task, metrics in self.metrics.items():
            shown = ", ".join(f"{k.split(',')[0]}={v:.4f}" for k, v in metrics.items()
                              if isinstance(v, (int, float)) and "_stderr" not in k)
            out.append(f"{task}: {shown}")
        out.append(f"wrote {self.results_path}")
        out += [f"wrote {path}" for path in self.samples_paths.values()]
        out.append(f"wrote {self.out / 'provenance.json'} ({self.seconds:.1f} s)")
        return out


# ----------------------------------------------------------------------------- run loading
def _offline() -> None:
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    try:  # datasets reads its offline flag at import time; make sure it is set if imported
        import datasets.config as dcfg

        dcfg.HF_DATASETS_OFFLINE = True
    except Exception:  # pragma: no cover - datasets always present with lm_eval
        pass


def check_run(run: str | os.PathLike) -> Path:
    """The run directory if it holds a final model and tokenizer, else an `EvalError`."""
    path = Path(run)
    if not path.exists():
        raise EvalError(f"run directory {path} does not exist")
    if not path.is_dir():
        raise EvalError(f"{path} is not a directory; pass a run directory made by `mhar train`")
    files = RunFiles(path)
    missing = [n for n in (CONFIG, WEIGHTS) if not (path / n).exists()]
    if missing:
        hint = unfinished_hint(path) or "not a finished run directory"
        raise EvalError(f"{path}: {' and '.join(missing)} missing ({hint})")
    if not files.has_tokenizer:
        raise EvalError(f"{path}: no tokenizer (tokenizer.json) saved in the run directory")
    return path


def train_settings(run: Path) -> dict[str, Any]:
    """The run's `train_config.json` ({} when absent, e.g. a converted model)."""
    return dict(RunFiles(run).train_config())


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(run: Path, device: str):
    """The run's model (eval mode, on `device`) and tokenizer.

    MHAR routing runs with the backend that suits the device (triton on CUDA, eager on CPU),
    whatever backend the run was trained with.
    """
    import torch
    from transformers import AutoTokenizer

    import mhar_probe  # noqa: F401  (registers the Auto classes)

    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise EvalError(f"--device {device!r} is not a torch device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise EvalError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
    from mhar_probe.model.routing import choose_backend, set_routing_backend

    backend = choose_backend(dev)
    model = saved.load_model(run, "model", local_files_only=True)
    set_routing_backend(model, backend).to(dev).eval()
    tok = load_pretrained(AutoTokenizer.from_pretrained, run, "tokenizer", local_files_only=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def eval_max_length(run: Path, settings: dict[str, Any], model, override: int | None) -> int:
    """The context the harness gives the model: the training sequence length by default, else the
    model's position limit (a converted delta model keeps it in its nested base config)."""
    limit = saved.position_limit(model.config)
    if override is not None:
        if override < 2:
            raise EvalError(f"--max-length must be at least 2, got {override}")
        if limit and override > limit:
            raise EvalError(f"--max-length {override} exceeds the model's position limit {limit}")
        return override
    if settings.get("seq_len"):
        return int(settings["seq_len"])
    if settings.get("preset"):
        from ..model.config import MHARConfig

        return MHARConfig.preset_seq_len(settings["preset"])
    if limit:
        return int(limit)
    raise EvalError(f"{run}: cannot tell the model's context length; pass --max-length")


#: the harness's warnings for an in-memory model, which is what `make_lm` passes on purpose
PRETRAINED_OBJECT_WARNINGS = ("`pretrained` model kwarg is not of type `str`",
                              "Passed an already-initialized model through `pretrained`")


class _DropMessage(logging.Filter):
    def __init__(self, *texts: str) -> None:
        super().__init__()
        self.texts = texts

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(text in record.getMessage() for text in self.texts)


def make_lm(model, tok, *, max_length: int, batch_size: int):
    """Wrap an in-memory model + tokenizer in the harness's Hugging Face class (without its warnings
    that an in-memory model ignores the model-loading arguments, none are given, and runs in one
    process, as it does here)."""
    from lm_eval.models.huggingface import HFLM

    quiet = _DropMessage(*PRETRAINED_OBJECT_WARNINGS)
    logger = logging.getLogger("lm_eval.models.huggingface")
    logger.addFilter(quiet)
    try:
        return HFLM(pretrained=model, tokenizer=tok, backend="causal", max_length=max_length,
                    batch_size=batch_size)
    finally:
        logger.removeFilter(quiet)


def quiet_git_hash() -> str | None:
    """What the harness's `get_git_commit_hash` records (`git describe --always` of the working
    directory), without git's "fatal: not a git repository" on stderr outside a checkout."""
    import subprocess

    try:
        done = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


@contextlib.contextmanager
def _quiet_git(evaluator_module):
    """`evaluator_module.get_git_commit_hash` replaced by `quiet_git_hash` while the harness runs."""
    original = getattr(evaluator_module, "get_git_commit_hash", None)
    if original is None:  # a harness that records no commit
        yield
        return
    evaluator_module.get_git_commit_hash = quiet_git_hash
    try:
        yield
    finally:
        evaluator_module.get_git_commit_hash = original


# ----------------------------------------------------------------------------- tasks
def shipped_task_files(run: Path, settings: dict[str, Any]) -> TaskFiles:
    """Materialise the held-out tasks for the corpus the run was trained on."""
    from ..data import load_run_corpus
    from ..data.errors import DataError

    if not settings:
        raise EvalError(f"{run}: no {TRAIN_CONFIG}, so the held-out split is unknown; the shipped tasks "
                        f"({', '.join(SHIPPED_TASKS)}) need a run made by `mhar train` (use --tasks-dir instead)")
    try:
        corpus = load_run_corpus(settings)
    except DataError as e:
        raise EvalError(f"{run}: cannot rebuild the training corpus for the held-out tasks: {e}") from None
    recorded = _recorded_fingerprint(run)
    if recorded and recorded != corpus.fingerprint:
        raise EvalError(f"{run}: the corpus {settings.get('corpus') or 'embedded'} has changed since training "
                        f"(fingerprint {corpus.fingerprint[:12]} != {recorded[:12]} in corpus.json); "
                        "its held-out split would not be held out")
    return heldout_tasks(corpus.val, corpus.fingerprint)


def export_tasks(run: str | os.PathLike, dest: str | os.PathLike, overwrite: bool = False) -> TaskFiles:
    """The run's shipped held-out tasks (YAMLs and their data files) written into `dest`, a
    folder of your choosing, for the stock harness: ``lm_eval ... --include_path DEST``.

    The YAMLs name their data files by absolute path inside `dest` (the folder can be moved only
    by exporting again). `dest` must be new or empty, or, with `overwrite`, an earlier export
    (one with counts.json); it is filled under a temporary name and renamed into place."""
    from ..atomic import build_dir
    from ..data import load_run_corpus
    from .heldout import item_version, write_heldout_tasks

    run_dir = check_run(run)
    settings = train_settings(run_dir)
    final = Path(dest).resolve()
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        if not final.is_dir():
            raise EvalError(f"--export-tasks {dest} is a file; give a new folder")
        if not (overwrite and (final / "counts.json").exists()):
            raise EvalError(f"--export-tasks {dest} exists and is not empty; give a new folder"
                            + ("" if overwrite else " (or --overwrite to replace an earlier export)"))
    shipped_task_files(run_dir, settings)  # checks the corpus is still the one the run was trained on
    corpus = load_run_corpus(settings)

    def fill(tmp: Path) -> None:
        counts = write_heldout_tasks(corpus.val, tmp, data_root=final, version=item_version(corpus.fingerprint))
        (tmp / "counts.json").write_text(json.dumps(counts, sort_keys=True) + "\n", encoding="utf-8")

    build_dir(final, fill, replace=final.exists())
    counts = json.loads((final / "counts.json").read_text(encoding="utf-8"))
    sha = {p.name: sha256_file(p) for p in sorted(final.iterdir()) if p.suffix in (".jsonl", ".yaml")}
    return TaskFiles(root=final, tasks=SHIPPED_TASKS, sha256=sha, counts=counts)


def stock_command(run: str | os.PathLike, files: TaskFiles, device: str | None = None,
                  budget_s: float | None = None) -> list[str]:
    """The stock `lm_eval` command for exported tasks, sized for this machine (its device, a batch
    size, the run's context, and `--limit` when the whole set would take longer than `budget_s`),
    then a comment line with its estimated time (`estimate`: the work counted from the items, its
    cost measured here through the harness's model class on a batch of the tasks' own requests)."""
    import torch

    from . import estimate
    from .heldout import LASTWORD_TASK, NEXTLINE_GEN_TASK, NEXTLINE_TASK

    run_dir = check_run(run)
    device = device or default_device()
    batch = 64 if device.startswith("cuda") else 8
    model, tok = load_model(run_dir, device)
    max_length = eval_max_length(run_dir, train_settings(run_dir), model, None)
    usable = [t for t in files.tasks if files.counts.get(t)]  # a small corpus can leave a task empty
    command = (f"lm_eval --model hf --model_args pretrained={run},trust_remote_code=True,max_length={max_length} "
               f"--tasks {','.join(usable)} --include_path {files.root} --device {device} --batch_size {batch}")
    rows = {t: estimate.read_rows(files.root, t) for t in usable}
    pairs = ([(r["context"], r["target"]) for r in rows.get(LASTWORD_TASK, [])]
             or [(r["context"] + "\n", c) for r in rows.get(NEXTLINE_TASK, []) for c in r["choices"]])
    if not pairs:
        return [command, "# no estimate: no scored items to time"]

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    prompts = [r["context"] + "\n" for r in rows.get(NEXTLINE_GEN_TASK, [])]
    with torch.no_grad():
        speed = estimate.measure_speed(make_lm(model, tok, max_length=max_length, batch_size=batch), pairs, prompts,
                                       batch=batch, count=count)
    works = [estimate.task_work(t, rows[t], count, max_length) for t in usable]
    kw = dict(batch=batch, speed=speed)
    full = sum(estimate.seconds(w, **kw) for w in works)
    limit = estimate.fitting_limit(works, estimate.BUDGET_S if budget_s is None else budget_s, **kw)
    where = device + (f", {torch.get_num_threads()} threads" if device == "cpu" else "")
    said = ("(an estimate: the items' requests at the speed measured here on one batch of them; the harness's "
            "start-up is not counted)")
    if not limit:
        return [command, f"# estimate: about {estimate.clock(full)} here ({where}) for every item {said}"]
    took = sum(estimate.seconds(w, limit=limit, **kw) for w in works)
    items = max(w.items for w in works)
    return [f"{command} --limit {limit}",
            f"# estimate: about {estimate.clock(took)} here ({where}) for the first {limit} items of each task; "
            f"all of them (up to {items} a task, without --limit): about {estimate.clock(full)} {said}"]


def _recorded_fingerprint(run: Path) -> str | None:
    files = RunFiles(run)
    if not files.corpus_path.exists():
        return None
    fingerprint = files.corpus().get("fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise EvalError(f"{files.corpus_path}: fingerprint = {fingerprint!r:.80} is not a string")
    return fingerprint


def check_tasks_dirs(dirs: Sequence[str]) -> list[Path]:
    out = []
    for d in dirs:
        p = Path(d)
        if not p.exists():
            raise EvalError(f"--tasks-dir {p} does not exist")
        if not p.is_dir():
            raise EvalError(f"--tasks-dir {p} is not a directory of task YAML files")
        if not any(p.rglob("*.yaml")) and not any(p.rglob("*.yml")):
            raise EvalError(f"--tasks-dir {p} holds no task YAML files (*.yaml)")
        for yaml_path in sorted(p.rglob("*.yaml")):
            if problem := yaml_problem(yaml_path):
                raise EvalError(f"--tasks-dir {p}: {yaml_path} is not a readable task YAML ({problem}); "
                                "the harness would skip it in silence: fix or remove it")
        out.append(p.resolve())
    return out


def yaml_problem(path: Path) -> str | None:
    """Why the task file `path` cannot be read (YAML syntax, not a mapping), else None. The harness's
    own tags (`!function`) are accepted unresolved, as its task index reads them."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        return " ".join(str(e).split())[:200]
    return None if isinstance(doc, dict) else f"a YAML {type(doc).__name__}, not a mapping of task fields"


def task_manager(tasks: Sequence[str], local_dirs: Sequence[Path]):
    """A `TaskManager` that knows every requested task, or an `EvalError` listing the choices.

    Local directories are indexed alone first; the harness's built-in registry (slow to index,
    and its tasks need datasets already downloaded) only if a name is not found locally.
    """
    import difflib

    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=[str(d) for d in local_dirs] or None, include_defaults=False)
    missing = [t for t in tasks if t not in tm.all_tasks and not _is_yaml_path(t)]
    if not missing:
        return tm
    local = sorted(tm.all_tasks)
    full = TaskManager(include_path=[str(d) for d in local_dirs] or None, include_defaults=True)
    unknown = [t for t in missing if t not in full.all_tasks]
    if unknown:
        hints = []
        for t in unknown:
            close = difflib.get_close_matches(t, [*SHIPPED_TASKS, *local], n=3, cutoff=0.6) \
                or difflib.get_close_matches(t, full.all_tasks, n=5, cutoff=0.6)
            hints.append(f"{t!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise EvalError(f"unknown task(s) {'; '.join(hints)}; local tasks: {', '.join(local) or 'none'} "
                        f"(shipped: {', '.join(SHIPPED_TASKS)}; add your own YAMLs with --tasks-dir)")
    return full


def _is_yaml_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) and Path(name).is_file()


def check_task_files(tm, tasks: Sequence[str]) -> None:
    """Local data files named by the requested tasks (and their group members) must exist.

    Built-in hub datasets are checked by the harness itself (offline: it fails when the
    dataset is not cached, and `run_eval` reports that as an `EvalError`).
    """
    seen: set[str] = set()
    todo = list(tasks)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        entry = tm.task_index.get(name)
        cfg = (entry.cfg if entry else None) or {}
        for child in cfg.get("task", []) if isinstance(cfg.get("task"), list) else []:
            if isinstance(child, str):
                todo.append(child)
        if cfg.get("dataset_path") not in LOCAL_BUILDERS:
            continue
        where = getattr(entry, "yaml_path", None)
        files = (cfg.get("dataset_kwargs") or {}).get("data_files")
        if files is None:
            raise EvalError(f"task {name!r} ({where}): dataset_path {cfg['dataset_path']!r} needs "
                            "dataset_kwargs.data_files naming local files")
        for f in _flatten_files(files):
            if any(ch in f for ch in "*?[") or "://" in f:
                continue  # glob patterns and URLs are left to datasets
            if not Path(f).exists():
                rel = "" if Path(f).is_absolute() else f" (relative to the current directory {Path.cwd()})"
                raise EvalError(f"task {name!r} ({where}): data file {f} does not exist{rel}")
            if Path(f).is_file() and not Path(f).read_bytes().strip():
                raise EvalError(f"task {name!r} ({where}): data file {f} is empty, so the task has no items")


def _flatten_files(files: Any) -> list[str]:
    if isinstance(files, str):
        return [files]
    if isinstance(files, dict):
        return [f for v in files.values() for f in _flatten_files(v)]
    if isinstance(files, (list, tuple)):
        return [f for v in files for f in _flatten_files(v)]
    return []


# ----------------------------------------------------------------------------- outputs
def is_eval_dir(path: Path) -> bool:
    """An output directory `mhar eval` wrote (its provenance.json is there)."""
    return (path / "provenance.json").is_file()


#: what `mhar eval` writes: --overwrite replaces only one of these
EVAL_OUTPUT = OutputKind("evaluation directory", directory=True, is_own=is_eval_dir, marker="provenance.json",
                         error=EvalError)


def check_out(out: Path, overwrite: bool, inputs: Sequence[tuple[str, Any]] = ()) -> None:
    """Refuse an output that is or holds an input, a non-empty one unless `overwrite`, and with
    `overwrite` one that `mhar eval` did not write (`mhar_probe.outputs.check_output`)."""
    check_output(out, EVAL_OUTPUT, overwrite=overwrite, inputs=inputs)


def _model_name(run: Path) -> str:
    return run.resolve().name or "model"


def provenance(run: Path, settings: dict[str, Any], cfg: EvalConfig, *, max_length: int, device: str,
               task_files: TaskFiles | None, local_dirs: Sequence[Path]) -> dict[str, Any]:
    """Where the numbers come from: run, checkpoint hash, corpus, task files, versions, options."""
    import lm_eval
    import torch
    import transformers

    import mhar_probe

    files = RunFiles(run)
    corpus = None
    if files.corpus_path.exists():
        c = files.corpus()
        corpus = {"name": c.get("name"), "fingerprint": c.get("fingerprint")}
    model_cfg = read_model_config(files.config_path)
    return {
        "run": str(run.resolve()),
        "checkpoint": str(files.weights_path.resolve()),
        "checkpoint_sha256": sha256_file(files.weights_path),
        "model": {k: model_cfg.get(k) for k in ("model_type", "preset", "residual_method", "routing_heads",
                                                 "num_hidden_layers", "hidden_size", "vocab_size")},
        "train": {k: settings.get(k) for k in ("method", "preset", "seed", "steps", "lr", "seq_len", "corpus",
                                               "corpus_max_bytes")} if settings else None,
        "corpus": corpus,
        "tasks": list(cfg.tasks),
        "shipped_tasks": None if task_files is None else {
            "dir": str(task_files.root), "items": task_files.counts, "sha256": task_files.sha256},
        "tasks_dirs": [str(d) for d in local_dirs if task_files is None or d != task_files.root],
        "limit": cfg.limit, "batch_size": cfg.batch_size, "max_length": max_length, "device": device,
        "seed": cfg.seed,
        "versions": {"mhar_probe": mhar_probe.__version__, "lm_eval": getattr(lm_eval, "__version__", None),
                     "torch": torch.__version__, "transformers": transformers.__version__},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


class _TruncationCounter(logging.Filter):
    """Swallows the harness's one-warning-per-request left-truncation message and counts it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "exceeds model's maximum length" in record.getMessage():
            self.count += 1
            return False
        return True


@contextlib.contextmanager
def _count_truncations():
    counter = _TruncationCounter()
    logger = logging.getLogger("lm_eval.models.huggingface")
    logger.addFilter(counter)
    try:
        yield counter
    finally:
        logger.removeFilter(counter)


# ----------------------------------------------------------------------------- main entry
def run_eval(cfg: EvalConfig, log=print) -> EvalSummary:
    """Evaluate `cfg.run` on `cfg.tasks` with the harness and write its standard files."""
    _offline()
    t0 = time.perf_counter()
    if not cfg.tasks:
        raise EvalError("no tasks given; pass --tasks " + ",".join(SHIPPED_TASKS))
    if cfg.limit is not None and cfg.limit < 1:
        raise EvalError(f"--limit must be a positive number of items, got {cfg.limit}")
    if cfg.batch_size < 1:
        raise EvalError(f"--batch-size must be positive, got {cfg.batch_size}")
    run = check_run(cfg.run)
    out = cfg.out_dir()
    local_dirs = check_tasks_dirs(cfg.tasks_dirs)
    inputs = [("run", run), *(("--tasks-dir", d) for d in local_dirs)]
    check_out(out, cfg.overwrite, inputs)
    check_device(cfg.device)
    settings = train_settings(run)

    task_files = None
    if any(t in SHIPPED_TASKS for t in cfg.tasks):
        log(f"building held-out tasks for {run} ...")
        task_files = shipped_task_files(run, settings)
        local_dirs = [task_files.root, *local_dirs]
    tm = task_manager(cfg.tasks, local_dirs)
    check_task_files(tm, cfg.tasks)

    device = cfg.device or default_device()
    log(f"loading {run} on {device} ...")
    model, tok = load_model(run, device)
    max_length = eval_max_length(run, settings, model, cfg.max_length)
    lm = make_lm(model, tok, max_length=max_length, batch_size=cfg.batch_size)
    prov = provenance(run, settings, cfg, max_length=max_length, device=device, task_files=task_files,
                      local_dirs=local_dirs)

    from lm_eval import evaluator
    from lm_eval.loggers import EvaluationTracker

    staging = staging_dir(out)  # the harness writes into it over the whole evaluation
    try:
        tracker = EvaluationTracker(output_path=str(staging))
        log(f"evaluating {', '.join(cfg.tasks)} (limit {cfg.limit or 'none'}, batch {cfg.batch_size}, "
            f"context {max_length}) ...")
        with _count_truncations() as truncated, _quiet_git(evaluator):
            try:
                results = evaluator.simple_evaluate(
                    model=lm, model_args={"pretrained": _model_name(run)}, tasks=list(cfg.tasks), task_manager=tm,
                    batch_size=cfg.batch_size, device=device, limit=cfg.limit, log_samples=True,
                    evaluation_tracker=tracker, bootstrap_iters=cfg.bootstrap_iters, random_seed=cfg.seed,
                    numpy_random_seed=cfg.seed, torch_random_seed=cfg.seed, fewshot_random_seed=cfg.seed)
            except (FileNotFoundError, ConnectionError) as e:
                raise EvalError(f"the harness could not load a task's data offline ({type(e).__name__}: {e}); "
                                "local tasks need existing data_files, hub tasks a dataset already in the HF "
                                "cache") from None
        if truncated.count:
            log(f"{truncated.count} request(s) longer than the {max_length}-token context were cut from the left "
                "(the harness's standard truncation)")
        if results is None:  # non-zero rank in a distributed launch; nothing to write
            raise EvalError("the harness returned no results (not rank 0?)")
        samples = results.pop("samples")
        prov["truncated_requests"] = truncated.count
        prov["seconds"] = round(time.perf_counter() - t0, 3)
        results["mhar_provenance"] = prov
        tracker.save_results_aggregated(results=results, samples=samples)
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
        (staging / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n", encoding="utf-8")
        check_out(out, cfg.overwrite, inputs)  # again: `out` may have appeared while the harness ran
        replace_dir(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

    res_files = sorted(out.rglob("results_*.json"))
    samples_paths = {}
    for task_name in results["configs"]:
        found = sorted(out.rglob(f"samples_{task_name}_*.jsonl"))
        if found:
            samples_paths[task_name] = found[-1]
    metrics = {t: {k: v for k, v in r.items() if "," in k} for t, r in results["results"].items()}
    return EvalSummary(out=out, results_path=res_files[-1], samples_paths=samples_paths, metrics=metrics,
                       provenance=prov, seconds=time.perf_counter() - t0)
