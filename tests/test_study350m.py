"""The 350M study (issue 52): the plan is the paper's 350M shape and recipe at 5,000 steps, and its
device call runs end to end in its CPU mode: a stamped copy of the tree, a corpus built from a fake
machine's text and a carried corpus against an empty lock, a tiny run trained, captured, evaluated
and exported, with the stamp's commit in the run's record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from mhar_probe.demo.plan import PAPER350, PAPER350_CARRIED, PAPER350_STEPS, tail_covers_last_quarter
from mhar_probe.model.config import MHARConfig
from mhar_probe.train import lr_at
from mhar_probe.runoptions import TrainConfig
from results_checks import synthetic_loss, synthetic_paper350_study

ROOT = Path(__file__).resolve().parents[1]


def test_the_plan_is_the_papers_350m_shape_and_recipe_at_a_quarter_of_its_steps():
    cfg = MHARConfig.from_preset(PAPER350.preset)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.intermediate_size) == (1024, 24, 16, 8, 4096)
    r = PAPER350.recipe
    assert (r["batch_size"], r["seq_len"], r["lr"]) == (32, 1024, 5e-4) and PAPER350_STEPS == 5_000
    train = TrainConfig(out="x", preset="350m", steps=PAPER350.steps, **{k: v for k, v in r.items() if k != "lr"},
                        lr=r["lr"])
    assert (train.betas, train.weight_decay, train.grad_clip, train.min_lr_ratio) == ((0.9, 0.95), 0.1, 1.0, 0.1)
    assert lr_at(249, train) == pytest.approx(5e-4) and lr_at(248, train) < 5e-4  # 5% warm-up
    assert lr_at(5_000, train) == pytest.approx(5e-5)
    # an evaluation every 125 steps: 41, the tail-mean's 11 at steps 3,750-5,000
    assert PAPER350.paper_steps == 20_000 and r["eval_every"] == 125
    assert tail_covers_last_quarter(PAPER350.steps, r["eval_every"])
    grid = {(s.method, s.H, s.seed) for g in PAPER350.grids for s in PAPER350.grid(PAPER350.grids[g]).expand()}
    assert {("baseline", None, s) for s in range(3)} | {("attnres", None, s) for s in range(3)} \
        | {("mhar", 8, s) for s in range(3)} <= {(m, h if m == "mhar" else None, s) for m, h, s in grid}
    assert {("mhar", 16, 0), ("hyper", None, 0)} <= {(m, h if m == "mhar" else None, s) for m, h, s in grid}


def test_a_committed_lock_trains_at_the_plans_vocabulary():
    """The plan's vocabulary is the committed lock's, the size its first build chose (else a run would
    train a tokenizer of its own)."""
    from mhar_probe.demo.plan import PAPER350_LOCK, PAPER350_VOCAB

    lock = json.loads((ROOT / PAPER350_LOCK / "lock.json").read_text())
    assert lock["vocab_size"] == PAPER350_VOCAB == lock["tokenizer_choice"]["chosen"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def _device_tree(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """What the device gets (the files, no stamp, no git metadata), the call's environment and a fake image."""
    from mhar_probe.data.image import build_image_corpus
    from corpus_checks import fake_image

    tree = tmp_path / "tree"  # what the device gets: the files, a stamp, no (or stale) git metadata
    for part in ("mhar_probe", "results/study100m", "results/study350m"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns(  # the study's lock left out:
            "__pycache__", "runs", "evals", "figures", "probes", "stats", "corpus"))  # this is a first build
    shutil.copy(ROOT / "pyproject.toml", tree)
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "MHAR_CACHE_DIR": str(tmp_path / "cache")}
    img = fake_image(tmp_path / "img", n=60)  # enough held-out text for one row of the tiny model
    prose = tmp_path / "prose" / "usr" / "share" / "doc" / "tales"  # the carried prose stand-in: sentences
    prose.mkdir(parents=True)  # whose last words and next lines (of at most 80 characters) the tasks ask for
    words = "river stone lantern orchard harbour meadow violin compass".split()
    for k in range(500):  # (held-out tales enough: a next-line item's distractor is another one's line)
        prose.joinpath(f"tale{k:03d}.txt").write_text("\n".join(
            f"In the tale number {k} the traveller walked past the {words[(k + j) % 8]}\nand then sat by the "
            f"{words[(k * 3 + j) % 8]} until the evening came to the quiet {words[(k + 2 * j) % 8]}."
            for j in range(6)) + "\n")
    build_image_corpus(tree / PAPER350_CARRIED, tmp_path / "no-lock", roots=[tmp_path / "prose"], vocab_sizes=(300,),
                       workers=1, log=lambda m: None, flops_per_token=lambda v: 1.0)
    return tree, env, img


