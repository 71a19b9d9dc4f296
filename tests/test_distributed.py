"""Several processes on the CPU (gloo): the DDP schedule of the captured step, which options
compose with DDP / FSDP2, and exact resume across world sizes.

The CUDA-graph capture itself needs GPUs (tests/gpu/test_distributed_gpu.py); here `GraphStep`
runs the very bodies it would capture, uncaptured and in replay order (`graphs=False`), in
float64 under DDP, against one process stepping the concatenated batch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from mhar_probe.compiled import choose_compile_sublayers
from mhar_probe.runfiles import read_metrics
from mhar_probe.step import choose_cuda_graphs, micro_roles
from mhar_probe.train import TrainConfig, train

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)

SMALL = dict(preset="tiny", seq_len=32, batch_size=8, eval_every=2, eval_batches=1, vocab_size=512,
             corpus_max_bytes=150_000, progress=False, lr=3e-3, steps=6, checkpoint_every=100,
             extra=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- options
def test_micro_roles_all_reduce_once_at_the_last_micro_batch():
    assert micro_roles(1, ddp=True) == [(True, True)]
    assert micro_roles(4, ddp=True) == [(True, False), (False, False), (False, False), (False, True)]
    assert micro_roles(3, ddp=False) == [(True, True), (False, True), (False, True)]  # as before DDP capture
    assert len(set(micro_roles(7, ddp=True))) == 3  # at most three graphs, whatever the accumulation


def test_cuda_graphs_are_the_default_on_cuda_with_or_without_ddp_and_fsdp2_steps_eagerly():
    """On CUDA the graph step is the default for one process and under DDP alike (the world size
    does not enter); FSDP2 steps eagerly by default and refuses graphs when asked; off CUDA
    nothing changes: eager by default, refused when asked."""
    assert choose_cuda_graphs(None, CUDA) is True  # one process or DDP: the same default
    assert choose_cuda_graphs(False, CUDA) is False  # --no-cuda-graphs
    assert choose_cuda_graphs(True, CUDA) is True
    assert choose_cuda_graphs(None, CUDA, fsdp=True) is False  # FSDP2 (any world size, also 1)
    assert choose_cuda_graphs(False, CUDA, fsdp=True) is False
    with pytest.raises(ValueError, match="FSDP2 all-gathers and frees the parameters from Python hooks"):
        choose_cuda_graphs(True, CUDA, fsdp=True)
    assert choose_cuda_graphs(None, CPU) is False and choose_cuda_graphs(None, CPU, fsdp=True) is False
    with pytest.raises(ValueError, match="needs a CUDA device"):
        choose_cuda_graphs(True, CPU)


def test_compiled_sublayers_are_the_default_on_cuda_under_ddp_and_fsdp2():
    """Compiled sublayers are the CUDA default whatever the parallelism (one process, DDP and
    FSDP2 build the same `choose_compile_sublayers(requested, device)`); off CUDA they stay off."""
    assert choose_compile_sublayers(None, CUDA) is True
    assert choose_compile_sublayers(False, CUDA) is False  # --no-compile-sublayers
    assert choose_compile_sublayers(None, CPU) is False
    with pytest.raises(ValueError, match="needs a CUDA device"):
        choose_compile_sublayers(True, CPU)


def test_nccl_is_bound_to_the_rank_gpu_when_the_group_starts():
    """With `device_id` NCCL creates its communicator in `init_process_group` (eagerly, never at a
    first collective inside a capture) and barriers use the rank's GPU; gloo on the CPU."""
    from mhar_probe.distributed import process_group_options

    assert process_group_options(torch.device("cuda", 1)) == dict(backend="nccl", device_id=torch.device("cuda", 1))
    assert process_group_options(CPU) == dict(backend="gloo")


# ---------------------------------------------------------------------------- the DDP step schedule
def _model():
    from mhar_probe.model import MHARConfig, MHARForCausalLM

    torch.manual_seed(0)
    cfg = MHARConfig.from_preset("tiny", residual_method="mhar", vocab_size=97, num_hidden_layers=2,
                                 hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                 num_key_value_heads=2, routing_heads=2)
    return MHARForCausalLM(cfg).double()


