"""The 100M study's plans (issue 33): the paper's shape and recipe, >= 250M tokens a run, a tail-mean
window inside the last quarter of every grid, the grids' runs, the middle rung at 20 tokens per
parameter, the 350M pair (the paper's 350M shape and recipe, >= 100M tokens), and the device script's
run selection."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from mhar_probe.demo.plan import MIDDLE, PLANS, STUDY, STUDY350
from mhar_probe.model.config import PRESETS
from mhar_probe.train import TrainConfig, build_model_config

ROOT = Path(__file__).resolve().parents[1]


def _model(plan, method="baseline", kv=4, heads=None):
    from mhar_probe.model import MHARForCausalLM

    cfg = TrainConfig(out="/tmp/unused", preset=plan.preset, method=method, vocab_size=plan.recipe["vocab_size"],
                      kv_heads=kv, heads=heads, extra=dict(plan.model))
    with torch.device("meta"):
        return MHARForCausalLM(build_model_config(cfg, plan.recipe["vocab_size"], 0))


def _params(plan, method="baseline", kv=4, heads=None) -> int:
    return sum(p.numel() for p in _model(plan, method, kv, heads).parameters())


def test_study_is_the_papers_100m_shape_and_recipe():
    assert PRESETS[STUDY.preset] == dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8,
                                         num_key_value_heads=4, intermediate_size=1536, seq_len=2048)
    r = STUDY.recipe
    assert (r["batch_size"], r["seq_len"]) == (32, 2048)
    assert STUDY.steps * 32 * 2048 >= 250_000_000 > (STUDY.steps - 1) * 32 * 2048
    # the CLI's default GPU step: None leaves graphs, fused loss and compiled sublayers on for one CUDA process
    assert r["cuda_graphs"] is None and r["loss_kernel"] is None and r["compile_sublayers"] is None
    assert _params(STUDY) == 41_957_376
    assert PLANS["study100m"] is STUDY and PLANS["middle"] is MIDDLE


def _analytic_params(d: int, layers: int, heads: int, kv: int, ffn: int, vocab: int) -> int:
    """A Qwen3 decoder's weights with tied embeddings, counted by hand: per layer q, k, v, o, the gated
    MLP's three matrices, two RMSNorms and q/k norms of head_dim; the embedding and the final norm."""
    hd = d // heads
    attn = d * heads * hd + 2 * d * kv * hd + heads * hd * d + 2 * hd
    return vocab * d + d + layers * (attn + 3 * d * ffn + 2 * d)


def test_study350_is_the_papers_350m_shape_and_recipe():
    assert PLANS["study350m"] is STUDY350
    assert PRESETS[STUDY350.preset] == dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                            num_key_value_heads=8, intermediate_size=4096, seq_len=1024)
    r = STUDY350.recipe
    # the paper: "350M/1B use sequence length 1024 and global batch 32"; the study's rate and schedule
    assert (r["batch_size"], r["seq_len"], r["lr"], r["vocab_size"], r["corpus"]) == (32, 1024, 5e-4, 8192, "corpus")
    assert r["batch_size"] // r["micro_batch"] == 2 and r["batch_size"] % r["micro_batch"] == 0
    tokens = STUDY350.steps * r["batch_size"] * r["seq_len"]
    assert tokens >= 100_000_000 > (STUDY350.steps - 1) * r["batch_size"] * r["seq_len"]
    evals = list(range(0, STUDY350.steps, r["eval_every"])) + [STUDY350.steps]
    assert len(evals) >= 11 and evals[-11] >= 0.75 * STUDY350.steps and r["eval_batches"] == 2
    model = _model(STUDY350, "mhar", kv=8, heads=8)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size,
            c.routing_heads, c.vocab_size) == (1024, 24, 16, 8, 4096, 8, 8192)
    assert c.hidden_size // c.num_attention_heads == 64 and c.hidden_size // c.routing_heads == 128
    base = _params(STUDY350, kv=8)
    assert base == _analytic_params(1024, 24, 16, 8, 4096, 8192) == 385_929_216
    assert 0 < sum(p.numel() for p in model.parameters()) - base < 0.001 * base  # the routing queries
    assert 0.25 < tokens / base < 0.27  # the paper's 20K steps of 32 x 1024: 655M tokens


