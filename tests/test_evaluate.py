"""`mhar eval`: a real round trip through the LM Evaluation Harness and `mhar stats mcnemar`.

Two tiny runs (baseline and MHAR, same seed and data) are evaluated offline on the shipped
held-out tasks and on a user task given with --tasks-dir; McNemar's counts are then checked
against a recount done here straight from the samples files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path

import pytest
import torch

from mhar_probe.cli.stats import add_stats_subparser
from mhar_probe.data import load_corpus
from mhar_probe.errors import UserError
from mhar_probe.evaluate import EvalError, heldout_tasks
from mhar_probe.cli.evaluate import add_eval_subparser
from mhar_probe.data import load_tokenizer
from mhar_probe.evaluate import heldout
from mhar_probe.evaluate.nextline_task import write_nextline_task
from mhar_probe.evaluate.heldout import (NEXTLINE_GEN_TASK, PPL_CHUNK_CHARS, SHIPPED_TASKS, lastword_candidates,
                                        sha256_file)
from mhar_probe.train import TrainConfig, train

from generation_checks import greedy_without_cache

SMALL = dict(preset="tiny", seq_len=32, batch_size=4, eval_every=10, eval_batches=1, vocab_size=512,
             corpus_max_bytes=150_000, progress=False, lr=3e-3, steps=200,
             extra=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128))
SHIPPED = "mhar_heldout_ppl,mhar_lastword"
LIMIT = 30


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="mhar")
    sub = parser.add_subparsers(dest="command", required=True)
    add_eval_subparser(sub)
    add_stats_subparser(sub)
    args = parser.parse_args([str(a) for a in argv])
    return args.func(args)


def write_user_task(root: Path) -> Path:
    """A two-way multiple-choice task from held-out lines: the real next line vs. another line."""
    return write_nextline_task(root, corpus_max_bytes=SMALL["corpus_max_bytes"])


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    """Two trained runs, each evaluated on the shipped tasks and the user task."""
    root = tmp_path_factory.mktemp("eval")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        torch.set_num_threads(1)
        tasks_dir = write_user_task(root / "user_tasks")
        out = {}
        for method in ("baseline", "mhar"):
            run = root / method
            train(TrainConfig(out=str(run), method=method, **SMALL))
            assert cli("eval", run, "--tasks", f"{SHIPPED},toy_nextline", "--tasks-dir", tasks_dir,
                       "--limit", LIMIT, "--batch-size", 8, "--out", root / f"eval_{method}") == 0
            out[method] = (run, root / f"eval_{method}")
        yield root, out, tasks_dir


def read_samples(eval_dir: Path, task: str) -> dict[int, dict]:
    (path,) = eval_dir.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_id = {r["doc_id"]: r for r in rows}
    assert len(by_id) == len(rows)
    return by_id


def recount(dir_a: Path, dir_b: Path, task: str, metric: str) -> dict:
    a, b = read_samples(dir_a, task), read_samples(dir_b, task)
    assert a.keys() == b.keys()
    ids = sorted(a)
    for i in ids:  # same document, prompt and target in both arms
        assert all(a[i][h] == b[i][h] for h in ("doc_hash", "prompt_hash", "target_hash"))
    xa = [bool(a[i][metric]) for i in ids]
    xb = [bool(b[i][metric]) for i in ids]
    return dict(n=len(ids), b=sum(p and not q for p, q in zip(xa, xb)), c=sum(q and not p for p, q in zip(xa, xb)),
                acc_a=sum(xa) / len(ids), acc_b=sum(xb) / len(ids))


def test_round_trip_mcnemar_matches_recount(arms, capsys):
    root, out, _ = arms
    (_, dir_a), (_, dir_b) = out["baseline"], out["mhar"]
    capsys.readouterr()
    assert cli("stats", "mcnemar", dir_a, dir_b, "--task", "mhar_lastword", "toy_nextline",
               "--out", root / "mcnemar", "--n-boot", 200) == 0
    printed = capsys.readouterr().out
    report = json.loads((root / "mcnemar" / "mcnemar.json").read_text())
    rows = {r["task"]: r for r in report["rows"]}
    assert set(rows) == {"mhar_lastword", "toy_nextline"}
    for task, row in rows.items():
        want = recount(dir_a, dir_b, task, row["metric"])
        assert {k: row[k] for k in want} == pytest.approx(want), task
        assert row["only_a"] == row["only_b"] == row["hash_mismatch"] == 0
        assert task in printed
    n_items = len(read_samples(dir_a, "mhar_lastword"))
    assert rows["mhar_lastword"]["metric"] == "acc" and rows["mhar_lastword"]["n"] == n_items <= LIMIT
    # the user task is two-way multiple choice: the arms disagree on some items
    assert rows["toy_nextline"]["metric"] == "acc_norm"
    assert rows["toy_nextline"]["b"] + rows["toy_nextline"]["c"] > 0


def test_outputs_metrics_and_provenance(arms):
    _, out, tasks_dir = arms
    for run, eval_dir in out.values():
        (results_path,) = eval_dir.rglob("results_*.json")
        res = json.loads(results_path.read_text())
        ppl = res["results"]["mhar_heldout_ppl"]
        assert 1.0 < ppl["byte_perplexity,none"] < 512 and math.isfinite(ppl["word_perplexity,none"])
        assert ppl["bits_per_byte,none"] == pytest.approx(math.log2(ppl["byte_perplexity,none"]))
        lw = res["results"]["mhar_lastword"]
        assert 0.0 <= lw["acc,none"] <= 1.0 and lw["perplexity,none"] > 1.0
        assert res["configs"]["mhar_lastword"]["output_type"] == "loglikelihood"
        assert res["configs"]["mhar_heldout_ppl"]["output_type"] == "loglikelihood_rolling"
        prov = res["mhar_provenance"]
        assert prov == json.loads((eval_dir / "provenance.json").read_text())
        assert prov["run"] == str(run.resolve())
        assert prov["checkpoint_sha256"] == hashlib.sha256((run / "model.safetensors").read_bytes()).hexdigest()
        assert prov["max_length"] == SMALL["seq_len"] and prov["limit"] == LIMIT
        assert prov["tasks_dirs"] == [str(tasks_dir.resolve())]
        assert not [p for p in eval_dir.parent.iterdir() if ".tmp-" in p.name]  # staging cleaned up


def test_heldout_tasks_are_deterministic_and_held_out(arms):
    root, _, _ = arms
    corpus = load_corpus(None, max_bytes=SMALL["corpus_max_bytes"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache-2"))
        again = heldout_tasks(corpus.val, corpus.fingerprint)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        first = heldout_tasks(corpus.val, corpus.fingerprint)
    assert first.root != again.root
    data = {k: v for k, v in first.sha256.items() if k.endswith(".jsonl")}
    assert data == {k: v for k, v in again.sha256.items() if k.endswith(".jsonl")}
    val_text = [d.text for d in corpus.val]
    items = [json.loads(x) for x in (first.root / "mhar_lastword.jsonl").read_text().splitlines()]
    assert len(items) == first.counts["mhar_lastword"] > 0
    for it in items:
        word = it["target"][1:]
        assert it["target"] == " " + word and word in it["context"]
        assert any(it["context"] + it["target"] in t for t in val_text)
    ppl = [json.loads(x) for x in (first.root / "mhar_heldout_ppl.jsonl").read_text().splitlines()]
    for doc in corpus.val:  # the pieces of a document put back together give the document
        pieces = [p["text"] for p in ppl if p["id"].rsplit("#", 1)[0] == doc.id]
        assert "".join(pieces).strip() == doc.text.strip()
        assert all(len(p) <= PPL_CHUNK_CHARS for p in pieces)


def test_generation_task_equals_greedy_decoding_without_cache(arms, tmp_path):
    """`mhar eval` on the shipped generation task: the harness calls generate() on left-padded
    batches with a KV cache; every row's tokens equal greedy decoding of its prompt alone without
    a cache, and the samples file holds those continuations cut at the first newline."""
    from transformers import GenerationMixin

    root, out, _ = arms
    run, _ = out["mhar"]
    calls = []
    real_generate = GenerationMixin.generate

    def spy(self, *args, **kwargs):
        result = real_generate(self, *args, **kwargs)
        calls.append((self, kwargs["input_ids"], kwargs["attention_mask"], result))
        return result

    with pytest.MonkeyPatch.context() as mp:
        # a 32-token model: generating 8 tokens at most leaves room for prompts of several lengths
        # (with the shipped 24, every prompt is cut to the same 8 tokens and no batch is padded)
        mp.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
        mp.setattr(heldout, "NLG_MAX_TOKENS", 8)
        mp.setattr(GenerationMixin, "generate", spy)
        assert cli("eval", run, "--tasks", NEXTLINE_GEN_TASK, "--limit", 12, "--batch-size", 4,
                   "--out", tmp_path / "gen") == 0
    assert len(calls) == 3 and any(bool((mask == 0).any()) for _, _, mask, _ in calls)  # padded batches
    model = calls[0][0]
    eos = model.generation_config.eos_token_id
    tok = load_tokenizer(run)
    decoded = []
    for _, ids, mask, result in calls:
        width = ids.shape[1]
        for row in range(ids.shape[0]):
            prompt = ids[row][mask[row].bool()]
            cont = result[row, width:]
            want = greedy_without_cache(model, prompt, cont.numel(), eos=eos)
            assert torch.equal(cont[:want.numel()], want), row
            decoded.append(tok.decode(want, skip_special_tokens=True).split("\n")[0])
    samples = read_samples(tmp_path / "gen", NEXTLINE_GEN_TASK)
    assert sorted(r["resps"][0][0] for r in samples.values()) == sorted(decoded)
    assert all(r["exact_match"] == float(r["resps"][0][0] == r["target"]) for r in samples.values())


def test_lastword_candidates_rules():
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa\nlambda mu nu xi omicron pi rho " \
           "sigma tau upsilon phi chi psi omega and gamma"
    (ctx, tgt), = lastword_candidates(text, min_words=5)
    assert tgt == " gamma" and ctx.endswith("omega and") and ctx + tgt in text
    assert lastword_candidates(text, min_words=50) == []
    assert lastword_candidates("x " * 30 + "the the", min_words=5) == []  # stop words are never targets


def test_errors(arms, tmp_path):
    _, out, tasks_dir = arms
    run, eval_dir = out["mhar"]
    with pytest.raises(UserError, match="does not exist"):  # refused by the CLI's path check, before torch
        cli("eval", tmp_path / "nope", "--tasks", SHIPPED)
    with pytest.raises(EvalError, match=r"model\.safetensors missing"):
        cli("eval", tmp_path, "--tasks", SHIPPED)
    with pytest.raises(EvalError, match="--tasks-dir .* does not exist"):
        cli("eval", run, "--tasks", "toy_nextline", "--tasks-dir", tmp_path / "missing")
    with pytest.raises(EvalError, match="already exists"):
        cli("eval", run, "--tasks", "toy_nextline", "--tasks-dir", tasks_dir, "--out", eval_dir)
    bad = tmp_path / "bad_tasks"
    bad.mkdir()
    (bad / "t.yaml").write_text((tasks_dir / "nextline.yaml").read_text()
                                .replace("toy_nextline", "toy_missing").replace("nextline.jsonl", "gone.jsonl"))
    with pytest.raises(EvalError, match="gone.jsonl does not exist"):
        cli("eval", run, "--tasks", "toy_missing", "--tasks-dir", bad, "--out", tmp_path / "o")
    with pytest.raises(EvalError, match=r"unknown task.*mhar_lastwrd.*did you mean mhar_lastword.*local tasks"):
        cli("eval", run, "--tasks", "mhar_lastwrd", "--out", tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_overwrite_replaces_output(arms, tmp_path):
    root, out, tasks_dir = arms
    run, _ = out["baseline"]
    target = tmp_path / "ev"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        # --overwrite replaces only an evaluation: a folder of other files is refused and kept
        with pytest.raises(EvalError, match="not an evaluation directory"):
            cli("eval", run, "--tasks", "toy_nextline", "--tasks-dir", tasks_dir, "--limit", 4,
                "--out", target, "--overwrite")
        assert [p.name for p in target.iterdir()] == ["old.txt"]
        target = tmp_path / "ev2"
        assert cli("eval", run, "--tasks", "toy_nextline", "--tasks-dir", tasks_dir, "--limit", 2,
                   "--out", target) == 0
        assert cli("eval", run, "--tasks", "toy_nextline", "--tasks-dir", tasks_dir, "--limit", 4,
                   "--out", target, "--overwrite") == 0
    assert len(read_samples(target, "toy_nextline")) == 4


def test_mcnemar_without_task_skips_perplexity_task_with_a_note(arms):
    from analysis.stats.compare import compare_eval_dirs

    _, out, _ = arms
    (_, dir_a), (_, dir_b) = out["baseline"], out["mhar"]
    cmp = compare_eval_dirs(dir_a, dir_b, n_boot=50)
    tasks = {r.task for r in cmp.rows}
    assert "mhar_lastword" in tasks and "mhar_heldout_ppl" not in tasks
    assert any("mhar_heldout_ppl" in n and "skipped" in n for n in cmp.notes)


def test_nextline_items_are_deterministic_and_answerable_only_by_content():
    from mhar_probe.data.document import Document
    from mhar_probe.evaluate.heldout import nextline_items

    docs = [Document(f"d{k}", "code", "\n".join(f"line {k}-{i} " + "x" * (10 + i % 5) for i in range(12)))
            for k in range(3)]
    a, b = nextline_items(docs), nextline_items(list(reversed(docs)))
    assert a == b and len(a) == 3 * 11
    for item in a:
        doc, i = item["id"].split("^")
        lines = next(d for d in docs if d.id == doc).text.splitlines()
        real = item["choices"][item["label"]]
        wrong = item["choices"][1 - item["label"]]
        assert real == lines[int(i)] and item["context"].splitlines()[-1] == lines[int(i) - 1]
        assert wrong not in lines and abs(len(wrong) - len(real)) <= 2  # another document, similar length
    assert {it["label"] for it in a} == {0, 1}


def test_export_tasks_gives_stock_lm_eval_the_shipped_tasks(arms, tmp_path, capsys):
    """`mhar eval RUN --export-tasks DIR`: the run's shipped tasks in a folder the user names, with
    the same data as the ones `mhar eval` used, found by the stock harness's TaskManager through
    --include_path; a non-empty folder is refused unless it is an earlier export and --overwrite."""
    from lm_eval.tasks import TaskManager

    root, out, _ = arms
    run = out["baseline"][0]
    dest = tmp_path / "tasks"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        assert cli("eval", run, "--export-tasks", dest) == 0
        printed = capsys.readouterr().out
        cached = heldout_tasks(load_corpus(None, max_bytes=SMALL["corpus_max_bytes"]).val,
                               json.loads((run / "corpus.json").read_text())["fingerprint"])
    assert f"--include_path {dest}" in printed and "trust_remote_code=True" in printed
    # sized for this machine (issue 54: the bare command took 555 s on a CPU), with its time said to be an estimate
    assert "--device cpu --batch_size 8" in printed and f"max_length={SMALL['seq_len']}" in printed
    assert "# estimate: about " in printed and "(an estimate: " in printed
    for name, sha in cached.sha256.items():
        if name.endswith(".jsonl"):
            assert sha256_file(dest / name) == sha, name
    for task in SHIPPED_TASKS:
        assert str(dest / f"{task}.jsonl") in (dest / f"{task}.yaml").read_text()
    assert set(SHIPPED_TASKS) <= set(TaskManager(include_path=[str(dest)], include_defaults=False).all_tasks)
    before = sha256_file(dest / "mhar_lastword.yaml")
    with pytest.raises(EvalError, match="exists and is not empty"):
        cli("eval", run, "--export-tasks", dest)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(EvalError, match="exists and is not empty"):
        cli("eval", run, "--export-tasks", tmp_path / "other", "--overwrite")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        assert cli("eval", run, "--export-tasks", dest, "--overwrite") == 0
    assert sha256_file(dest / "mhar_lastword.yaml") == before


def test_a_malformed_task_yaml_is_named_not_skipped(tmp_path):
    """The harness's task index skips a YAML it cannot read in silence; --tasks-dir refuses it by name."""
    from mhar_probe.evaluate.harness import check_tasks_dirs

    tasks = write_user_task(tmp_path / "tasks")
    (tasks / "helper.yaml").write_text("task: toy_fn\nprocess_docs: !function utils.process\n")  # harness tag: fine
    assert check_tasks_dirs([str(tasks)]) == [tasks.resolve()]
    (tasks / "broken.yaml").write_text("task: toy_broken\ndoc_to_text: [unclosed\n")
    with pytest.raises(EvalError, match=r"broken\.yaml is not a readable task YAML"):
        check_tasks_dirs([str(tasks)])
    (tasks / "broken.yaml").write_text("- just\n- a list\n")
    with pytest.raises(EvalError, match=r"broken\.yaml .*not a mapping"):
        check_tasks_dirs([str(tasks)])


