"""Overlapped steps (`--overlap-steps`): the trainer launches step k + 1 before it reads step k back.

On the CPU the steps finish before they return, so these tests check the loop's order, not the
overlap itself (that is tests/gpu/test_graph_step.py): the same metrics, checkpoints, stops and
failures as the plain loop, with evaluations and checkpoints only after a step read back before
the next launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mhar_probe.errors import UserError
from mhar_probe.runfiles import read_metrics
from mhar_probe.step import PendingStep, StepResult, choose_overlap_steps
from mhar_probe.train import Trainer, train
from tests.test_train import losses, run_with_clock, small, stepped_clock

TIMING = ("tokens_per_s",)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


def _rows(run: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING} for m in read_metrics(run / "metrics.jsonl")]


def test_choose_overlap_steps_defaults_and_refusal():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert choose_overlap_steps(None, cuda, 1) is True
    assert choose_overlap_steps(None, cpu, 1) is False  # nothing to overlap: a CPU step is done when it returns
    assert choose_overlap_steps(None, cuda, 2) is False
    assert choose_overlap_steps(False, cuda, 1) is False
    assert choose_overlap_steps(True, cpu, 1) is True
    with pytest.raises(ValueError, match="needs one process .* all-reduced"):
        choose_overlap_steps(True, cuda, 4)


def test_pending_step_off_cuda_reads_its_values_and_names():
    pending = PendingStep(torch.tensor([2.5, 0.75, 0.125], dtype=torch.float64), ["z_loss"])
    assert pending.result() == StepResult(2.5, 0.75, {"z_loss": 0.125})
    done = PendingStep(StepResult(1.0, 2.0, {}))
    assert done.result().loss == 1.0


def test_overlapped_run_has_the_plain_runs_metrics_checkpoints_and_weights(tmp_path):
    """Evaluations every 3 steps, checkpoints every 4, 10 steps: every row (but its timing) and the
    final checkpoint and weights are those of the plain loop, and the summary says which loop ran."""
    kw = dict(steps=10, eval_every=3, checkpoint_every=4, method="mhar")
    plain = train(small(tmp_path / "plain", overlap_steps=False, **kw))
    over = train(small(tmp_path / "over", overlap_steps=True, **kw))
    assert plain["overlap_steps"] is False and over["overlap_steps"] is True
    assert _rows(tmp_path / "over") == _rows(tmp_path / "plain")
    assert [m["step"] for m in _rows(tmp_path / "over") if "val_loss" in m] == [0, 3, 6, 9, 10]
    assert all(m["tokens_per_s"] > 0 for m in read_metrics(tmp_path / "over" / "metrics.jsonl") if "loss" in m)
    assert over["final_val_loss"] == plain["final_val_loss"]
    state = [json.loads((tmp_path / r / "checkpoint" / "state.json").read_text()) for r in ("over", "plain")]
    assert state[0]["step"] == state[1]["step"] == 10
    from safetensors.torch import load_file
    wa, wb = load_file(tmp_path / "over" / "model.safetensors"), load_file(tmp_path / "plain" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_overlapped_run_stops_after_and_resumes_exactly(tmp_path):
    """--stop-after 5 (no checkpoint step) under overlap: the step is read back before the next
    launch, so the run stops at 5 with a checkpoint there, and resuming gives the full run."""
    kw = dict(steps=8, checkpoint_every=3, overlap_steps=True)
    train(small(tmp_path / "full", **kw))
    assert train(small(tmp_path / "cut", stop_after=5, **kw))["stopped_at"] == 5
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 5
    assert [m["step"] for m in read_metrics(tmp_path / "cut" / "metrics.jsonl")] == list(range(6))
    train(small(tmp_path / "cut", resume=True, **kw))
    assert losses(tmp_path / "cut") == losses(tmp_path / "full")


def test_overlapped_run_stops_at_its_time_limit_after_the_step_in_flight(tmp_path):
    """The deadline is past from step 5 on (evaluations every 2 steps, checkpoints every 3, so step
    5 is read back while step 6 runs). Reading step 5 back finds it; step 6, already launched, is
    read back and checkpointed and the run stops there (the plain loop stops at 5). The resumed run
    has the uninterrupted metrics exactly."""
    train(small(tmp_path / "full", steps=9, checkpoint_every=3))
    box, clock = stepped_clock(0, past_at=5)
    cfg = small(tmp_path / "cut", steps=9, checkpoint_every=3, time_limit=60, overlap_steps=True)
    assert run_with_clock(cfg, box, clock) == {"stopped_at": 6, "reason": "time_limit"}
    assert json.loads((tmp_path / "cut" / "checkpoint" / "state.json").read_text())["step"] == 6
    assert [m["step"] for m in read_metrics(tmp_path / "cut" / "metrics.jsonl")] == list(range(7))
    train(small(tmp_path / "cut", steps=9, checkpoint_every=3, resume=True))
    assert losses(tmp_path / "cut") == losses(tmp_path / "full")


@pytest.mark.parametrize("overlap", [False, True])
def test_overlapped_deadline_leaves_room_for_the_step_in_flight(tmp_path, monkeypatch, overlap):
    """A clock like the device's: 10 s pass each time a step is read back. With a 45 s limit the
    plain loop stops after step 4 (40 + one more step's 10 > 45). Overlapped, step k + 1 is already
    running when step k is read back, so the check reserves two steps: reading step 3 back at 30 s
    finds 30 + 20 > 45 and the run stops after step 4 as well (at 40 s), not after 5 (50 s, past
    the limit), which a one-step reserve would allow."""
    now = [0.0]
    real = Trainer.finish_step

    def device_time(self, launched, in_flight=False):
        now[0] += 10.0
        return real(self, launched, in_flight)

    monkeypatch.setattr(Trainer, "finish_step", device_time)
    cfg = small(tmp_path / "r", steps=8, checkpoint_every=100, eval_every=100, time_limit=45, overlap_steps=overlap)
    assert Trainer(cfg, clock=lambda: now[0]).run() == {"stopped_at": 4, "reason": "time_limit"}
    assert now[0] == 40.0


def test_overlapped_run_fails_on_a_non_finite_loss_naming_its_step(tmp_path, monkeypatch):
    """A NaN loss at step 3 is found when step 3 is read back (step 4 already launched): the run
    fails with the step named, and step 4 is not recorded."""
    real = Trainer.finish_step

    def poisoned(self, launched, in_flight=False):
        row = real(self, launched, in_flight)
        if row["step"] == 3:
            row["loss"] = float("nan")
        return row

    monkeypatch.setattr(Trainer, "finish_step", poisoned)
    with pytest.raises(UserError, match="the training loss is nan at step 3"):
        train(small(tmp_path / "nan", steps=6, checkpoint_every=100, eval_every=100, overlap_steps=True))
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["finished"] is False and summary["steps"] == 3
    assert [m["step"] for m in read_metrics(tmp_path / "nan" / "metrics.jsonl")] == [0, 1, 2]


def test_trainer_refuses_overlap_steps_under_torchrun(tmp_path):
    """`--overlap-steps` with several processes is refused before any work (the choice is checked
    with the others at start-up)."""
    from mhar_probe.distributed import DistInfo

    info = DistInfo(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))
    with pytest.raises(UserError, match="--overlap-steps needs one process"):
        Trainer(small(tmp_path / "r", steps=2, overlap_steps=True), info)
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
