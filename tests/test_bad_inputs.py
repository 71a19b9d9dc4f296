"""Every expected failure of the command line is one line on stderr and exit status 2, with no
traceback, and the files that were there before are untouched.

Table-driven: each case gets a fresh copy of one trained tiny run (`RUN`), a plain file (`FILE`,
so that `FILE/x` cannot be created) and a scratch directory (`TMP`); `prepare` breaks what the
case needs broken."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Callable

import pytest

from cli_checks import TINY_TRAIN as TINY, cli, train_tiny_run
from mhar_probe.rundir import LOCK_FILE


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return train_tiny_run(tmp_path_factory.mktemp("trained"))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def scramble(path: Path) -> None:
    """4 KB of binary garbage that is never UTF-8. Plain random bytes were not always: when a newline
    came first or after a few ASCII bytes, line 1 decoded and the reader rightly said "not valid JSON"
    instead (about 1 run in 100)."""
    path.write_bytes(b"\xff\xfe" + random.Random(path.name).randbytes(4094))


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def grid(tmp: Path, **values) -> str:
    path = tmp / "grid.json"
    path.write_text(json.dumps({"methods": ["baseline"], "presets": ["tiny"], "steps": [2], **values}))
    return str(path)


def qwen3_base(tmp: Path) -> Path:
    """A tiny random Qwen3 checkpoint in TMP/base, something `mhar convert` accepts."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=8, intermediate_size=64)).save_pretrained(tmp / "base")
    return tmp / "base"


def empty_task(tmp: Path) -> str:
    (tmp / "tasks").mkdir()
    (tmp / "tasks" / "empty.jsonl").write_text("")
    (tmp / "tasks" / "empty.yaml").write_text(
        f"task: toy_empty\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp / 'tasks' / 'empty.jsonl'}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: \"{{context}}\"\ndoc_to_target: label\n"
        "doc_to_choice: \"{{choices}}\"\nmetric_list:\n  - metric: acc\n")
    return str(tmp / "tasks")