def _steps(model, forward, ddp, micro_batches_per_step, graphs_schedule: bool):
    from mhar_probe.parallel import clip_grad_norm
    from mhar_probe.step import EagerStep, GraphStep

    def objective(rows):
        logits = forward(rows[:, :-1], use_cache=False).logits
        ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
        z = 1e-3 * torch.logsumexp(logits, -1).square().mean()
        return ce + z, ce, {"z_loss": z}

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    kw = dict(objective=objective, params=list(model.parameters()), optimizer=opt, grad_clip=0.05, device=CPU)
    if graphs_schedule:
        step = GraphStep(**kw, ddp=ddp, graphs=False, ddp_warmup=2)
    else:
        step = EagerStep(**kw, clip=clip_grad_norm)
    out = []
    for i, micro in enumerate(micro_batches_per_step):
        r = step(micro, lr=1e-2 * (i + 1))
        out.append((r.loss, r.grad_norm, r.extras["z_loss"]))
    return out, [p.detach().clone() for p in model.parameters()]


def _batches(steps: int, world: int, n: int, m: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 97, (steps, world, n, m, 9), generator=g)  # [step, rank, micro, m, T+1]


def _ddp_worker(rank: int, world: int, port: int, n: int, m: int, out: str) -> None:
    import torch.distributed as dist

    from mhar_probe.distributed import DistInfo
    from mhar_probe.parallel import wrap_ddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = _model()
        ddp = wrap_ddp(model, DistInfo(rank, world, rank, CPU), for_graphs=True)
        data = _batches(3, world, n, m)
        results, params = _steps(model, ddp, ddp, [list(data[s, rank]) for s in range(3)], True)
        losses = torch.tensor([r[0] for r in results], dtype=torch.float64)
        dist.all_reduce(losses)
        if rank == 0:
            torch.save(dict(loss=(losses / world).tolist(), grad_norm=[r[1] for r in results], params=params), out)
    finally:
        # DDP's reducer holds the group: freed first, or the group's destructor runs after
        # destroy_process_group, when this frame goes, and can wait forever on its threads
        model = ddp = None  # noqa: F841
        dist.destroy_process_group()


@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_ddp_graph_schedule_matches_one_process_on_the_whole_batch(tmp_path, n):
    """Two gloo processes, each with n micro-batches of 2 rows per step, stepped by the bodies the
    DDP graph step captures (all-reduce only after the last micro-batch; gradients are DDP's
    bucket views, added to and zeroed by the update) give one process's losses, gradient norms
    and parameters when it steps the same 2 n rows per rank as 2 n micro-batches (float64)."""
    world, m = 2, 2
    out = tmp_path / "ddp.pt"
    mp.spawn(_ddp_worker, args=(world, free_port(), n, m, str(out)), nprocs=world, join=True)
    got = torch.load(out)
    data = _batches(3, world, n, m)
    model = _model()
    ref, ref_params = _steps(model, model, None, [list(data[s].flatten(0, 1)) for s in range(3)], False)
    assert got["loss"] == pytest.approx([r[0] for r in ref], rel=1e-12)
    assert got["grad_norm"] == pytest.approx([r[1] for r in ref], rel=1e-6)  # (the step keeps ||g|| in fp32)
    assert all(r[1] > 0.05 for r in ref)  # clipping was active: the norm is of the all-reduced gradient
    for a, b in zip(got["params"], ref_params):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_uncaptured_graph_step_matches_eager_step_in_one_process():
    """`GraphStep(graphs=False)` without DDP (first micro-batch writes the gradients, the others
    add) is the eager step: the same losses, norms and parameters (float64)."""
    data = _batches(3, 1, 3, 2)[:, 0]
    a, pa = _steps(_model(), None, None, [], False)  # (no steps: just the initial parameters)
    model = _model()
    one, p_one = _steps(model, model, None, [list(data[s]) for s in range(3)], True)
    model = _model()
    two, p_two = _steps(model, model, None, [list(data[s]) for s in range(3)], False)
    for (loss1, norm1, z1), (loss2, norm2, z2) in zip(one, two):
        assert loss1 == pytest.approx(loss2, rel=1e-12) and z1 == pytest.approx(z2, rel=1e-12)
        assert norm1 == pytest.approx(norm2, rel=1e-6)  # (the step keeps ||g|| in fp32)
    assert any(not torch.equal(x, y) for x, y in zip(p_one, pa))
    for x, y in zip(p_one, p_two):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------- the end of a run
