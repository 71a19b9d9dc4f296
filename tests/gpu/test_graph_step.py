"""The CUDA-graph training step against the eager step (run on a GPU machine: pytest -m gpu tests/gpu).

* step level: the same model, data and fused AdamW stepped eagerly and from graphs give the same
  losses, gradient norms, parameters and after-step state (an EMA), with gradient accumulation
  over two micro-batches, for an additive and a routed (triton) model; fp32, so that only the
  order of float operations could differ;
* trainer level: `mhar train` with graphs follows the eager run's loss curve under bf16 autocast,
  and a graph-stepped run stopped and resumed gives the uninterrupted run's metrics bit for bit;
* launching the next step before reading a step back (overlapped steps) changes no bit, at the
  step level and in the trainer;
* capture survives a garbage collection that would free an older run's graph inside it (without
  the step's collector pause the same construction fails: tests/gpu/gc_control_check.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from mhar_probe.model import MHARConfig, MHARForCausalLM  # noqa: E402
from mhar_probe.model.routing import set_routing_backend  # noqa: E402
from mhar_probe.parallel import clip_grad_norm  # noqa: E402
from mhar_probe.runfiles import read_metrics  # noqa: E402
from mhar_probe.step import EagerStep, GraphStep  # noqa: E402
from mhar_probe.train import TrainConfig, train  # noqa: E402

DEV = torch.device("cuda")


def _model(method: str) -> MHARForCausalLM:
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset("tiny", residual_method=method, vocab_size=512, num_hidden_layers=3,
                                 routing_heads=2 if method == "mhar" else None)
    return set_routing_backend(MHARForCausalLM(cfg), "triton").to(DEV)


def _stepper(kind: str, model, opt, ema: dict):
    def objective(rows):
        logits = model(rows[:, :-1], use_cache=False).logits
        ce = F.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten())
        z = 1e-4 * torch.logsumexp(logits.float(), -1).square().mean()
        return ce + z, ce, {"z_loss": z}

    @torch.no_grad()
    def after_step():
        for name, p in model.named_parameters():
            ema[name].lerp_(p, 0.1)

    params = list(model.parameters())
    if kind == "graph":
        return GraphStep(objective=objective, params=params, optimizer=opt, grad_clip=0.5, device=DEV,
                         after_step=after_step)
    return EagerStep(objective=objective, params=params, optimizer=opt, grad_clip=0.5, device=DEV,
                     clip=clip_grad_norm, after_step=after_step)


@pytest.mark.parametrize("method", ["baseline", "mhar"])
def test_graph_step_matches_eager_step(method):
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(3)
    batches = [[torch.randint(0, 512, (2, 33), generator=g) for _ in range(2)] for _ in range(4)]
    runs = {}
    base = _model(method)
    for kind in ("eager", "graph"):
        model = copy.deepcopy(base)
        # the same fused AdamW in both (the graph step switches to it; eager here uses it from the start)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        ema = {n: p.detach().clone() for n, p in model.named_parameters()}
        step = _stepper(kind, model, opt, ema)
        results = [step(mb, lr=1e-3 * (i + 1)) for i, mb in enumerate(batches)]
        runs[kind] = (results, {n: p.detach().clone() for n, p in model.named_parameters()}, ema)
    (r_e, p_e, ema_e), (r_g, p_g, ema_g) = runs["eager"], runs["graph"]
    for a, b in zip(r_e, r_g):
        assert a.loss == pytest.approx(b.loss, rel=1e-6)
        assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-5)
        assert a.extras["z_loss"] == pytest.approx(b.extras["z_loss"], rel=1e-5)
    assert r_e[0].loss != r_e[-1].loss  # the parameters did move
    for name in p_e:
        torch.testing.assert_close(p_g[name], p_e[name], rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(ema_g[name], ema_e[name], rtol=1e-5, atol=1e-6, msg=name)


def test_graph_step_refuses_another_shape():
    model = _model("baseline")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = _stepper("graph", model, opt, {n: p.detach().clone() for n, p in model.named_parameters()})
    step([torch.zeros(2, 33, dtype=torch.long)], lr=1e-3)
    with pytest.raises(ValueError, match="captured for 1 micro-batches"):
        step([torch.zeros(2, 17, dtype=torch.long)], lr=1e-3)


def test_released_graph_step_captures_again_and_steps_the_same():
    """`GraphStep.release` destroys the graphs (the trainer does it before the process group goes,
    pytorch#115388); a call after it captures again and continues the same training."""
    g = torch.Generator().manual_seed(5)
    batches = [[torch.randint(0, 512, (2, 33), generator=g)] for _ in range(3)]
    base, runs = _model("mhar"), {}
    for released in (False, True):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        step = _stepper("graph", model, opt, {n: p.detach().clone() for n, p in model.named_parameters()})
        losses = [step(batches[0], lr=1e-3).loss]
        if released:
            step.release()
            assert step.micro_graphs == {} and step.update_graph is None and not step.captured
        losses += [step(mb, lr=1e-3).loss for mb in batches[1:]]
        assert step.captured
        runs[released] = (losses, [p.detach().clone() for p in model.parameters()])
    assert runs[True][0] == pytest.approx(runs[False][0], rel=1e-6)
    for a, b in zip(runs[True][1], runs[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _capture_with_an_older_graph_in_a_cycle() -> None:
    """An older graph reachable only through a reference cycle (a finished run's step), and a
    collection inside the new step's capture (what an automatic one does when its threshold is
    reached there; made explicit so that it happens inside the capture, not before it)."""
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        old = torch.cuda.CUDAGraph()
        x = torch.zeros(4, device=DEV)
        with torch.cuda.graph(old):
            x.add_(1)
        cycle = {"graph": old}
        cycle["self"] = cycle
        del old, cycle
        model = _model("mhar")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = _stepper("graph", model, opt, {n: p.detach().clone() for n, p in model.named_parameters()})
        objective = step.objective

        def collecting_objective(rows):
            if torch.cuda.is_current_stream_capturing():
                gc.collect()
            return objective(rows)

        step.objective = collecting_objective
        step([torch.zeros(2, 33, dtype=torch.long)], lr=1e-3)  # warms up, captures, replays
    finally:
        if was_enabled:
            gc.enable()


def test_capture_survives_the_collector_freeing_an_older_graph():
    """Since torch 2.9 `torch.cuda.graph` no longer collects garbage first: an automatic collection
    inside the capture that frees an older graph invalidates the capture (pytorch#161037; the GPU
    ladder's first call). The step collects first and pauses the collector while it captures."""
    _capture_with_an_older_graph_in_a_cycle()


SMALL = dict(preset="tiny", seq_len=64, batch_size=8, micro_batch=4, eval_every=4, eval_batches=1, vocab_size=512,
             corpus_max_bytes=300_000, progress=False, lr=3e-3, steps=12, device="cuda", method="mhar", heads=2)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))


def _losses(run: Path) -> list[tuple]:
    return [(m["step"], m.get("loss"), m.get("val_loss"), m.get("grad_norm")) for m in read_metrics(run / "metrics.jsonl")]


def test_trainer_graphs_follow_the_eager_curve_and_resume_exactly(tmp_path):
    graphs = train(TrainConfig(out=str(tmp_path / "graphs"), **SMALL))
    assert graphs["cuda_graphs"] is True
    eager = train(TrainConfig(out=str(tmp_path / "eager"), cuda_graphs=False, **SMALL))
    assert eager["cuda_graphs"] is False
    lg, le = _losses(tmp_path / "graphs"), _losses(tmp_path / "eager")
    train_g = [loss for _, loss, _, _ in lg if loss is not None]
    train_e = [loss for _, loss, _, _ in le if loss is not None]
    assert len(train_g) == len(train_e) == 12
    assert train_g[-1] < train_g[0] - 0.5  # it learns
    for a, b in zip(train_g, train_e):  # bf16 autocast, fused vs foreach AdamW: the same curve, not the same bits
        assert a == pytest.approx(b, abs=0.05)
    assert graphs["final_val_loss"] == pytest.approx(eager["final_val_loss"], abs=0.05)

    # stopped after 5 steps (checkpoint), resumed in a new process state: the same bits as straight through
    part = TrainConfig(out=str(tmp_path / "resumed"), stop_after=5, **SMALL)
    assert train(part) == {"stopped_at": 5, "reason": "stop_after"}
    resumed = train(TrainConfig(out=str(tmp_path / "resumed"), resume=True, **SMALL))
    assert _losses(tmp_path / "resumed") == lg
    assert resumed["final_val_loss"] == graphs["final_val_loss"]



def test_graph_step_launched_ahead_reports_what_sequential_calls_report():
    """`launch` returns before the device finishes: launching step k + 1 before reading step k back
    (what the trainer does by default on one GPU) gives every step's loss, gradient norm, extra
    term and the final parameters bit for bit as calling the steps one after another."""
    g = torch.Generator().manual_seed(7)
    batches = [[torch.randint(0, 512, (2, 33), generator=g) for _ in range(2)] for _ in range(5)]
    base, runs = _model("mhar"), {}
    for ahead in (False, True):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        step = _stepper("graph", model, opt, {n: p.detach().clone() for n, p in model.named_parameters()})
        if ahead:
            pending = [step.launch(batches[0], lr=1e-3)]
            results = []
            for i, mb in enumerate(batches[1:], 1):
                pending.append(step.launch(mb, lr=1e-3 * (i + 1)))
                results.append(pending[-2].result())
            results.append(pending[-1].result())
        else:
            results = [step(mb, lr=1e-3 * (i + 1)) for i, mb in enumerate(batches)]
        runs[ahead] = (results, [p.detach().clone() for p in model.parameters()])
    assert runs[True][0] == runs[False][0]
    assert runs[True][0][0].loss != runs[True][0][-1].loss
    for a, b in zip(runs[True][1], runs[False][1]):
        assert torch.equal(a, b)


def test_trainer_overlapped_steps_are_the_default_and_give_the_plain_loops_metrics(tmp_path):
    """On one GPU the trainer overlaps steps by default; `--no-overlap-steps` gives the same run bit
    for bit (same graphs, same order of device work), evaluations and checkpoints included."""
    over = train(TrainConfig(out=str(tmp_path / "over"), **SMALL))
    plain = train(TrainConfig(out=str(tmp_path / "plain"), overlap_steps=False, **SMALL))
    assert over["overlap_steps"] is True and plain["overlap_steps"] is False
    assert _losses(tmp_path / "over") == _losses(tmp_path / "plain")
    assert over["final_val_loss"] == plain["final_val_loss"]
