"""Parallel helpers: wrapping policy, clipping, and from-scratch `train` under FSDP2 (two gloo
processes) against one process at the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.parallel import clip_grad_norm, decoder_layers, replicated_params, shard_units
from mhar_probe.runfiles import read_metrics
from mhar_probe.train import TrainConfig, train

SMALL = dict(preset="tiny", seq_len=32, batch_size=4, eval_every=2, eval_batches=1, vocab_size=512,
             corpus_max_bytes=150_000, progress=False, lr=3e-3, steps=4,
             extra=dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


def test_shard_units_follow_how_layers_are_called():
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                      num_attention_heads=2, num_key_value_heads=1))
    assert shard_units(hf) == list(hf.model.layers) and decoder_layers(hf) is hf.model.layers
    ours = MHARForCausalLM(MHARConfig.from_preset("tiny", vocab_size=64, num_hidden_layers=2))
    units = shard_units(ours)
    assert units == [m for layer in ours.model.layers for m in (layer.self_attn, layer.mlp)]


def test_replicated_params_follow_module_order():
    """The delta gates are all-reduced as one flat tensor, so every rank must list them in the
    same order: module order. (Sorting by `id` paired different gates across ranks whenever the
    processes' heaps laid them out differently, about one run in six.)"""
    model = MHARForCausalLM(MHARConfig.from_preset("tiny", vocab_size=64, num_hidden_layers=2,
                                                   residual_method="delta"))
    names = {id(p): n for n, p in model.named_parameters()}
    listed = [names[id(p)] for p in replicated_params(model)]
    expected = [n for n, p in model.named_parameters() if p.ndim == 0]
    assert listed == expected and len(listed) == 2 * 2 + 1


def test_clip_matches_torch_on_plain_parameters():
    a, b = torch.nn.Linear(5, 4), torch.nn.Linear(5, 4)
    b.load_state_dict(a.state_dict())
    x = torch.randn(3, 5)
    for m in (a, b):
        (m(x) * 100).square().sum().backward()
    ours = clip_grad_norm(a.parameters(), 1.0)
    ref = float(torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0))
    assert ours == pytest.approx(ref)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("method", ["mhar", "delta"])
def test_train_fsdp_two_processes_matches_one(tmp_path, method):
    train(TrainConfig(out=str(tmp_path / "one"), method=method, **SMALL))
    cfg = TrainConfig(out=str(tmp_path / "two"), method=method, fsdp=True, **SMALL)
    script = tmp_path / "run.py"
    script.write_text("import json, sys\nfrom mhar_probe.train import TrainConfig, train\n"
                      "train(TrainConfig.from_dict(json.loads(sys.argv[1])))\n")
    from dataclasses import asdict

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    port = 29651 + (method == "delta")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(port), str(script), json.dumps(asdict(cfg))], env=env, timeout=300,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = read_metrics(tmp_path / "one" / "metrics.jsonl"), read_metrics(tmp_path / "two" / "metrics.jsonl")
    assert [m["step"] for m in one] == [m["step"] for m in two]
    for a, b in zip(one, two):
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), (a["step"], key)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["fsdp"] and summary["world_size"] == 2
    reloaded = MHARForCausalLM.from_pretrained(tmp_path / "two")
    assert isinstance(reloaded, MHARForCausalLM) and reloaded.config.residual_method == method


@pytest.mark.slow
def test_train_fsdp_triton_collect_matches_eager(tmp_path):
    """The 4-bytes/pair backward hands every site's query gradient back from the first routing
    call's node, which runs last: under FSDP2 (two gloo processes, the Triton interpreter) the
    losses and gradient norms still match one eager process. About 100 s on two cores."""
    small = dict(SMALL, steps=2, eval_every=2)
    train(TrainConfig(out=str(tmp_path / "one"), method="mhar", routing_backend="eager", **small))
    cfg = TrainConfig(out=str(tmp_path / "two"), method="mhar", fsdp=True, routing_backend="triton", **small)
    script = tmp_path / "run.py"
    script.write_text("import json, sys\nfrom mhar_probe.train import TrainConfig, train\n"
                      "train(TrainConfig.from_dict(json.loads(sys.argv[1])))\n")
    from dataclasses import asdict

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           "29671", str(script), json.dumps(asdict(cfg))], env=env, timeout=600,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = read_metrics(tmp_path / "one" / "metrics.jsonl"), read_metrics(tmp_path / "two" / "metrics.jsonl")
    assert [m["step"] for m in one] == [m["step"] for m in two] and len(one) == 3
    for a, b in zip(one, two):
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5), (a["step"], key)