@pytest.mark.parametrize("fails", [False, True])
def test_the_graph_step_is_gone_before_the_process_group_is_destroyed(tmp_path, monkeypatch, fails):
    """NCCL's teardown waits for CUDA graphs that captured its collectives (pytorch#115388): a
    run whose graph step is still alive when `shutdown` destroys the process group never ends.
    The trainer holds its step in a reference cycle, so only letting go of it explicitly frees
    it in time -- at the end of the run and when the run fails (here: the uncaptured graph step
    on the CPU, one process, `shutdown` watched). Once the step is gone the finished trainer
    goes too (when the run ends normally), with the DDP wrapper whose reducer holds the group."""
    import gc

    import mhar_probe.train as train_module
    from mhar_probe.errors import UserError
    from mhar_probe.step import GraphStep

    def graph_step(self):
        return GraphStep(objective=self._objective, params=list(self.model.parameters()),
                         optimizer=self.optimizer, grad_clip=self.cfg.grad_clip, device=self.device, graphs=False)

    alive_at_shutdown = []

    def watched_shutdown(info):
        # neither the step (its graphs) nor the trainer (its DDP reducer holds the group)
        alive_at_shutdown.extend(type(o).__name__ for o in gc.get_objects()
                                 if type(o) in (GraphStep, train_module.Trainer))

    monkeypatch.setattr(train_module.Trainer, "build_step", graph_step)
    monkeypatch.setattr(train_module, "shutdown", watched_shutdown)
    cfg = TrainConfig(out=str(tmp_path / "run"), **dict(SMALL, steps=2, lr=1e9 if fails else SMALL["lr"]))
    gc.collect()
    gc.disable()  # (an automatic collection between the run's end and `shutdown` would hide the cycle)
    try:
        if fails:
            with pytest.raises(UserError, match="diverged"):
                train(cfg)
        else:
            train(cfg)
    finally:
        gc.enable()
    # (a failed run's traceback still holds its trainer, not the step)
    assert alive_at_shutdown == (["Trainer"] if fails else [])


# ---------------------------------------------------------------------------- resume across world sizes
def _torchrun(cfg: TrainConfig, world: int, tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text("import json, sys\nfrom mhar_probe.train import TrainConfig, train\n"
                      "train(TrainConfig.from_dict(json.loads(sys.argv[1])))\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
                           "--master_port", str(free_port()), str(script), json.dumps(asdict(cfg))],
                          env=env, timeout=600, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _run(cfg: TrainConfig, world: int, tmp_path: Path) -> None:
    if world == 1:
        train(cfg)
    else:
        _torchrun(cfg, world, tmp_path)


def _assert_same_metrics(whole: Path, resumed: Path) -> None:
    one, two = read_metrics(whole / "metrics.jsonl"), read_metrics(resumed / "metrics.jsonl")
    assert [m["step"] for m in one] == [m["step"] for m in two] == list(range(SMALL["steps"] + 1))
    for a, b in zip(one, two):
        assert a["tokens"] == b["tokens"] and a["lr"] == b["lr"]
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b), (a["step"], key)
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), (a["step"], key)


def _resume_across(tmp_path: Path, worlds: list[int]) -> None:
    """An uninterrupted run at worlds[0] processes; a run stopped after steps 2, 4 at worlds[0],
    worlds[1], ... and resumed each time at the next world size; the metrics agree."""
    _run(TrainConfig(out=str(tmp_path / "whole"), **SMALL), worlds[0], tmp_path)
    cut = str(tmp_path / "cut")
    for i, world in enumerate(worlds):
        stop = 2 * (i + 1) if i < len(worlds) - 1 else None
        _run(TrainConfig(out=cut, resume=i > 0, stop_after=stop, **SMALL), world, tmp_path)
    _assert_same_metrics(tmp_path / "whole", Path(cut))
    summary = json.loads((Path(cut) / "summary.json").read_text())
    assert summary["world_size"] == worlds[-1] and summary["steps"] == SMALL["steps"]


@pytest.mark.slow
def test_resume_at_another_world_size_gives_the_uninterrupted_metrics(tmp_path):
    """Saved by 2 gloo processes after 2 steps, resumed by one process: the same global batches
    (the per-process batch grows from 4 to 8 rows) and the metrics of the uninterrupted 2-process run.
    About 40 s on two idle cores (two torchrun launches)."""
    _resume_across(tmp_path, [2, 1])


@pytest.mark.slow
def test_resume_from_four_processes_at_two_then_one(tmp_path):
    """4 -> 2 -> 1 processes (the issue's case: saved on 4 GPUs, resumed on 2). About 60 s on two cores."""
    _resume_across(tmp_path, [4, 2, 1])