def test_study350_trains_one_pair_and_reads_its_paper_delta():
    names = [s.name for s in STUDY350.grid(STUDY350.grids["main"]).expand()]
    assert names == ["350m-baseline-kv8-lr5e-4-s0-n3052", "350m-mhar-h8-kv8-lr5e-4-s0-n3052"]
    assert (STUDY350.main_kv, STUDY350.mhar_heads, STUDY350.main_seed) == (8, 8, 0)
    assert STUDY350.eval_methods == ("baseline", "mhar") and STUDY350.mcnemar_pairs == (("baseline", "mhar"),)
    assert STUDY350.paper_deltas == (("mhar", 8, "mhar"),) and STUDY350.paper_scale == "350m"
    from mhar_probe.demo.claims import _paper_deltas

    assert _paper_deltas("350m")["deltas"]["mhar"] == pytest.approx(-0.149)


@pytest.mark.parametrize("plan", [STUDY, MIDDLE, STUDY350], ids=lambda p: p.name)
def test_last_eleven_evaluations_lie_in_the_last_quarter_of_every_grid(plan):
    for name, axes in plan.grids.items():
        for spec in plan.grid(axes).expand():
            evals = list(range(0, spec.steps, plan.recipe["eval_every"])) + [spec.steps]
            assert len(evals) >= 11 and evals[-11] >= 0.75 * spec.steps, (name, spec.steps)


def test_study_grids():
    names = {g: [s.name for s in STUDY.grid(STUDY.grids[g]).expand()] for g in STUDY.grids}
    assert names["lrsweep"] == [f"100m-baseline-kv4-lr{lr}-s0-n1000" for lr in ("5e-4", "1e-3", "2e-3")]
    assert len(names["main"]) == 9 and "100m-mhar-h8-kv4-lr5e-4-s2-n3815" in names["main"]
    assert names["extra"] == ["100m-hyper-kv4-lr5e-4-s0-n3815", "100m-mhar-h4-kv4-lr5e-4-s0-n3815",
                              "100m-mhar-h16-kv4-lr5e-4-s0-n3815"]
    assert names["hw"] == ["100m-mhar_hw-h4-kv4-lr5e-4-s0-n3815"]
    assert names["bestvsbest"] == ["100m-baseline-kv4-lr1e-3-s0-n3815", "100m-attnres-h1-kv4-lr1e-3-s0-n3815",
                                   "100m-mhar-h8-kv4-lr1e-3-s0-n3815"]
    assert STUDY.grid(STUDY.grids["lrsweep"], steps=7).expand()[0].steps == 7  # --steps still wins


def test_middle_rung_is_32_channel_heads_at_20_tokens_per_parameter():
    assert MIDDLE.model["hidden_size"] // MIDDLE.model["num_attention_heads"] == 32
    tokens = MIDDLE.steps * MIDDLE.recipe["batch_size"] * MIDDLE.recipe["seq_len"]
    assert 19.9 <= tokens / _params(MIDDLE) <= 20.1


