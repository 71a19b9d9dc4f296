"""Trainer behaviour: resume is exact, DDP equals one process, pairing, schedule, CLI errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mhar_probe.cli import main
from mhar_probe.runfiles import read_metrics
from mhar_probe.train import TrainConfig, Trainer, batch_indices, lr_at, train

# A very small model and corpus so each run takes a few seconds on two cores.
SMALL = dict(preset="tiny", seq_len=32, batch_size=4, eval_every=2, eval_batches=1, vocab_size=512,
             corpus_max_bytes=150_000, progress=False, lr=3e-3,
             extra=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


def small(out: Path, **kw) -> TrainConfig:
    return TrainConfig(out=str(out), **{**SMALL, **kw})


def losses(run: Path) -> list[tuple[int, float | None, float | None]]:
    return [(m["step"], m.get("loss"), m.get("val_loss")) for m in read_metrics(run / "metrics.jsonl")]


def test_lr_schedule_warmup_then_cosine_to_floor():
    cfg = TrainConfig(steps=100, lr=1e-3, warmup=10)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(55, cfg) == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(100, cfg) == pytest.approx(1e-4)


def test_data_order_depends_on_seed_only_and_covers_epoch():
    a = [batch_indices(s, 4, 20, seed=7) for s in range(5)]
    assert torch.equal(torch.cat(a).sort().values, torch.arange(20))  # one epoch = every row once
    assert all(torch.equal(x, y) for x, y in zip(a, [batch_indices(s, 4, 20, seed=7) for s in range(5)]))
    assert not torch.equal(batch_indices(0, 4, 20, seed=8), a[0])


def test_run_directory_contents_and_learning(tmp_path):
    summary = train(small(tmp_path / "run", steps=12, method="mhar", eval_every=1))
    run = tmp_path / "run"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "train_config.json",
                 "metrics.jsonl", "summary.json", "corpus.json", "checkpoint/state.json"):
        assert (run / name).exists(), name
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(13))
    assert {"tokens", "flops", "lr", "loss", "grad_norm", "tokens_per_s"} <= set(rows[-1])
    assert rows[-1]["tokens"] == 12 * 4 * 32 and rows[-1]["flops"] > 0
    evals = [r["val_loss"] for r in rows if "val_loss" in r]
    assert len(evals) == 13 and summary["tail_mean_val_loss"] == pytest.approx(sum(evals[-11:]) / 11)  # not step 0's
    assert summary["final_val_loss"] < summary["initial_val_loss"]
    assert "routing_kernels" not in summary  # eager routing (the CPU default)


def _stack_configs(monkeypatch) -> list:
    """Every KernelConfig a triton source stack is built with from now on (a spy on its state's
    constructor), in order."""
    import mhar_probe.kernels.route.autograd as kad
    from mhar_probe.kernels import KernelConfig

    built = []
    real = kad._StackState.__init__

    def spy(self, capacity, params=None, config=KernelConfig()):
        built.append(config)
        real(self, capacity, params, config)

    monkeypatch.setattr(kad._StackState, "__init__", spy)
    return built


def test_summary_records_the_triton_kernels(tmp_path, monkeypatch):
    """A triton run records the KernelConfig its kernels ran with (the opt-in douts move the
    gradients): the one its --routing-douts makes, which the run passes to its model (built with
    it) and sets nowhere else; the record reads back as that configuration."""
    pytest.importorskip("triton")
    from mhar_probe.kernels import KernelConfig, kernel_config_from_dict

    built = _stack_configs(monkeypatch)
    summary = train(small(tmp_path / "run", steps=1, method="mhar", routing_backend="triton", seq_len=8,
                          batch_size=1, eval_every=100, routing_douts="storage"))
    kernels = summary["routing_kernels"]
    assert {k: kernels[k] for k in ("routing_douts", "poison", "launch_table")} == \
        dict(routing_douts="storage", poison=False, launch_table=None)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["routing_kernels"] == kernels
    assert built and set(built) == {KernelConfig(routing_douts="storage")}  # every stack of the run
    assert kernel_config_from_dict(kernels) == KernelConfig(routing_douts="storage")


def test_the_kernel_flags_reach_every_stack_and_the_record(tmp_path, monkeypatch):
    """--routing-forward and --routing-backward choose the stack's forward and backward: every
    stack of the run is built with them and summary.json records them (the defaults are the
    measured ones, lookahead and fold)."""
    pytest.importorskip("triton")
    from mhar_probe.kernels import KernelConfig

    assert (TrainConfig(out="x").routing_forward, TrainConfig(out="x").routing_backward) == \
        (KernelConfig().forward, KernelConfig().stack_backward)
    built = _stack_configs(monkeypatch)
    summary = train(small(tmp_path / "run", steps=1, method="mhar", routing_backend="triton", seq_len=8,
                          batch_size=1, eval_every=100, routing_forward="plain", routing_backward="gather"))
    want = KernelConfig(forward="plain", stack_backward="gather")
    assert built and set(built) == {want}
    assert (summary["routing_kernels"]["forward"], summary["routing_kernels"]["stack_backward"]) == ("plain", "gather")


def test_resume_reproduces_uninterrupted_curve(tmp_path):
    train(small(tmp_path / "full", steps=8, checkpoint_every=3))
    train(small(tmp_path / "cut", steps=8, checkpoint_every=3, stop_after=5))
    assert not (tmp_path / "cut" / "summary.json").exists()
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 5
    train(small(tmp_path / "cut", steps=8, checkpoint_every=3, resume=True))
    assert losses(tmp_path / "cut") == losses(tmp_path / "full")


def stepped_clock(seconds_per_step: float, past_at: int | None = None):
    """A fake clock read off the trainer's step: `seconds_per_step` per step taken, or (with
    `past_at`) 0 before step `past_at` and far past any limit from it on. Returns (box, clock):
    put the trainer in box[0]."""
    box: list = []

    def clock() -> float:
        step = box[0].step if box else 0
        if past_at is not None:
            return 1e9 if step >= past_at else 0.0
        return seconds_per_step * step
    return box, clock


def run_with_clock(cfg: TrainConfig, box: list, clock) -> dict:
    trainer = Trainer(cfg, clock=clock)
    box.append(trainer)
    return trainer.run()


def test_time_limit_stops_at_a_step_boundary_with_a_checkpoint_and_resume_is_exact(tmp_path):
    """A clock past the limit after step 5 (not a checkpoint step: every 3): the run stops there,
    checkpointed at 5, no summary; --resume gives the metrics of the uninterrupted run exactly."""
    train(small(tmp_path / "full", steps=8, checkpoint_every=3))
    box, clock = stepped_clock(0, past_at=5)
    assert run_with_clock(small(tmp_path / "cut", steps=8, checkpoint_every=3, time_limit=60), box, clock) == \
        {"stopped_at": 5, "reason": "time_limit"}
    assert not (tmp_path / "cut" / "summary.json").exists()
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 5
    assert [m["step"] for m in read_metrics(tmp_path / "cut" / "metrics.jsonl")] == list(range(6))
    train(small(tmp_path / "cut", steps=8, checkpoint_every=3, resume=True))
    assert losses(tmp_path / "cut") == losses(tmp_path / "full")


def test_time_limit_leaves_room_for_one_more_step_before_the_deadline(tmp_path):
    """Each step takes 10 s of a fake clock (evaluations and checkpoint writes none): with a limit
    of 45 s the run stops after step 4 (40 s + one more step's 10 s > 45 s), not after 5 (50 s)."""
    box, clock = stepped_clock(10)
    cfg = small(tmp_path / "r", steps=8, checkpoint_every=100, time_limit=45)
    assert run_with_clock(cfg, box, clock) == {"stopped_at": 4, "reason": "time_limit"}
    assert json.loads((tmp_path / "r" / "checkpoint" / "state.json").read_text())["step"] == 4


def test_time_limit_never_cuts_the_last_step(tmp_path):
    """A clock past the limit at the last step (and one past it from the start, at a one-step run):
    the run finishes with its summary and weights."""
    box, clock = stepped_clock(0, past_at=3)
    summary = run_with_clock(small(tmp_path / "late", steps=3, time_limit=1), box, clock)
    assert summary["finished"] and summary["steps"] == 3
    assert json.loads((tmp_path / "late" / "summary.json").read_text())["finished"]
    assert (tmp_path / "late" / "model.safetensors").exists()
    box, clock = stepped_clock(0, past_at=0)
    assert run_with_clock(small(tmp_path / "one", steps=1, time_limit=1), box, clock)["finished"]


def test_time_limit_is_not_a_setting_of_the_run(tmp_path):
    """A run stopped by its --time-limit resumes with another limit or none: the limit belongs to
    the call, not to the run (it is not compared on --resume)."""
    box, clock = stepped_clock(0, past_at=2)
    run_with_clock(small(tmp_path / "r", steps=4, time_limit=5), box, clock)
    box, clock = stepped_clock(0, past_at=3)
    assert run_with_clock(small(tmp_path / "r", steps=4, time_limit=7, resume=True), box, clock) == \
        {"stopped_at": 3, "reason": "time_limit"}
    assert train(small(tmp_path / "r", steps=4, resume=True))["finished"]


def test_train_cli_time_limit_past_stops_after_one_step_and_says_so(tmp_path, capsys):
    """`mhar train --time-limit` counts from the start of the command: a limit already past stops
    the run after its first step (a checkpoint there, exit 0) and one line says how to continue."""
    out = tmp_path / "r"
    rc = cli("train", "--out", str(out), "--steps", "3", "--no-progress", "--corpus-max-bytes", "150000",
             "--seq-len", "32", "--batch-size", "4", "--layers", "2", "--hidden-size", "64", "--ffn", "128",
             "--vocab-size", "512", "--time-limit", "1e-9")
    assert rc == 0
    assert capsys.readouterr().out.strip() == (f"{out}: stopped at the time limit after step 1, with a "
                                               f"checkpoint there; rerun with --resume to continue")
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 1
    assert not (out / "summary.json").exists()


def test_same_seed_same_data_for_every_method(tmp_path, monkeypatch):
    """Pairing: the batches a run sees depend on the seed, not on the method. The spy records
    the input ids the model receives in each training forward (not what the trainer should have
    fed), and they must be the rows `batch_indices` picks for that step."""
    import mhar_probe.train as tr

    build_model = tr.Trainer.build_model
    fed: dict[str, list[torch.Tensor]] = {}
    trainers: dict[str, tr.Trainer] = {}

    def spying_build_model(self):
        model = build_model(self)
        batches = fed.setdefault(self.cfg.method, [])
        trainers[self.cfg.method] = self

        def record(module, args, kwargs):
            if module.training:  # evaluation forwards run in eval mode
                batches.append((args[0] if args else kwargs["input_ids"]).detach().clone())

        model.register_forward_pre_hook(record, with_kwargs=True)
        return model

    monkeypatch.setattr(tr.Trainer, "build_model", spying_build_model)
    for method in ("baseline", "mhar"):
        train(small(tmp_path / method, steps=3, method=method))
    for method, trainer in trainers.items():
        rows, cfg = trainer.train_rows, trainer.cfg
        expected = [rows[batch_indices(step, cfg.batch_size, len(rows), cfg.seed)][:, :-1] for step in range(3)]
        assert len(fed[method]) == 3, f"{method}: one training forward per step expected"
        assert all(torch.equal(got, want) for got, want in zip(fed[method], expected)), method
    assert all(torch.equal(a, b) for a, b in zip(fed["baseline"], fed["mhar"]))


def test_ddp_two_processes_matches_one(tmp_path):
    """torchrun --nproc_per_node 2 (gloo) at the same global batch gives the same curve."""
    train(small(tmp_path / "one", steps=4, method="mhar"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
           "-m", "mhar_probe.cli", "train", "--out", str(tmp_path / "two"), "--steps", "4", "--method", "mhar",
           "--seq-len", "32", "--batch-size", "4", "--eval-every", "2", "--eval-batches", "1",
           "--vocab-size", "512", "--corpus-max-bytes", "150000", "--lr", "3e-3", "--no-progress",
           "--layers", "2", "--hidden-size", "64", "--ffn", "128"]
    subprocess.run(cmd, check=True, env=env, timeout=300, capture_output=True)
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert [s for s, *_ in one] == [s for s, *_ in two]
    for (_, la, va), (_, lb, vb) in zip(one, two):
        for x, y in ((la, lb), (va, vb)):
            assert (x is None) == (y is None)
            if x is not None:
                assert y == pytest.approx(x, rel=1e-4, abs=1e-5)


def cli(*args: str) -> int:
    """`mhar ARGS` in-process; its exit status (argparse's refusals exit, the others return)."""
    try:
        return main(list(args))
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize("args,needle", [
    (["--heads", "5"], "not divisible by routing heads"),
    (["--method", "resnet"], "unknown method"),
    (["--preset", "7b"], "unknown preset"),
    (["--seq-len", "4096"], "position limit"),
    (["--time-limit", "0"], "--time-limit: 0 must be a finite number above 0"),
    (["--time-limit", "-30"], "--time-limit: -30 must be a finite number above 0"),
])
def test_train_cli_bad_input_one_line_exit_2(tmp_path, capsys, args, needle):
    rc = cli("train", "--out", str(tmp_path / "r"), "--steps", "1", "--no-progress",
             "--corpus-max-bytes", "150000", *args)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1


def test_train_cli_corpus_errors(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "blank.txt").write_text("")
    for corpus, needle in [(tmp_path / "missing", "does not exist"), (empty, str(empty)),
                           (tmp_path / "blank.txt", "blank.txt")]:
        rc = cli("train", "--out", str(tmp_path / "r"), "--steps", "1", "--no-progress", "--corpus", str(corpus))
        err = capsys.readouterr().err.strip()
        assert rc == 2 and needle in err and len(err.splitlines()) == 1, err


def test_existing_output_needs_overwrite_and_is_kept(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    rc = cli("train", "--out", str(out), "--steps", "1", "--no-progress")
    assert rc == 2 and "--overwrite" in capsys.readouterr().err
    assert (out / "precious.txt").read_text() == "keep me"


def test_resume_errors_missing_and_corrupt_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("x")
    rc = cli("train", "--out", str(out), "--steps", "1", "--no-progress", "--resume")
    assert rc == 2 and "no checkpoint" in capsys.readouterr().err
    train(small(tmp_path / "ok", steps=2))
    (tmp_path / "ok" / "checkpoint" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(Exception, match="corrupt"):
        train(small(tmp_path / "ok", steps=4, resume=True))


def test_info_cli(tmp_path, capsys):
    assert cli("info", "--preset", "1b", "--method", "mhar", "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["parameters"]["routing"] == (2 * 36 + 1) * 2 * 1280
    assert info["flops_per_token"]["routing"] > 0
    assert cli("info", str(tmp_path / "nope")) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "junk").mkdir()
    assert cli("info", str(tmp_path / "junk")) == 2
    assert "not a run directory" in capsys.readouterr().err