# ---------------------------------------------------------------------------- time limit under torchrun
_DEADLINE_SCRIPT = """
import json, os, sys
from mhar_probe.distributed import init_distributed, shutdown
from mhar_probe.train import TrainConfig, Trainer

rank = int(os.environ["RANK"])
info = init_distributed("cpu")
try:
    for name, past_at in json.loads(sys.argv[2]).items():
        cfg = TrainConfig.from_dict({**json.loads(sys.argv[1]), "out": os.path.join(sys.argv[3], name)})
        box = []  # this rank's fake clock: far past the limit from step past_at[rank] on (never if null)
        at = past_at[rank]
        trainer = Trainer(cfg, info, clock=lambda: 1e9 if at is not None and box and box[0].step >= at else 0.0)
        box.append(trainer)
        outcome = trainer.run()
        # one write() of the whole line: print() writes its pieces apart, and unbuffered ranks sharing
        # the pipe interleaved them ("OUTCOMEOUTCOME rank0_past 0 3")
        os.write(1, f"OUTCOME {name} {rank} {json.dumps(outcome.get('stopped_at', 'finished'))}\\n".encode())
finally:
    shutdown(info)
"""


@pytest.mark.slow
def test_time_limit_under_torchrun_stops_every_rank_at_rank_zeros_step(tmp_path):
    """Two gloo ranks in one launch, two runs. In the first, rank 0's clock passes the limit at
    step 3 and rank 1's never: both stop after step 3 (rank 1 told through the step's loss
    all-reduce), with one checkpoint there. In the second, rank 1's clock passes at step 1 and rank
    0's never: rank 0's decides, and both train all 6 steps. A rank that stopped alone would
    leave the other waiting in a collective (the launch times out). About 17 s on two idle cores,
    40 s on busy ones."""
    script = tmp_path / "deadline.py"
    script.write_text(_DEADLINE_SCRIPT)
    cfg = {**asdict(TrainConfig(out="unused", **SMALL)), "time_limit": 60}
    runs = {"rank0_past": [3, None], "rank1_past": [None, 1]}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(free_port()), str(script), json.dumps(cfg), json.dumps(runs),
                           str(tmp_path)], env=env, timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = sorted(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("OUTCOME"))
    assert outcomes == [["rank0_past", "0", "3"], ["rank0_past", "1", "3"],
                        ["rank1_past", "0", '"finished"'], ["rank1_past", "1", '"finished"']], repr(proc.stdout[-3000:])
    stopped = tmp_path / "rank0_past"
    assert json.loads((stopped / "checkpoint" / "state.json").read_text())["step"] == 3
    assert not (stopped / "summary.json").exists()
    assert [m["step"] for m in read_metrics(stopped / "metrics.jsonl")] == [0, 1, 2, 3]
    assert json.loads((tmp_path / "rank1_past" / "summary.json").read_text())["steps"] == SMALL["steps"]


_INTERRUPT_SCRIPT = """
import json, os, signal, sys
from mhar_probe.distributed import init_distributed, shutdown
from mhar_probe.train import TrainConfig, Trainer

rank = int(os.environ["RANK"])
info = init_distributed("cpu")


class Interrupted(Trainer):
    def after_optimizer_step(self):  # a real SIGINT on rank 1 only, inside its step 2
        if rank == 1 and self.step == 1:
            signal.raise_signal(signal.SIGINT)


try:
    cfg = TrainConfig.from_dict({**json.loads(sys.argv[1]), "out": sys.argv[2]})
    outcome = Interrupted(cfg, info).run()
    os.write(1, f"OUTCOME {rank} {json.dumps(outcome.get('stopped_at', 'finished'))}\\n".encode())
finally:
    shutdown(info)
"""


@pytest.mark.slow
def test_an_interrupt_on_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint(tmp_path):
    """Two gloo ranks; rank 1 alone gets SIGINT inside step 2: the interrupt travels with the step's
    loss all-reduce, both ranks stop after step 2 with one checkpoint and the metrics so far (a
    rank that stopped alone would leave the other waiting in a collective: the launch times out)."""
    script = tmp_path / "interrupt.py"
    script.write_text(_INTERRUPT_SCRIPT)
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(free_port()), str(script), json.dumps(asdict(TrainConfig(out="unused",
                                                                                                        **SMALL))),
                           str(out)], env=env, timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = sorted(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("OUTCOME"))
    assert outcomes == [["0", "2"], ["1", "2"]], repr(proc.stdout[-3000:])
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 2
    assert [m["step"] for m in read_metrics(out / "metrics.jsonl")] == [0, 1, 2]
    assert not (out / "summary.json").exists()


