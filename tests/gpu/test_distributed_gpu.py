"""DDP on two GPUs (run on a machine with at least 2: pytest -m gpu tests/gpu/test_distributed_gpu.py).

Each test launches `torchrun --nproc_per_node 2 -m mhar_probe.cli train ...` itself (NCCL), so
pytest runs in one process and a failing rank shows up as that test's failure with its stderr:
* the CUDA-graph step under DDP (the all-reduce captured with the last micro-batch's backward,
  two micro-batches per rank: the no-sync and the sync graph) follows the eager DDP step's loss
  curve, with and without compiled sublayers;
* a 2-GPU graph-stepped run stopped after 4 steps resumes on 1 GPU (graph step) with the
  uninterrupted 2-GPU run's metrics;
* FSDP2 with compiled sublayers (eager step) follows the eager DDP curve.
bf16 autocast: the curves agree to the rounding of bf16, as the one-GPU trainer test allows.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA devices", allow_module_level=True)

from mhar_probe.runfiles import read_metrics  # noqa: E402

SMALL = dict(steps=8, method="mhar", heads=2, seq_len=128, batch_size=16, micro_batch=4, eval_every=4,
             eval_batches=1, vocab_size=512, corpus_max_bytes=400_000, lr=2e-3, progress=False,
             checkpoint_every=100, extra=dict(num_hidden_layers=4))
SCRIPT = ("import json, sys\nfrom mhar_probe.errors import UserError\nfrom mhar_probe.train import TrainConfig, train\n"
          "try:\n    train(TrainConfig.from_dict(json.loads(sys.argv[1])))\n"
          "except UserError as exc:\n    print(exc, file=sys.stderr)\n    sys.exit(2)\n")


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    """One corpus / tokenizer cache for every run of the module (set before the module's fixtures run)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
        yield


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(out: Path, gpus: int = 2, check: bool = True, **options) -> subprocess.CompletedProcess:
    """`train` with SMALL and `options` under torchrun on `gpus` GPUs (NCCL), or in one process."""
    script = out.parent / f"{out.name}_run.py"
    script.write_text(SCRIPT)
    cfg = json.dumps(dict(SMALL, out=str(out), **options))
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(gpus),
                 "--master_port", str(free_port())] if gpus > 1 else [sys.executable])
    proc = subprocess.run([*launcher, str(script), cfg], env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)
    if check:
        assert proc.returncode == 0, f"{cfg}\n{proc.stderr[-4000:]}"
    return proc


def curve(out: Path, key: str) -> list[float]:
    return [m[key] for m in read_metrics(out / "metrics.jsonl") if key in m]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def eager_ddp(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp") / "eager"
    run(out, cuda_graphs=False, compile_sublayers=False)
    return out


@pytest.fixture(scope="module")
def graph_ddp(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp") / "graphs"
    run(out, cuda_graphs=True, compile_sublayers=False)
    return out


@pytest.mark.parametrize("compiled", [False, True])
def test_ddp_graph_step_follows_the_eager_ddp_curve(tmp_path, eager_ddp, graph_ddp, compiled):
    out = tmp_path / "graphs"
    if compiled:
        run(out, cuda_graphs=True, compile_sublayers=True)
    else:
        out = graph_ddp
    s = summary(out)
    assert s["cuda_graphs"] is True and s["world_size"] == 2 and s["compiled_sublayers"] is compiled
    for key in ("loss", "val_loss"):
        got, want = curve(out, key), curve(eager_ddp, key)
        assert len(got) == len(want) > 2
        assert got[0] == pytest.approx(want[0], abs=0.02), key  # the same start: same model, same batch
        for a, b in zip(got, want):
            assert a == pytest.approx(b, abs=0.05), (key, got, want)
    assert curve(out, "loss")[-1] < curve(out, "loss")[0] - 0.2  # it trains


def test_ddp_graph_run_resumes_on_one_gpu_with_the_same_metrics(tmp_path, graph_ddp):
    """Saved by 2 GPUs (graph step) after 4 steps, resumed on 1 GPU (graph step, the per-GPU batch
    doubles: 4 micro-batches of 4 rows instead of 2): the uninterrupted 2-GPU run's metrics."""
    whole, cut = graph_ddp, tmp_path / "cut"
    run(cut, cuda_graphs=True, compile_sublayers=False, stop_after=4)
    run(cut, gpus=1, cuda_graphs=True, compile_sublayers=False, resume=True)
    assert summary(cut)["world_size"] == 1 and summary(cut)["cuda_graphs"] is True
    one, two = read_metrics(whole / "metrics.jsonl"), read_metrics(cut / "metrics.jsonl")
    assert [m["step"] for m in one] == [m["step"] for m in two] == list(range(9))
    for a, b in zip(one, two):
        assert a["tokens"] == b["tokens"] and a["lr"] == b["lr"]
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:  # the same batches and state; only the reduction order differs (bf16 autocast)
                assert b[key] == pytest.approx(a[key], rel=2e-2, abs=2e-2), (a["step"], key)


def test_fsdp_with_compiled_sublayers_follows_the_eager_ddp_curve(tmp_path, eager_ddp):
    out = tmp_path / "fsdp"
    run(out, fsdp=True, cuda_graphs=False, compile_sublayers=True)
    s = summary(out)
    assert s.get("fsdp") and s["compiled_sublayers"] is True and s["cuda_graphs"] is False
    for key in ("loss", "val_loss"):
        got, want = curve(out, key), curve(eager_ddp, key)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a == pytest.approx(b, abs=0.05), (key, got, want)


def test_fsdp_refuses_cuda_graphs_with_the_reason(tmp_path):
    proc = run(tmp_path / "r", check=False, fsdp=True, cuda_graphs=True)
    assert proc.returncode != 0
    assert "FSDP2 all-gathers and frees the parameters" in proc.stderr
