"""DDP on two GPUs (run on a machine with at least 2: pytest -m gpu tests/gpu/test_distributed_gpu.py;
one pytest process per test, sharing the reference runs: benchmarks/multi_gpu/run_on_device.sh tests),
and the 4 -> 2 GPU resume on a machine with at least 4.

Each test launches `torchrun --nproc_per_node 2` (the last one also 4) on `train` itself (NCCL), so pytest runs in one
process and a failing rank shows up as that test's failure with its stderr:
* the CUDA-graph step under DDP (the all-reduce captured with the last micro-batch's backward,
  two micro-batches per rank: the no-sync and the sync graph) follows the eager DDP step's loss
  curve, without and with compiled sublayers (the latter run with DDP's defaults, which are
  these), and the run ends (its graphs are destroyed before the process group, pytorch#115388);
* a 2-GPU graph-stepped run stopped after 4 steps resumes on 1 GPU (graph step) with the
  uninterrupted 2-GPU run's metrics;
* FSDP2 with its defaults (compiled sublayers, eager step) follows the eager DDP curve;
* (4 GPUs; skipped with fewer) a 4-GPU graph-stepped run stopped after 4 steps resumes on 2 GPUs
  with the uninterrupted 4-GPU run's metrics (issue 36's "saved on 4 GPUs, resumed on 2").
bf16 autocast: the curves agree to the rounding of bf16, as the one-GPU trainer test allows.

Every run has a hard limit (`--gpu-run-timeout`, tests/gpu/conftest.py): past it each rank prints
its Python stacks and the test fails with every rank's stderr (tests/torchrun_checks.py). The
corpus and tokenizer are built once per session (or once per `--gpu-runs` directory), before any
run; the eager and the graph-stepped DDP runs are shared by the tests that compare against them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA devices", allow_module_level=True)

from mhar_probe.runfiles import read_metrics  # noqa: E402
from torchrun_checks import Launched, launch  # noqa: E402  (tests/, on the path by tests/conftest.py)

# the tiny preset, 4 layers, 8 steps; per rank 8 rows per step as 2 micro-batches of 4 (the
# no-sync and the sync graph both run); validation at steps 0, 4 and 8
SMALL = dict(steps=8, method="mhar", heads=2, seq_len=128, batch_size=16, micro_batch=4, eval_every=4,
             eval_batches=1, vocab_size=512, corpus_max_bytes=400_000, lr=2e-3, progress=False,
             checkpoint_every=100, extra=dict(num_hidden_layers=4))
BODY = ("import json\nfrom mhar_probe.errors import UserError\nfrom mhar_probe.train import TrainConfig, train\n"
        "try:\n    train(TrainConfig.from_dict(json.loads(sys.argv[1])))\n"
        "except UserError as exc:\n    print(exc, file=sys.stderr)\n    sys.exit(2)\n")


@dataclass
class Runs:
    """Starts `train` runs with SMALL under a hard limit each; keeps the shared ones in `shared`."""

    shared: Path
    timeout: float

    def __call__(self, out: Path, gpus: int = 2, check: bool = True, **options) -> Launched:
        """`train` with SMALL and `options` under torchrun on `gpus` GPUs (NCCL), or in one process."""
        cfg = json.dumps(dict(SMALL, out=str(out), **options))
        ran = launch(BODY, [cfg], stem=out.parent / f"{out.name}-{gpus}gpu", timeout=self.timeout, nproc=gpus)
        print(f"{out.name} on {gpus} GPU(s): {ran.seconds:.0f} s")  # (with -s, or in the captured output)
        if check:
            assert ran.returncode == 0 and not ran.timed_out, f"{cfg}\n{ran.report()}"
        return ran

    def reference(self, name: str, gpus: int = 2, **options) -> Path:
        """A run shared by several tests (and pytest invocations with the same --gpu-runs):
        trained once on `gpus` GPUs, reused while its options and a finished summary are there."""
        out = self.shared / name
        options_file = self.shared / f"{name}.options.json"
        want = json.dumps(dict(SMALL, gpus=gpus, **options), sort_keys=True)
        finished = (out / "summary.json").exists() and options_file.exists() and options_file.read_text() == want
        if not finished:
            options_file.unlink(missing_ok=True)
            self(out, gpus=gpus, overwrite=out.exists(), **options)
            options_file.write_text(want)
        return out


@pytest.fixture(scope="session")
def runs(tmp_path_factory, pytestconfig) -> Runs:
    """The runner, with the corpus / tokenizer / token arrays of SMALL built here once (the runs
    then read them from the cache; before, rank 0 of every run trained the tokenizer again)."""
    option = pytestconfig.getoption("--gpu-runs")
    shared = Path(option) if option else tmp_path_factory.mktemp("shared")
    shared.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(shared / "mhar-cache"))
        from mhar_probe.data import get_tokenizer, load_corpus, load_packed

        corpus = load_corpus(None, max_bytes=SMALL["corpus_max_bytes"])
        tokenizer = get_tokenizer(corpus, vocab_size=SMALL["vocab_size"])
        for split in ("train", "val"):
            load_packed(corpus, tokenizer, SMALL["seq_len"], split)
        yield Runs(shared, pytestconfig.getoption("--gpu-run-timeout"))


def curve(out: Path, key: str) -> list[float]:
    return [m[key] for m in read_metrics(out / "metrics.jsonl") if key in m]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture
def eager_ddp(runs) -> Path:
    return runs.reference("eager", cuda_graphs=False, compile_sublayers=False)


@pytest.fixture
def graph_ddp(runs) -> Path:
    return runs.reference("graphs", cuda_graphs=True, compile_sublayers=False)


@pytest.mark.parametrize("compiled", [False, True])
def test_ddp_graph_step_follows_the_eager_ddp_curve(request, tmp_path, runs, eager_ddp, compiled):
    if compiled:  # DDP's defaults on CUDA: the graph step with compiled sublayers
        out = tmp_path / "graphs"
        runs(out)
    else:  # (shared with the resume test)
        out = request.getfixturevalue("graph_ddp")
    s = summary(out)
    assert s["cuda_graphs"] is True and s["world_size"] == 2 and s["compiled_sublayers"] is compiled
    for key in ("loss", "val_loss"):
        got, want = curve(out, key), curve(eager_ddp, key)
        assert len(got) == len(want) > 2
        assert got[0] == pytest.approx(want[0], abs=0.02), key  # the same start: same model, same batch
        for a, b in zip(got, want):
            assert a == pytest.approx(b, abs=0.05), (key, got, want)
    assert curve(out, "loss")[-1] < curve(out, "loss")[0] - 0.2  # it trains


def assert_same_metrics(whole: Path, cut: Path) -> None:
    """The resumed run's metrics are the uninterrupted run's, step by step: the same steps, token
    counts and learning rates exactly (the same global batches in the same order), and loss,
    validation loss and gradient norm equal to within bf16 rounding. Only the reduction order
    differs between world sizes (bf16 autocast), hence rel/abs 2e-2; a different batch at a step
    or a lost optimizer state moves them further (the loss falls by more than 0.2 over 8 steps)."""
    one, two = read_metrics(whole / "metrics.jsonl"), read_metrics(cut / "metrics.jsonl")
    assert [m["step"] for m in one] == [m["step"] for m in two] == list(range(SMALL["steps"] + 1))
    for a, b in zip(one, two):
        assert a["tokens"] == b["tokens"] and a["lr"] == b["lr"]
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:  # the same batches and state; only the reduction order differs (bf16 autocast)
                assert b[key] == pytest.approx(a[key], rel=2e-2, abs=2e-2), (a["step"], key)


def test_ddp_graph_run_resumes_on_one_gpu_with_the_same_metrics(tmp_path, runs, graph_ddp):
    """Saved by 2 GPUs (graph step) after 4 steps, resumed on 1 GPU (graph step, the per-GPU batch
    doubles: 4 micro-batches of 4 rows instead of 2): the uninterrupted 2-GPU run's metrics."""
    whole, cut = graph_ddp, tmp_path / "cut"
    runs(cut, cuda_graphs=True, compile_sublayers=False, stop_after=4)
    runs(cut, gpus=1, cuda_graphs=True, compile_sublayers=False, resume=True)
    assert summary(cut)["world_size"] == 1 and summary(cut)["cuda_graphs"] is True
    assert_same_metrics(whole, cut)