def test_the_harness_git_lookup_is_quiet_outside_a_checkout(tmp_path, monkeypatch, capfd):
    """lm_eval records `git describe` of the working directory with git's stderr left on the terminal:
    outside a checkout that printed "fatal: not a git repository". `mhar eval` runs it quietly."""
    import shutil

    from lm_eval import evaluator

    from mhar_probe.evaluate.harness import _quiet_git, quiet_git_hash

    if shutil.which("git") is None:
        pytest.skip("git is not installed: nothing prints")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    evaluator.get_git_commit_hash()
    assert "fatal:" in capfd.readouterr().err  # the harness's own lookup, unpatched
    with _quiet_git(evaluator):
        assert evaluator.get_git_commit_hash() is None
    assert quiet_git_hash() is None and "fatal:" not in capfd.readouterr().err
    monkeypatch.chdir(Path(__file__).parent)
    monkeypatch.delenv("GIT_CEILING_DIRECTORIES")
    if (Path(__file__).parents[1] / ".git").exists():
        assert quiet_git_hash()  # inside the checkout: its commit, as the harness records it


def test_an_evaluation_outside_a_checkout_prints_no_git_error_nor_harness_warning(arms, tmp_path):
    import os
    import subprocess
    import sys

    from mhar_probe.evaluate.harness import PRETRAINED_OBJECT_WARNINGS

    root, out, tasks_dir = arms
    run, _ = out["baseline"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "MHAR_CACHE_DIR": str(root / "cache"), "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    proc = subprocess.run([sys.executable, "-m", "mhar_probe.cli", "eval", str(run), "--tasks", "toy_nextline",
                           "--tasks-dir", str(tasks_dir), "--limit", "2", "--out", str(tmp_path / "o")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "fatal:" not in proc.stderr, proc.stderr[-2000:]
    assert not [w for w in PRETRAINED_OBJECT_WARNINGS if w in proc.stderr], proc.stderr[-2000:]