# ---------------------------------------------------------------------------- FSDP2 with compiled sublayers
def _fsdp_worker(rank: int, world: int, port: int, compiled: bool, out: str) -> None:
    import torch.distributed as dist

    from mhar_probe.compiled import compile_sublayers, sublayers_compiled
    from mhar_probe.distributed import DistInfo
    from mhar_probe.parallel import apply_fsdp, sync_replicated_grads

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = _model().float()
        model = apply_fsdp(model, DistInfo(rank, world, rank, CPU))
        if compiled:  # after sharding: the compiled regions call the sharded units (their hooks run)
            compile_sublayers(model, backend="aot_eager")
            assert sublayers_compiled(model)
        from mhar_probe.parallel import clip_grad_norm
        from mhar_probe.step import EagerStep

        def objective(rows):
            logits = model(rows[:, :-1], use_cache=False).logits
            ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
            return ce, ce, {}

        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = EagerStep(objective=objective, params=list(model.parameters()), optimizer=opt, grad_clip=0.05,
                         device=CPU, clip=clip_grad_norm, before_clip=lambda: sync_replicated_grads(model))
        data = _batches(2, world, 1, 2)
        losses = [step(list(data[s, rank]), lr=1e-2).loss for s in range(2)]
        t = torch.tensor(losses, dtype=torch.float64)
        dist.all_reduce(t)
        if rank == 0:
            torch.save((t / world).tolist(), out)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_fsdp_with_compiled_sublayers_matches_uncompiled(tmp_path):
    """FSDP2 (two gloo processes) with each sublayer compiled after sharding (aot_eager: traced,
    no code generated) gives the uncompiled FSDP2 losses over two steps. About 90 s on two cores."""
    got = {}
    for compiled in (False, True):
        out = tmp_path / f"{compiled}.pt"
        mp.spawn(_fsdp_worker, args=(2, free_port(), compiled, str(out)), nprocs=2, join=True)
        got[compiled] = torch.load(out)
    assert got[True] == pytest.approx(got[False], rel=1e-5)
    assert got[True][1] != got[True][0]  # it stepped


# ---------------------------------------------------------------------------- resume across wrappings
def test_index_keyed_optimizer_state_renamed_as_torch_names_it():
    """A plain run's optimizer.state_dict() (keyed by index) re-keyed by name equals what
    torch.distributed.checkpoint's full-state-dict helper (what FSDP2 runs save) gives."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    from mhar_probe.parallel import names_keyed_optimizer_state

    model = _model().float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 97, (2, 8))).logits.square().mean().backward()
    opt.step()
    ours = names_keyed_optimizer_state(opt.state_dict(), model, opt)
    ref = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    assert set(ours["state"]) == set(ref["state"]) and len(ours["state"]) == len(list(model.parameters()))
    for name, st in ref["state"].items():
        for key, value in st.items():
            torch.testing.assert_close(ours["state"][name][key], value, rtol=0, atol=0)
    assert [g["params"] for g in ours["param_groups"]] == [g["params"] for g in ref["param_groups"]]


@pytest.mark.slow
@pytest.mark.parametrize("first,then", [((1, False), (2, True)), ((2, True), (1, False))])
def test_resume_between_ddp_and_fsdp(tmp_path, first, then):
    """A run saved without --fsdp resumes under FSDP2 on 2 processes, and the other way round,
    with the uninterrupted one-process run's metrics (the checkpoint's format picks the loader).
    About 90 s on two cores."""
    (w1, fsdp1), (w2, fsdp2) = first, then
    small = dict(SMALL, steps=4)
    train(TrainConfig(out=str(tmp_path / "whole"), **small))
    cut = str(tmp_path / "cut")
    _run(TrainConfig(out=cut, fsdp=fsdp1, stop_after=2, **small), w1, tmp_path)
    _run(TrainConfig(out=cut, fsdp=fsdp2, resume=True, **small), w2, tmp_path)
    one, two = read_metrics(tmp_path / "whole" / "metrics.jsonl"), read_metrics(Path(cut) / "metrics.jsonl")
    assert [m["step"] for m in one] == [m["step"] for m in two] == list(range(5))
    for a, b in zip(one, two):
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), (a["step"], key)