def test_device_runs_narrow_a_grid():
    spec = importlib.util.spec_from_file_location("device_runs", ROOT / "results/study100m/device_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plan, name = mod.narrowed("main", "mhar", 2, tiny=False)
    assert [s.name for s in plan.grid(plan.grids[name]).expand()] == ["100m-mhar-h8-kv4-lr5e-4-s2-n3815"]
    plan, name = mod.narrowed("middle", None, None, tiny=False)
    assert plan is not MIDDLE and plan.model == MIDDLE.model and len(plan.grid(plan.grids[name]).expand()) == 9
    with pytest.raises(SystemExit, match="no seed 5"):
        mod.narrowed("main", None, 5, tiny=False)
    with pytest.raises(SystemExit, match="unknown grid"):
        mod.narrowed("wide", None, None, tiny=False)
    plan, name = mod.narrowed("scale350m", "mhar", 0, tiny=False)
    assert plan.name == "study350m" and plan.recipe == STUDY350.recipe
    assert [s.name for s in plan.grid(plan.grids[name]).expand()] == ["350m-mhar-h8-kv8-lr5e-4-s0-n3052"]
    with pytest.raises(SystemExit, match="no method 'attnres'"):
        mod.narrowed("scale350m", "attnres", None, tiny=False)
    # --lr: the sweep's one rate alone (the 2e-3 point), and a rate the grid lacks refused
    plan, name = mod.narrowed("lrsweep", "baseline", 0, tiny=False, lr=2e-3)
    assert [s.name for s in plan.grid(plan.grids[name], steps=3815).expand()] == ["100m-baseline-kv4-lr2e-3-s0-n3815"]
    with pytest.raises(SystemExit, match="no rate 0.003"):
        mod.narrowed("lrsweep", None, None, tiny=False, lr=3e-3)
    # the CPU stand-in keeps the plan's two micro-batches a step
    plan, name = mod.narrowed("scale350m", None, None, tiny=True)
    assert plan.recipe["batch_size"] // plan.recipe["micro_batch"] == 2 and len(plan.grid(plan.grids[name]).expand()) == 2


def test_run_demo_trains_a_grids_own_steps(tmp_path, monkeypatch):
    """The learning-rate sweep's grid names its own 1,000 steps: run_demo must not replace them with the
    plan's 3,815 (it did, and the first sweep call trained full-length runs); --steps still wins."""
    import mhar_probe.sweep as sweep

    from mhar_probe.demo.run import run_demo

    seen: list[set[int]] = []

    class Trained(Exception):
        pass

    def run_sweep(grid, where, overwrite=False, **options):  # deadline, clock: not used here
        seen.append({s.steps for s in grid.expand()})
        raise Trained  # nothing to train here: stop the demo once the grid is known

    monkeypatch.setattr(sweep, "run_sweep", run_sweep)
    for name, (steps, grid) in enumerate([(None, "lrsweep"), (None, "main"), (7, "lrsweep")]):
        with pytest.raises(Trained):
            run_demo(tmp_path / str(name), steps=steps, plan=STUDY, stages=["sweep"], grids=[grid])
    assert seen == [{1000}, {STUDY.steps}, {7}]


def test_the_study_evaluates_every_run_it_trains():
    """A study call keeps no weights, so each run is evaluated in the call that trains it (issue 33:
    "evaluates ... the runs it finishes"); the ladder evaluates only its main-seed comparison."""
    from mhar_probe.demo.plan import LADDER
    from mhar_probe.demo.run import is_eval_run, present_eval_runs
    from mhar_probe.demo.runs import SweptRun

    runs = [SweptRun(Path(f"/r/{m}-{h}-{s}"), m, h, s, "finished", kv=4)
            for m, h, s in [("baseline", None, 0), ("mhar", 8, 1), ("attnres", 1, 2), ("hyper", None, 0),
                            ("mhar", 16, 0), ("mhar_hw", 4, 0)]]
    for plan in (STUDY, MIDDLE):
        assert all(is_eval_run(plan, r) for r in runs), plan.name
    assert [r.name for r in runs if is_eval_run(LADDER, r)] == ["baseline-None-0"]
    # the comparison (McNemar, CEG) still reads the main seed's runs alone
    compared = [r.name for r in present_eval_runs(STUDY, runs)]
    assert compared == ["baseline-None-0"]


def _merge_parts_module():
    spec = importlib.util.spec_from_file_location("merge_parts", ROOT / "results/study100m/merge_parts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _part(tmp_path, name: str, files: dict[str, str]) -> Path:
    import tarfile

    src = tmp_path / f"src_{name}"
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    part = tmp_path / f"{name}.tar.gz"
    with tarfile.open(part, "w:gz") as archive:
        for rel in files:
            archive.add(src / rel, arcname=f"./{rel}")
    return part


def test_merge_parts_keeps_committed_runs_and_takes_the_parts_rows_and_files(tmp_path):
    """A part's manifest knows only its machine's runs: merging must keep the committed rows, replace the
    part's own (an interrupted run that finished), and overwrite the files the part carries."""
    import json

    from mhar_probe.sweep.manifest import read_manifest, write_manifest

    mod = _merge_parts_module()
    study = tmp_path / "study"
    grid = {"name": "scale350m"}
    committed = [dict(name="base", axes={"method": "baseline"}, status="finished", tail_mean_val_loss=2.23),
                 dict(name="mhar", axes={"method": "mhar"}, status="interrupted")]
    (study / "runs" / "base").mkdir(parents=True)
    (study / "runs" / "base" / "summary.json").write_text('{"tail": 2.23}')
    (study / "runs" / "mhar").mkdir()
    (study / "runs" / "mhar" / "metrics.jsonl.gz").write_text("old")
    write_manifest(study / "runs", grid, committed)
    manifest = json.dumps(dict(format=1, grid=grid, updated="x",
                               runs=[dict(name="mhar", axes={"method": "mhar"}, status="finished",
                                          tail_mean_val_loss=2.16)]))
    part = _part(tmp_path, "part_scale350m_mhar_0", {
        "runs/manifest.json": manifest, "runs/mhar/metrics.jsonl.gz": "new",
        "runs/mhar/summary.json": '{"tail": 2.16}', "runs/evals/mhar/results.json": "{}"})
    mod.main([str(study), str(part), "--prompts-root", str(study)])
    rows = {r["name"]: r for r in read_manifest(study / "runs")["runs"]}
    assert rows["base"] == committed[0]
    assert rows["mhar"]["status"] == "finished" and rows["mhar"]["tail_mean_val_loss"] == 2.16
    assert (study / "runs" / "mhar" / "metrics.jsonl.gz").read_text() == "new"
    assert (study / "runs" / "base" / "summary.json").read_text() == '{"tail": 2.23}'
    assert (study / "runs" / "evals" / "mhar" / "results.json").is_file()


def test_merge_parts_refuses_a_part_outside_runs_and_a_missing_part_before_writing(tmp_path):
    mod = _merge_parts_module()
    study = tmp_path / "study"
    (study / "runs").mkdir(parents=True)
    bad = _part(tmp_path, "bad", {"runs/a.json": "{}", "README.md": "x"})
    with pytest.raises(SystemExit, match="outside runs/; nothing merged"):
        mod.main([str(study), str(bad), "--prompts-root", str(study)])
    assert list((study / "runs").iterdir()) == []
    with pytest.raises(SystemExit, match="no part at"):
        mod.main([str(study), str(tmp_path / "gone.tar.gz"), "--prompts-root", str(study)])
    broken = _part(tmp_path, "broken", {"runs/manifest.json": "{\"format\": 1}", "runs/x/summary.json": "{}"})
    with pytest.raises(SystemExit, match="is not a sweep manifest.*nothing merged"):
        mod.main([str(study), str(broken), "--prompts-root", str(study)])
    assert list((study / "runs").iterdir()) == []
    (tmp_path / "junk.tar.gz").write_text("not a tar")
    with pytest.raises(SystemExit, match="not a readable part"):
        mod.main([str(study), str(tmp_path / "junk.tar.gz"), "--prompts-root", str(study)])
    assert list((study / "runs").iterdir()) == []
