"""Damaged files a command reads (issue 37, "Damaged files"): each is refused with one line on
stderr that names the file and the fault, exit status 2, no traceback, nothing written, and the
files that were there before unchanged.

Table-driven like tests/test_bad_inputs.py: each case gets a fresh copy of one trained tiny MHAR
run that also holds its captured routing dataset (`RUN`, RUN/routing.nc), and a scratch
directory (`TMP`); `prepare` damages what the case needs damaged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_checks import TINY_TRAIN as TINY, cli, train_tiny_run
from test_bad_inputs import _progress, edit_json, qwen3_base, scramble, snapshot, truncate

DATE = "2026-01-01T00-00-00.000001"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 2-step MHAR run (checkpoint at every step) with RUN/routing.nc captured from it."""
    root = tmp_path_factory.mktemp("damaged")
    train_tiny_run(root, "--method", "mhar")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        assert cli("capture", str(root / "run"), "--tokens", "64", "--batch-size", "2", "--slices", "2",
                   "--draws", "2", "--no-progress") == 0
    return root / "run"


def rewrite_weights(path: Path, change: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> None:
    save_file(change(load_file(path)), path, metadata={"format": "pt"})


def as_int32(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(torch.int32) for k, v in t.items()}


def all_nan(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, float("nan")) for k, v in t.items()}


def no_routing(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in t.items() if ".sites." not in k and "sites." not in k}