def test_fsdp_with_compiled_sublayers_follows_the_eager_ddp_curve(tmp_path, runs, eager_ddp):
    out = tmp_path / "fsdp"
    runs(out, fsdp=True)  # FSDP2's defaults on CUDA: compiled sublayers, the eager step
    s = summary(out)
    assert s.get("fsdp") and s["compiled_sublayers"] is True and s["cuda_graphs"] is False
    for key in ("loss", "val_loss"):
        got, want = curve(out, key), curve(eager_ddp, key)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a == pytest.approx(b, abs=0.05), (key, got, want)


def test_fsdp_refuses_cuda_graphs_with_the_reason(tmp_path, runs):
    ran = runs(tmp_path / "r", check=False, fsdp=True, cuda_graphs=True)
    assert ran.returncode != 0 and not ran.timed_out, ran.report()
    assert "FSDP2 all-gathers and frees the parameters" in ran.all_stderr, ran.report()


@pytest.mark.skipif(torch.cuda.device_count() < 4,  # (before the session's corpus is built)
                    reason=f"needs 4 CUDA devices for the 4 -> 2 GPU resume ({torch.cuda.device_count()} visible)")
def test_ddp_graph_run_saved_on_four_gpus_resumes_on_two_with_the_same_metrics(tmp_path, runs):
    """Issue 36's case: saved by 4 GPUs (graph step) after 4 steps, resumed on 2 GPUs (graph step;
    the per-GPU batch doubles: 2 micro-batches of 4 rows, the no-sync and the sync graph, instead of
    1): the metrics of the same run trained on 4 GPUs straight through (a shared reference run)."""
    options = dict(cuda_graphs=True, compile_sublayers=False)
    whole, cut = runs.reference("graphs-4gpu", gpus=4, **options), tmp_path / "cut"
    assert summary(whole)["world_size"] == 4 and summary(whole)["cuda_graphs"] is True
    runs(cut, gpus=4, stop_after=4, **options)
    assert not (cut / "summary.json").exists()  # stopped after step 4, not finished
    assert read_metrics(cut / "metrics.jsonl")[-1]["step"] == 4
    runs(cut, gpus=2, resume=True, **options)
    assert summary(cut)["world_size"] == 2 and summary(cut)["cuda_graphs"] is True
    assert_same_metrics(whole, cut)