def _stamp(tree: Path, env: dict[str, str]) -> str:
    """Commit `tree`, stamp it and drop its git metadata, as a device call's tree is; the commit."""
    _git(tree, "init", "-q")
    _git(tree, "add", ".")
    _git(tree, "commit", "-q", "-m", "the tree that runs")
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "mhar_probe.provenance", "stamp", str(tree)], check=True, env=env,
                   capture_output=True)
    shutil.rmtree(tree / ".git")
    return head


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_device_call_in_its_cpu_mode(tmp_path):
    tree, env, img = _device_tree(tmp_path)
    cmd = ["bash", "results/study350m/run_on_device.sh", "--tiny", "--nproc", "1", "--steps", "8",
           "--study", str(tmp_path / "study"), "--roots", str(img / "opt")]
    refused = subprocess.run([*cmd, "prepare"], cwd=tree, env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "no stamp names this tree's code" in refused.stdout + refused.stderr
    head = _stamp(tree, env)
    done = subprocess.run([*cmd, "paper350m", "mhar", "0"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    with tarfile.open(out / "corpus_lock.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"corpus/lock.json", "corpus/image_manifest.tsv.gz", "corpus/tokenizer.json.gz",
            "corpus/composition.md"} <= names
    run = tmp_path / "study" / "runs" / "350m-mhar-h8-kv8-lr5e-4-s0-n8"
    summary = json.loads((run / "summary.json").read_text())
    code = summary["provenance"]["sessions"][0]["code"]
    assert (code["commit"], code["source"], code["dirty"]) == (head, "stamp", False)
    assert (run / "routing.nc").is_file() and any((tmp_path / "study" / "runs" / "evals").iterdir())
    with tarfile.open(out / "part_paper350m_mhar_0_tiny.tar.gz") as tar:
        exported = set(tar.getnames())
    assert f"runs/{run.name}/summary.json" in exported and f"runs/{run.name}/sessions.json" in exported
    assert "| 350m-mhar-h8-kv8-lr5e-4-s0-n8 | finished |" in done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_call_of_several_runs_trains_them_at_once_each_in_its_own_study_folder(tmp_path):
    tree, env, img = _device_tree(tmp_path)
    head = _stamp(tree, env)
    cmd = ["bash", "results/study350m/run_several_on_device.sh", "--tiny", "--gpus-per-run", "1", "--steps", "6",
           "--study-root", str(tmp_path / "studies"), "--roots", str(img / "opt")]
    same = subprocess.run([*cmd, "paper350m mhar 0", "--reserve 30 paper350m mhar 0"], cwd=tree, env=env,
                          capture_output=True, text=True)
    assert same.returncode == 2 and "a run is given twice (paper350m-mhar-0)" in same.stdout
    done = subprocess.run([*cmd, "--reserve 30 paper350m mhar 0", "paper350m attnres 0"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "corpus_lock.tar.gz").is_file()  # prepared once, before the two
    for method, run_name in (("mhar", "350m-mhar-h8-kv8-lr5e-4-s0-n6"), ("attnres", "350m-attnres-h1-kv8-lr5e-4-s0-n6")):
        study = tmp_path / "studies" / f"paper350m-{method}-0"
        manifest = json.loads((study / "runs" / "manifest.json").read_text())
        assert [r["name"] for r in manifest["runs"]] == [run_name]  # its own manifest: no row of the other run
        summary = json.loads((study / "runs" / run_name / "summary.json").read_text())
        assert summary["provenance"]["sessions"][0]["code"]["commit"] == head
        with tarfile.open(out / f"part_paper350m_{method}_0_tiny.tar.gz") as tar:
            assert f"runs/{run_name}/summary.json" in tar.getnames()
        assert f"| {run_name} | finished |" in done.stdout
    assert done.stdout.index("== paper350m-mhar-0") < done.stdout.index("== paper350m-attnres-0")
    assert sorted(p.name for p in out.iterdir()) == ["corpus_lock.tar.gz", "logs_runs.tar.gz",  # (<= 8 come back)
                                                     "part_paper350m_attnres_0_tiny.tar.gz",
                                                     "part_paper350m_mhar_0_tiny.tar.gz"]
    with tarfile.open(out / "logs_runs.tar.gz") as tar:
        assert {"./log_paper350m_mhar_0_tiny.txt", "./runs_paper350m-attnres-0.txt"} <= set(tar.getnames())


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("setsid") is None, reason="needs git and setsid")
def test_a_detached_run_trains_on_across_calls_and_the_call_that_sees_it_end_exports_it(tmp_path):
    """run_detached_on_device.sh: `start` returns at its budget (3) while its trainer, in a session of its
    own, goes on; `watch` exports the run once the trainer has exited (its code); a second start is refused."""
    tree, env, img = _device_tree(tmp_path)
    head = _stamp(tree, env)
    cmd = ["bash", "results/study350m/run_detached_on_device.sh", "--tiny", "--steps", "8", "--every", "1",
           "--study", str(tmp_path / "study"), "--roots", str(img / "opt")]
    started = subprocess.run([*cmd, "--budget", "5", "start", "paper350m", "mhar", "0"], cwd=tree, env=env,
                             capture_output=True, text=True, timeout=600)
    assert started.returncode == 3, started.stdout[-3000:] + started.stderr[-3000:]
    assert "still training at this call's end" in started.stdout and "started the trainer" in started.stdout
    state = tmp_path / "study" / "detached"
    assert not (state / "exit").exists()  # the call returned; the trainer did not
    again = subprocess.run([*cmd, "start", "paper350m", "mhar", "0"], cwd=tree, env=env, capture_output=True,
                           text=True)
    assert again.returncode == 2 and "was started in this hold already (paper350m mhar 0)" in again.stdout
    out = tmp_path / "out"
    for p in out.iterdir():  # the device empties $OUT before each call
        p.unlink()
    watched = subprocess.run([*cmd, "--budget", "900", "watch"], cwd=tree, env=env, capture_output=True,
                             text=True, timeout=900)
    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    assert (state / "exit").read_text().strip() == "0" and "the trainer exited with 0" in watched.stdout
    assert "8/8 [" in watched.stdout  # the bar's last state, from the trainer's log
    run = tmp_path / "study" / "runs" / "350m-mhar-h8-kv8-lr5e-4-s0-n8"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] and summary["provenance"]["sessions"][0]["code"]["commit"] == head
    assert len(summary["provenance"]["sessions"]) == 1  # one process trained it: no resume
    with tarfile.open(out / "part_paper350m_mhar_0.tar.gz") as tar:
        exported = set(tar.getnames())
    assert {f"runs/{run.name}/summary.json", f"runs/{run.name}/corpus.json", f"runs/{run.name}/routing.nc"} \
        <= exported and any(n.startswith(f"runs/evals/{run.name}/") for n in exported)
    assert sorted(p.name for p in out.iterdir()) == ["log_detached.txt.gz", "part_paper350m_mhar_0.tar.gz"]
    assert "| 350m-mhar-h8-kv8-lr5e-4-s0-n8 | finished |" in watched.stdout


def test_the_last_call_of_a_run_exports_all_of_it(tmp_path):
    """A run trained over three calls writes corpus.json in the first: the last call's part must still
    hold it (every file of a run touched since the call began), while an untouched run and an old
    prompt shard stay out."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_call", ROOT / "results" / "study350m" / "device_call.py")
    device_call = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(device_call)
    files = {"runs/a/corpus.json": 100, "runs/a/summary.json": 300, "runs/evals/a/x/results.json": 100,
             "runs/b/summary.json": 100, "runs/evals/b/x/results.json": 100, "runs/evals/prompts/t.jsonl.gz": 100,
             "runs/evals/prompts/u.jsonl.gz": 300, "runs/manifest.json": 100}
    for name, t in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        os.utime(path, (t, t))
    kept = device_call.touched_runs([tmp_path / n for n in files], tmp_path, since=200)
    assert {str(p.relative_to(tmp_path)) for p in kept} == {
        "runs/a/corpus.json", "runs/a/summary.json", "runs/evals/a/x/results.json",
        "runs/evals/prompts/u.jsonl.gz", "runs/manifest.json"}


def test_corpus_md_is_what_the_committed_lock_gives():
    """results/study350m/corpus.md holds no number by hand: it is rendered from the lock's files."""
    done = subprocess.run([sys.executable, str(ROOT / "results" / "study350m" / "corpus_report.py"), "--check"])
    assert done.returncode == 0, "results/study350m/corpus.md is stale: run results/study350m/corpus_report.py"


def test_the_readme_runs_table_is_what_the_committed_runs_give():
    done = subprocess.run([sys.executable, str(ROOT / "results" / "study350m" / "readme_tables.py"), "--check"])
    assert done.returncode == 0, "results/study350m/README.md is stale: run results/study350m/readme_tables.py"


FILE_STAGES = ["probe", "stats", "claims", "figures", "report"]


def test_the_study_regenerates_with_no_run_in(tmp_path):
    """`mhar demo --plan paper350m --stages probe stats claims figures report` before any run: nothing
    raises, every claim row waits for its runs and names them, no figure is attempted."""
    from mhar_probe.demo import run_demo
    from mhar_probe.demo.claims import PENDING_RUNS

    out = tmp_path / "study350m"
    assert run_demo(out, plan=PAPER350, stages=FILE_STAGES) == 0
    claims = {c["key"]: c for c in json.loads((out / "claims.json").read_text())}
    assert {c["verdict"] for c in claims.values()} == {PENDING_RUNS}
    assert {"order", "optimum", "excess", "deviation", "replication", "ceg", "delta_hyper", "delta_attnres",
            "delta_mhar", "delta_mhar_over", "over_split", "gain_path", "mcnemar"} <= set(claims)
    assert "mhar H=16 seed 0" in claims["over_split"]["note"] and "attnres seed 2" in claims["order"]["note"]
    assert "at 350M attnres - baseline -0.121, mhar H=8 - attnres -0.028" in claims["order"]["claim"]
    assert "-0.102 against -0.121" in claims["over_split"]["claim"]
    assert "read at 5,000 of the paper's 20,000 steps" in claims["delta_mhar"]["note"]
    assert "shorter schedule" not in claims["excess"]["note"]  # a probe row reads no tail-mean
    # McNemar: no seed in, every seed pending and named
    assert "no seed in yet (seeds 0, 1, 2 pending)" in claims["mcnemar"]["ours"]
    assert "mhar H=8 seed 2" in claims["mcnemar"]["note"] and (out / "stats" / "mcnemar_seeds.json").is_file()
    report = (out / "report.md").read_text()
    assert "skipped figures: no finished run" in report and "skipped tail-means" in report
    assert not (out / "figures").exists() and not (out / "stats" / "tails.json").exists()


def test_the_claim_rows_read_the_runs_in_and_wait_for_the_others(tmp_path):
    """The main grid and MHAR H=16 in, hyper not: the Table-main deltas and the order are Student t
    intervals over the three seeds (scipy), H=16 is read at seed 0 against the seed margin, the gain's
    path at the quarters; the hyper row waits for its run."""
    from scipy import stats

    from mhar_probe.demo import run_demo
    from mhar_probe.demo.claims import PENDING_RUNS, REPLICATED

    out = tmp_path / "study350m"
    arms = [(m, h, s) for m, h in (("baseline", None), ("attnres", None), ("mhar", 8)) for s in (0, 1, 2)]
    synthetic_paper350_study(out, arms + [("mhar", 16, 0)])
    assert run_demo(out, plan=PAPER350, stages=["stats", "claims"]) == 0
    claims = {c["key"]: c for c in json.loads((out / "claims.json").read_text())}
    summaries = [json.loads(p.read_text()) for p in (out / "runs").glob("*/summary.json")]
    tails = {(r["method"], r["routing_heads"], r["seed"]): r["tail_mean_val_loss"] for r in summaries}
    d = [tails["mhar", 8, s] - tails["baseline", None, s] for s in range(3)]
    low, high = stats.t.interval(0.95, 2, loc=sum(d) / 3, scale=stats.sem(d))
    assert claims["delta_mhar"]["ours"].startswith(f"{sum(d) / 3:+.3f} [{low:+.3f}, {high:+.3f}] over 3 seeds")
    assert claims["delta_mhar"]["verdict"] == REPLICATED and "-0.149 at 350M" in claims["delta_mhar"]["claim"]
    assert claims["order"]["verdict"] == REPLICATED and "(3 seeds, tail-mean loss)" in claims["order"]["ours"]
    assert claims["delta_hyper"]["verdict"] == PENDING_RUNS and "hyper seed 0" in claims["delta_hyper"]["note"]
    # H=16 at seed 0 against attnres: +0.020 here, read against t(0.975, 2) x sd of the H=8 - attnres deltas
    single = [tails["mhar", 8, s] - tails["attnres", None, s] for s in range(3)]
    margin = stats.t.ppf(0.975, 2) * float(np.std(single, ddof=1))
    over = claims["over_split"]
    gap = tails["mhar", 16, 0] - tails["attnres", None, 0]
    assert over["ours"].startswith(f"mhar H=16 - attnres {gap:+.3f} (seed 0 only") and f"margin {margin:.3f}" in over["ours"]
    assert gap > margin and over["verdict"] == REPLICATED
    # the gain's path: at steps 1,250 / 2,500 / 3,750 / 5,000, the last the verdict's
    path = claims["gain_path"]
    at = {t: [synthetic_loss("mhar", 8, s, t) - synthetic_loss("baseline", None, s, t) for s in range(3)] for t in (1250, 5_000)}
    for t, x in at.items():
        lo, hi = stats.t.interval(0.95, 2, loc=np.mean(x), scale=stats.sem(x))
        assert f"{t:,} {np.mean(x):+.3f} [{lo:+.3f}, {hi:+.3f}]" in path["ours"]
    assert "change over the tail window (step 3,750 -> 5,000) +0.000 [" in path["ours"]  # flat after 3,750
    assert path["verdict"] == REPLICATED and "Depends on the shorter schedule" in path["note"]
    table = (out / "stats" / "gain_curves.md").read_text()
    assert "| 5,000 | 163.8 |" in table and "mhar H=16 - baseline (seed 0; one seed, no interval)" in table


def test_the_gain_figure_draws_a_band_over_seeds_and_none_for_one(tmp_path):
    from figures.build import build

    out = tmp_path / "study350m"
    synthetic_paper350_study(out, [(m, h, s) for m, h in (("baseline", None), ("mhar", 8)) for s in (0, 1)]
                     + [("mhar", 16, 0)])
    report = build(out / "runs", out / "figures", only=["gain_curve"], mhar_heads=8)
    (made,) = report.made["gain_curve"]
    assert made.name == "gain_curve_350m" and (out / "figures" / "gain_curve_350m.png").is_file()
    assert {(c.method, c.H, c.n) for c in made.data["curves"]} == {("mhar", 8, 2), ("mhar", 16, 1)}
    assert any(n.startswith("one seed, drawn dashed with no band: mhar H=16 - baseline (seed 0)") for n in made.notes)


def test_the_readmes_schedule_arithmetic_is_the_committed_records():
    """'Where it stands' says why the grid trains 5,000 steps: the one-H200 350M step speeds of
    benchmarks/multi_gpu and the minutes the 10,000 steps first planned would take at them, and on two
    GPUs at the 4-GPU run's per-GPU speed: each from the record or the speed it states, so they cannot
    drift from it."""
    readme = (ROOT / "results" / "study350m" / "README.md").read_text()
    record = json.loads((ROOT / "benchmarks" / "multi_gpu" / "h200x4_ddp_350m_1gpu.json").read_text())
    speed = {r["method"]: r["tokens_per_s_total"] for r in record["rows"] if r["step"] == "graph"}
    step_tokens = PAPER350.recipe["batch_size"] * PAPER350.recipe["seq_len"]
    planned = 10_000 * step_tokens
    said = " ".join(readme.split())
    assert f"measured {speed['baseline']:,.0f} tokens/s for the baseline and {speed['mhar']:,.0f} for MHAR H=8" in said
    assert f"({planned / 1e6:.1f}M tokens) would train for about {planned / speed['baseline'] / 60:.0f} and " \
           f"{planned / speed['mhar'] / 60:.0f} minutes" in said
    four = 470_116  # the first run's median on 4x H200, as the README states it
    assert f"6,234 of 10,000 steps in one call at {four:,}" in said
    two = 2 * four / 4
    assert f"({two:,.0f} tokens/s for the baseline, MHAR at the 100M study's 0.8x) it would train for about " \
           f"{planned / two / 60:.0f} and {planned / (0.8 * two) / 60:.0f} minutes" in said
    now = PAPER350_STEPS * step_tokens
    assert f"trains {PAPER350_STEPS:,} steps on whichever of 2 or 4 GPUs is lent (about {now / two / 60:.0f} and " \
           f"{now / (0.8 * two) / 60:.0f} minutes on two)" in said
    assert f"({now / 1e6:.1f}M against {20_000 * step_tokens / 1e6:.0f}M)" in said
    lock = json.loads((ROOT / "results" / "study350m" / "corpus" / "lock.json").read_text())
    assert f"run reads {now / 1e6:.1f}M of its {lock['train_tokens'] / 1e6:.1f}M training tokens, under one epoch" in said
    # the earlier 350M pair's gain along training, from its committed metrics
    import gzip

    val = {}
    for method in ("baseline", "mhar"):
        (path,) = (ROOT / "results" / "study100m" / "scale350m" / "runs").glob(f"350m-{method}-*/metrics.jsonl.gz")
        with gzip.open(path, "rt") as f:
            val[method] = {r["step"]: r["val_loss"] for r in map(json.loads, f) if r.get("val_loss") is not None}
    gain = {t: val["mhar"][t] - val["baseline"][t] for t in (1000, 3052)}
    assert f"MHAR gain was {gain[1000]:+.3f} at step 1,000 and {gain[3052]:+.3f} at 3,052".replace("-", "\u2212") in said


def test_the_committed_study_regenerates_as_committed(tmp_path):
    """The study's one regeneration command, on a copy holding only the exported runs (and the corpus
    lock), gives the committed claim table, statistics and figure tables byte for byte."""
    from mhar_probe.demo import run_demo

    study = ROOT / "results" / "study350m"
    out = tmp_path / "study350m"
    shutil.copytree(study / "runs", out / "runs")
    shutil.copytree(study / "corpus", out / "corpus")
    run_demo(out, plan=PAPER350, stages=["probe", "stats", "claims", "figures", "report"])
    committed = sorted(p.relative_to(study) for d in ("stats", "figures", "probes") if (study / d).is_dir()
                       for p in (study / d).rglob("*") if p.suffix in (".md", ".csv") and p.name != "index.md")
    assert any(str(rel).startswith("stats/") for rel in committed)
    for rel in [Path("claims.md"), *committed]:
        assert (out / rel).read_text() == (study / rel).read_text(), rel
    new, old = (json.loads((d / "claims.json").read_text()) for d in (out, study))
    assert new == old


def test_the_readmes_one_gpu_arithmetic_is_the_runs_tables():
    """'On one GPU' estimates a 1-GPU run from seed 0's speeds on two GPUs, as the runs table (itself
    checked against the runs) states them, and from the lock's build time: each number from those."""
    readme = (ROOT / "results" / "study350m" / "README.md").read_text()
    said = " ".join(readme.split())
    speed = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[0].endswith("-s0-n5000") and cells[8] == "2 x NVIDIA H200":
            speed[cells[0].split("-")[1]] = float(cells[6].replace(",", ""))
    assert set(speed) == {"baseline", "attnres", "mhar"}
    per_gpu = speed["baseline"] / 2
    tokens = PAPER350_STEPS * PAPER350.recipe["batch_size"] * PAPER350.recipe["seq_len"]
    assert f"2-GPU baseline's {round(per_gpu, -2):,.0f} tokens/s per GPU" in said
    assert f"5,000 steps in about {round(tokens / per_gpu, -1):,.0f} s" in said
    assert f"(about {speed['attnres'] / speed['baseline']:.2f}x and {speed['mhar'] / speed['baseline']:.2f}x as fast)" \
        in said
    lock = json.loads((ROOT / "results" / "study350m" / "corpus" / "lock.json").read_text())
    assert f"the corpus build ({lock['build_seconds']:.0f} s on {lock['workers']} processes" in said