Case = tuple[str, Callable[[Path, Path], None] | None, list[str], str]
CASES: list[Case] = [
    # (id, prepare(run, tmp), argv with RUN / FILE / TMP placeholders, a piece of the message)
    ("capture-truncated-weights", lambda r, t: truncate(r / "model.safetensors"),
     ["capture", "RUN", "--out", "TMP/r.nc"], "model.safetensors: header of 1"),
    ("capture-random-weights", lambda r, t: scramble(r / "model.safetensors"),
     ["capture", "RUN", "--out", "TMP/r.nc"], "truncated or not a safetensors file"),
    ("eval-truncated-weights", lambda r, t: truncate(r / "model.safetensors"),
     ["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2", "--out", "TMP/ev"], "model.safetensors: header of"),
    ("probe-truncated-weights", lambda r, t: truncate(r / "model.safetensors"),
     ["probe", "RUN", "--out", "TMP/pr", "--tokens", "64"], "model.safetensors: header of"),
    ("convert-truncated-weights", lambda r, t: truncate(qwen3_base(t) / "model.safetensors"),
     ["convert", "TMP/base", "TMP/conv"], "base/model.safetensors: header of"),
    ("info-config-wrong-type", lambda r, t: edit_json(r / "config.json", hidden_size="wide"),
     ["info", "RUN"], "config.json"),
    ("capture-config-wrong-type", lambda r, t: edit_json(r / "config.json", num_hidden_layers="four"),
     ["capture", "RUN", "--out", "TMP/r.nc"], "config.json: num_hidden_layers='four' must be a positive integer"),
    ("resume-train-config-wrong-type", lambda r, t: edit_json(r / "train_config.json", lr="fast"),
     ["train", "--out", "RUN", "--resume", "--steps", "3"], "lr = 'fast'"),
    ("resume-train-config-not-json", lambda r, t: (r / "train_config.json").write_text("{not json"),
     ["train", "--out", "RUN", "--resume", "--steps", "3"], "unreadable"),
    ("sweep-steps-not-numbers", None, ["sweep", "--out", "TMP/sw", "--grid", "GRID:steps=['many']"],
     "steps"),
    ("sweep-lr-not-numbers", None, ["sweep", "--out", "TMP/sw", "--grid", "GRID:lrs=['fast']"], "lrs"),
    ("sweep-heads-not-numbers", None, ["sweep", "--out", "TMP/sw", "--grid", "GRID:heads=['four']"], "heads"),
    ("sweep-dry-run-bad-common", None,
     ["sweep", "--out", "TMP/sw", "--grid", "GRID:common={'batch_size': 'big'}", "--dry-run"], "batch_size"),
    ("train-cuda-graphs-on-cpu", None, ["train", "--out", "TMP/run", *TINY, "--steps", "2", "--cuda-graphs"],
     "--cuda-graphs needs a CUDA device"),
    ("resume-cuda-graphs-on-cpu", None, ["train", "--out", "RUN", "--resume", "--steps", "3", "--cuda-graphs"],
     "--cuda-graphs needs a CUDA device"),
    ("train-fused-loss-on-cpu", None, ["train", "--out", "TMP/run", *TINY, "--steps", "2", "--loss-kernel", "fused"],
     "--loss-kernel fused needs a CUDA device"),
    ("train-compile-sublayers-on-cpu", None,
     ["train", "--out", "TMP/run", *TINY, "--steps", "2", "--compile-sublayers"],
     "--compile-sublayers needs a CUDA device"),
    ("train-out-under-a-file", None, ["train", "--out", "FILE/run", *TINY, "--steps", "2"], "Not a directory"),
    ("train-triton-heads-not-power-of-two", None,  # refused when the model is set up, not at the first forward
     ["train", "--out", "TMP/run", *TINY, "--steps", "2", "--hidden-size", "48", "--heads", "3",
      "--routing-backend", "triton"], "power-of-two head count, got H=3"),
    ("train-unknown-routing-backend-in-resumed-run", lambda r, t: edit_json(r / "train_config.json",
                                                                            routing_backend="cuda-magic"),
     ["train", "--out", "RUN", "--resume", "--steps", "3"], "unknown routing backend 'cuda-magic'"),
    ("capture-out-under-a-file", None, ["capture", "RUN", "--out", "FILE/r.nc"], "FILE"),
    ("probe-out-under-a-file", None, ["probe", "RUN", "--out", "FILE/pr", "--tokens", "64"], "Not a directory"),
    ("eval-out-under-a-file", None,
     ["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2", "--out", "FILE/ev"], "FILE is a file"),
    ("figures-out-under-a-file", None, ["figures", "RUN", "--out", "FILE/figs"], "FILE is a file, not a directory"),
    ("convert-dst-under-a-file", lambda r, t: qwen3_base(t), ["convert", "TMP/base", "FILE/conv"], "FILE"),
    ("demo-unknown-stage", None, ["demo", "--out", "TMP/d", "--stages", "plot"], "unknown stage plot"),
    ("demo-unknown-grid", None, ["demo", "--out", "TMP/d", "--plan", "ladder", "--grids", "wide"], "no grid wide"),
    ("demo-export-under-a-file", None, ["demo", "--out", "TMP/d", "--stages", "report", "--export", "FILE/x"],
     "cannot create it"),
    ("demo-report-before-sweep", None, ["demo", "--out", "TMP/d", "--stages", "report"], "run the sweep stage first"),
    ("train-unknown-corpus", None, ["train", "--out", "TMP/run", *TINY, "--corpus", "TMP/none.jsonl"],
     "does not exist (or name one of: embedded, installed)"),
    ("eval-task-without-items", None,
     ["eval", "RUN", "--tasks", "toy_empty", "--tasks-dir", "TASKS", "--out", "TMP/ev"], "has no items"),
]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != LOCK_FILE}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case: Case, trained, tmp_path, capsys, monkeypatch):
    name, prepare, argv, needle = case
    monkeypatch.setenv("MHAR_CACHE_DIR", str(trained.parent / "cache"))
    run, tmp = tmp_path / "run", tmp_path / "tmp"
    shutil.copytree(trained, run)
    tmp.mkdir()
    (tmp_path / "file").write_text("a plain file")
    if prepare is not None:
        prepare(run, tmp)
    words = []
    for word in argv:
        if word.startswith("GRID:"):
            key, value = word[5:].split("=", 1)
            word = grid(tmp, **{key: eval(value)})  # noqa: S307  (literals written above)
        elif word == "TASKS":
            word = empty_task(tmp)
        words.append(word.replace("RUN", str(run)).replace("FILE", str(tmp_path / "file")).replace("TMP", str(tmp)))
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert cli(*words) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not _progress(ln)]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert needle.replace("FILE", str(tmp_path / "file")) in err[0], err[0]
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing that was there changed


def _progress(line: str) -> bool:
    """tqdm / Hugging Face progress bars and logging lines that are not the error."""
    return "it/s]" in line or "%|" in line or line.startswith(("INFO", "WARNING"))