def wrong_shape(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    name = next(k for k in sorted(t) if k.endswith("q_proj.weight"))
    return {**t, name: torch.zeros(t[name].shape[0] + 1, t[name].shape[1])}


def edit_dataset(path: Path, change: Callable) -> None:
    import xarray as xr

    with xr.open_dataset(path, engine="h5netcdf") as ds:
        new = change(ds.load())
    path.unlink()
    new.to_netcdf(path, engine="h5netcdf")


def nan_weights(ds):
    ds["weight_mean"][:] = np.nan
    return ds


def edit_line(path: Path, index: int, **changes) -> None:
    """Set fields of the `index`-th line carrying val_loss of a metrics.jsonl."""
    lines = path.read_text().splitlines()
    evals = [i for i, ln in enumerate(lines) if '"val_loss"' in ln]
    row = json.loads(lines[evals[index]])
    lines[evals[index]] = json.dumps({**row, **changes})
    path.write_text("\n".join(lines) + "\n")


def samples_dir(tmp: Path, name: str, lines: list[dict] | None) -> Path:
    """An lm-eval --output_path with one results file and, unless `lines` is None, one samples file."""
    d = tmp / name
    d.mkdir()
    (d / f"results_{DATE}.json").write_text(json.dumps({"results": {"toy": {"acc,none": 0.5}}}))
    if lines is not None:
        (d / f"samples_toy_{DATE}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return d


ITEMS = [{"doc_id": i, "filter": "none", "metrics": ["acc"], "acc": i % 2} for i in range(4)]


def mcnemar_pair(tmp: Path, damage: Callable[[Path], None] | None = None) -> None:
    samples_dir(tmp, "a", ITEMS)
    samples_dir(tmp, "b", ITEMS)
    if damage is not None:
        damage(tmp / "b" / f"samples_toy_{DATE}.jsonl")


def runs_folder(run: Path, tmp: Path) -> None:
    """TMP/runs/{good,bad}: two copies of the run, the second with a garbage summary.json."""
    for name in ("good", "bad"):
        shutil.copytree(run, tmp / "runs" / name)
    scramble(tmp / "runs" / "bad" / "summary.json")


def base_with(tmp: Path, config: dict | None = None, weights: Callable | None = None) -> None:
    base = qwen3_base(tmp)
    if config:
        edit_json(base / "config.json", **config)
    if weights is not None:
        rewrite_weights(base / "model.safetensors", weights)


Case = tuple[str, Callable[[Path, Path], None], list[str], str]
CASES: list[Case] = [
    # (id, prepare(run, tmp), argv with RUN / TMP placeholders, a piece of the message)
    ("capture-int32-weights", lambda r, t: rewrite_weights(r / "model.safetensors", as_int32),
     ["capture", "RUN", "--out", "TMP/r.nc"], "is I32, not a floating-point type"),
    ("capture-nan-weights", lambda r, t: rewrite_weights(r / "model.safetensors", all_nan),
     ["capture", "RUN", "--out", "TMP/r.nc"], "non-finite value(s)"),
    ("capture-no-routing-tensors", lambda r, t: rewrite_weights(r / "model.safetensors", no_routing),
     ["capture", "RUN", "--out", "TMP/r.nc"], "tensor(s) the model needs are missing"),
    ("capture-tokenizer-wrong-type", lambda r, t: (r / "tokenizer.json").write_text("[1, 2, 3]"),
     ["capture", "RUN", "--out", "TMP/r.nc"], "has no usable tokenizer files (TypeError"),
    ("capture-hidden-size-1e9", lambda r, t: edit_json(r / "config.json", hidden_size=10**9),
     ["capture", "RUN", "--out", "TMP/r.nc"], "hidden_size=1000000000 is beyond any real model"),
    ("capture-wrong-shape-weight", lambda r, t: rewrite_weights(r / "model.safetensors", wrong_shape),
     ["capture", "RUN", "--out", "TMP/r.nc"], "its config.json needs"),
    ("info-layers-1e12", lambda r, t: edit_json(r / "config.json", num_hidden_layers=10**12),
     ["info", "RUN"], "num_hidden_layers=1000000000000 is beyond any real model"),
    ("convert-layers-1e9", lambda r, t: base_with(t, config=dict(num_hidden_layers=10**9)),
     ["convert", "TMP/base", "TMP/conv"], "num_hidden_layers=1000000000 is beyond any real model"),
    ("convert-int32-weights", lambda r, t: base_with(t, weights=as_int32),
     ["convert", "TMP/base", "TMP/conv"], "is I32, not a floating-point type"),
    ("convert-config-string-for-int", lambda r, t: base_with(t, config=dict(hidden_size="wide")),
     ["convert", "TMP/base", "TMP/conv"], "hidden_size='wide' must be a positive integer"),
    ("eval-train-config-wrong-type", lambda r, t: edit_json(r / "train_config.json", seq_len="long"),
     ["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2", "--out", "TMP/ev"], "seq_len = 'long'"),
    ("eval-nan-weights", lambda r, t: rewrite_weights(r / "model.safetensors", all_nan),
     ["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2", "--out", "TMP/ev"], "non-finite value(s)"),
    ("capture-train-config-wrong-type", lambda r, t: edit_json(r / "train_config.json", corpus_max_bytes="big"),
     ["capture", "RUN", "--out", "TMP/r.nc"], "corpus_max_bytes = 'big'"),
    ("probe-truncated-weights", lambda r, t: truncate(r / "model.safetensors"),
     ["probe", "RUN", "--out", "TMP/pr", "--tokens", "64"], "the weights changed or are damaged"),
    ("probe-renamed-dimension", lambda r, t: edit_dataset(r / "routing.nc", lambda ds: ds.rename({"head": "heads"})),
     ["probe", "RUN/routing.nc", "--out", "TMP/pr"], "dimension 'head' is missing"),
    ("probe-all-nan", lambda r, t: edit_dataset(r / "routing.nc", nan_weights),
     ["probe", "RUN/routing.nc", "--out", "TMP/pr"], "weight_mean holds"),
    ("resume-step-beyond-steps", lambda r, t: edit_json(r / "checkpoint" / "state.json", step=1000),
     ["train", "--out", "RUN", "--resume", "--steps", "3"], "step = 1000 is not in [0, 3]"),
    ("resume-step-negative", lambda r, t: edit_json(r / "checkpoint" / "state.json", step=-3),
     ["train", "--out", "RUN", "--resume", "--steps", "3"], "step = -3 is not in [0, 3]"),
    ("resume-step-string", lambda r, t: edit_json(r / "checkpoint" / "state.json", step="2"),
     ["train", "--out", "RUN", "--resume", "--steps", "3"], "step = '2' is not an integer"),
    ("ceg-binary-metrics", lambda r, t: (shutil.copytree(r, t / "m"), scramble(r / "metrics.jsonl")),
     ["stats", "ceg", "RUN", "TMP/m"], "metrics.jsonl:1: not UTF-8 text"),
    ("mcnemar-binary-samples", lambda r, t: mcnemar_pair(t, scramble),
     ["stats", "mcnemar", "TMP/a", "TMP/b"], f"samples_toy_{DATE}.jsonl:1: not UTF-8 text"),
    ("sweep-dry-run-garbage-manifest", lambda r, t: ((t / "sw").mkdir(), scramble(t / "sw" / "manifest.json")),
     ["sweep", "--out", "TMP/sw", "--methods", "baseline", "--steps", "2", "--dry-run"], "manifest.json:1: not UTF-8"),
    ("ceg-val-loss-1e308", lambda r, t: (shutil.copytree(r, t / "m"), edit_line(r / "metrics.jsonl", -1, val_loss=1e308)),
     ["stats", "ceg", "RUN", "TMP/m"], "'val_loss' = 1e+308 is outside"),
    ("ceg-flops-1e308", lambda r, t: (shutil.copytree(r, t / "m"), edit_line(r / "metrics.jsonl", -1, flops=1e308)),
     ["stats", "ceg", "RUN", "TMP/m"], "'flops' = 1e+308 is outside"),
    ("ceg-val-loss-nan", lambda r, t: (shutil.copytree(r, t / "m"), edit_line(r / "metrics.jsonl", -1, val_loss=float("nan"))),
     ["stats", "ceg", "RUN", "TMP/m"], "'val_loss' = nan is outside"),
    ("mcnemar-no-samples-files", lambda r, t: (samples_dir(t, "a", None), samples_dir(t, "b", None)),
     ["stats", "mcnemar", "TMP/a", "TMP/b"], "no samples_<task>_<date>.jsonl files"),
    ("mcnemar-no-binary-metric", lambda r, t: (samples_dir(t, "a", [{**i, "metrics": ["ppl"], "ppl": 3.0} for i in ITEMS]),
                                               samples_dir(t, "b", [{**i, "metrics": ["ppl"], "ppl": 3.0} for i in ITEMS])),
     ["stats", "mcnemar", "TMP/a", "TMP/b"], "no task with a per-item 0/1 metric to compare"),
    ("figures-garbage-summary", lambda r, t: runs_folder(r, t),
     ["figures", "TMP/runs", "--out", "TMP/figs"], "summary.json:1: not UTF-8 text"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_damaged_file_is_one_line_and_exit_2(case: Case, trained, tmp_path, capsys, monkeypatch):
    name, prepare, argv, needle = case
    monkeypatch.setenv("MHAR_CACHE_DIR", str(trained.parent / "cache"))
    run, tmp = tmp_path / "run", tmp_path / "tmp"
    shutil.copytree(trained, run)
    tmp.mkdir()
    prepare(run, tmp)
    words = [w.replace("RUN", str(run)).replace("TMP", str(tmp)) for w in argv]
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert cli(*words) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not _progress(ln)]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert needle in err[0], err[0]
    after = snapshot(tmp_path)
    assert after == before  # nothing that was there changed, and nothing was written
