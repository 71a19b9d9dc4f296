"""Mid-training (`mhar cpt`): identity at step 0, z-loss, decay groups, EMA, schedule, exact
resume, and DDP / FSDP2 (two gloo processes) against one process -- on tiny converted models."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from mhar_probe.convert import convert_checkpoint
from mhar_probe.cpt import CPTConfig, CPTTrainer, WeightEMA, cpt, cpt_lr_at, decay_split, z_loss
from mhar_probe.cli.cpt import main as cpt_main
from mhar_probe.runfiles import read_metrics
from mhar_probe.train import batch_indices

RUN = dict(steps=4, seq_len=32, batch_size=4, eval_every=2, eval_batches=1, corpus_max_bytes=150_000,
           lr=3e-3, warmup=1, progress=False, checkpoint_every=2)
ARGS = ["--steps", "4", "--seq-len", "32", "--batch-size", "4", "--eval-every", "2", "--eval-batches", "1",
        "--corpus-max-bytes", "150000", "--lr", "3e-3", "--warmup", "1", "--checkpoint-every", "2",
        "--no-progress"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Tiny random Qwen3 (tied, no biases) and Llama (untied, attention biases) with the
    embedded corpus's BPE tokenizer, each converted to the delta form."""
    from mhar_probe.data import get_tokenizer, load_corpus

    root = tmp_path_factory.mktemp("cpt-models")
    os.environ["MHAR_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "mhar-cache")
    tok = get_tokenizer(load_corpus(max_bytes=150_000), vocab_size=512)
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    bases = {"qwen3": Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, tie_word_embeddings=True)),
             "llama": LlamaForCausalLM(LlamaConfig(**common, attention_bias=True, tie_word_embeddings=False))}
    out = {}
    for name, model in bases.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        convert_checkpoint(root / name, root / f"{name}-delta", heads=4, num_blocks=2)
        out[name], out[f"{name}-delta"] = root / name, root / f"{name}-delta"
    return out


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def curve(run: Path) -> list[tuple]:
    return [(m["step"], m.get("loss"), m.get("val_loss"), m.get("z_loss")) for m in read_metrics(run / "metrics.jsonl")]


# ---------------------------------------------------------------------------- pieces
def test_schedule_rewarms_from_zero_then_decays_to_floor():
    lin = CPTConfig(steps=110, lr=4e-4, min_lr=4e-6, warmup=10)
    assert cpt_lr_at(0, lin) == 0.0 and cpt_lr_at(5, lin) == pytest.approx(2e-4)
    assert cpt_lr_at(10, lin) == pytest.approx(4e-4)
    assert cpt_lr_at(60, lin) == pytest.approx(4e-6 + (4e-4 - 4e-6) * 0.5)
    assert cpt_lr_at(110, lin) == pytest.approx(4e-6)
    cos = CPTConfig(steps=110, lr=4e-4, warmup=10, decay="cosine")  # default floor lr / 100
    assert cpt_lr_at(35, cos) == pytest.approx(4e-6 + (4e-4 - 4e-6) * 0.5 * (1 + math.cos(math.pi / 4)))
    assert cpt_lr_at(110, cos) == pytest.approx(4e-6)


def test_z_loss_against_float64_reference():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)) * 4 + 7
    x = logits.double()
    m = x.max(-1, keepdim=True).values
    z = (m.squeeze(-1) + (x - m).exp().sum(-1).log())  # log sum exp, shifted
    assert z_loss(logits, 1e-4).item() == pytest.approx(1e-4 * (z ** 2).mean().item(), rel=1e-6)


def _reference_no_decay(name: str, tied: bool) -> bool:
    """Independent rule by name: embeddings (and a tied head), norms, biases, routing."""
    return (name == "null_source" or name.startswith("sites.") or "embed_tokens" in name
            or name.endswith(".bias") or "norm" in name.split(".")[-2] or (tied and "lm_head" in name))


@pytest.mark.parametrize("name", ["qwen3-delta", "llama-delta", "llama"])
def test_weight_decay_groups_against_names(models, name):
    model = AutoModelForCausalLM.from_pretrained(models[name])
    tied = bool(model.config.tie_word_embeddings)
    decay, keep = decay_split(model)
    names = [n for n, _ in model.named_parameters()]
    assert sorted(n for n, _ in decay + keep) == sorted(names)
    assert {n for n, _ in keep} == {n for n in names if _reference_no_decay(n, tied)}
    assert any(n.endswith(".bias") for n, _ in keep) == name.startswith("llama")  # Llama built with biases
    assert any("lm_head" in n for n, _ in decay) == (not tied)  # an untied head is a matrix: decayed


def test_ema_update_closed_form_and_swap():
    lin = torch.nn.Linear(3, 2)
    beta = 0.9
    thetas = [lin.weight.detach().clone()]
    ema = WeightEMA(lin, beta)
    for k in range(5):
        with torch.no_grad():
            lin.weight.add_(torch.full_like(lin.weight, 0.5 * (k + 1)))
        thetas.append(lin.weight.detach().clone())
        ema.update()
    n = len(thetas) - 1  # ema_n = beta^n theta_0 + sum_i (1 - beta) beta^(n - i) theta_i
    expected = beta ** n * thetas[0] + sum((1 - beta) * beta ** (n - i) * thetas[i] for i in range(1, n + 1))
    torch.testing.assert_close(ema.shadow["weight"], expected)
    raw = lin.weight.detach().clone()
    ema.swap()
    torch.testing.assert_close(lin.weight.detach(), expected)
    ema.swap()
    torch.testing.assert_close(lin.weight.detach(), raw)


# ---------------------------------------------------------------------------- runs
@pytest.mark.parametrize("base", ["qwen3", "llama"])
def test_first_step_identity_and_objective_against_reference(models, tmp_path, base):
    """Converted and control see the same first batch and give the same loss; the logged loss
    and z-loss equal an independent computation with the plain base model."""
    delta = cpt(CPTConfig(src=str(models[f"{base}-delta"]), out=str(tmp_path / "delta"), **{**RUN, "steps": 2}))
    control = cpt(CPTConfig(src=str(models[base]), out=str(tmp_path / "control"), control=True,
                            **{**RUN, "steps": 2}))
    assert delta["first_step_loss"] == control["first_step_loss"]
    assert delta["initial_val_loss"] == control["initial_val_loss"]
    trainer = CPTTrainer(CPTConfig(src=str(models[base]), out=str(tmp_path / "probe"), control=True, **RUN))
    rows = trainer.train_rows[batch_indices(0, 4, len(trainer.train_rows), 42)]
    ref = AutoModelForCausalLM.from_pretrained(models[base]).eval()
    with torch.no_grad():
        logits = ref(rows[:, :-1]).logits.double()
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
    zsq = torch.logsumexp(logits, -1).square().mean()
    first = read_metrics(tmp_path / "delta" / "metrics.jsonl")[1]
    assert first["loss"] == pytest.approx(ce.item(), rel=1e-5)
    assert first["z_loss"] == pytest.approx(1e-4 * zsq.item(), rel=1e-5)
    assert first["lr"] == 0.0  # cold start: the first update only fills AdamW's moments
    groups = trainer.optimizer.param_groups
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]


def test_run_dir_ema_and_exact_resume(models, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    cpt(CPTConfig(src=str(models["qwen3-delta"]), out=str(full), **RUN))
    cpt(CPTConfig(src=str(models["qwen3-delta"]), out=str(cut), stop_after=3, **RUN))
    assert not (cut / "summary.json").exists()
    assert json.loads((cut / "checkpoint" / "state.json").read_text())["step"] == 3
    summary = cpt(CPTConfig(src=str(models["qwen3-delta"]), out=str(cut), resume=True, **RUN))
    assert curve(cut) == curve(full)
    for sub in ("", "ema/"):  # raw and EMA weights resume bit-exactly
        a, b = load_file(full / sub / "model.safetensors"), load_file(cut / sub / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in ("config.json", "tokenizer.json", "summary.json", "ema/config.json", "ema/tokenizer.json"):
        assert (full / name).exists(), name
    # the EMA is the recurrence over the raw weights: after 4 steps from the converted weights,
    # gates (0 at conversion) are far nearer 0 in the EMA than in the raw model
    raw = AutoModelForCausalLM.from_pretrained(full)
    ema = AutoModelForCausalLM.from_pretrained(full / "ema")
    g_raw = torch.stack([s.gate.detach() for s in raw.sites]).abs().max()
    g_ema = torch.stack([s.gate.detach() for s in ema.sites]).abs().max()
    assert 0 < g_ema < 0.01 * g_raw
    assert summary["final_ema_val_loss"] is not None and summary["kind"] == "delta"


def _torchrun(args: list[str], port: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "mhar_probe.cli", "cpt", *args]
    proc = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _close(a: list[tuple], b: list[tuple], rel: float) -> None:
    assert [r[0] for r in a] == [r[0] for r in b]
    for ra, rb in zip(a, b):
        for x, y in zip(ra[1:], rb[1:]):
            assert (x is None) == (y is None)
            if x is not None:
                assert y == pytest.approx(x, rel=rel, abs=1e-6)


def test_ddp_and_fsdp_two_processes_match_one(models, tmp_path):
    """Same global batch: DDP, and FSDP2 + activation checkpointing interrupted and resumed
    under torchrun, follow the one-process loss curve."""
    src = str(models["qwen3-delta"])
    cpt(CPTConfig(src=src, out=str(tmp_path / "one"), **RUN))
    _torchrun([src, "--out", str(tmp_path / "ddp"), *ARGS], 29641)
    _close(curve(tmp_path / "one"), curve(tmp_path / "ddp"), rel=1e-4)
    fsdp = [src, "--out", str(tmp_path / "fsdp"), "--fsdp", "--checkpointing", *ARGS]
    _torchrun([*fsdp, "--steps", "2"], 29642)  # a shorter run, then continued: resume under FSDP2
    state = json.loads((tmp_path / "fsdp" / "summary.json").read_text())
    assert state["fsdp"] and state["world_size"] == 2 and state["checkpointing"]
    _torchrun([*fsdp, "--resume"], 29643)
    ours = curve(tmp_path / "fsdp")
    ref = curve(tmp_path / "one")
    assert len(ours) == len(ref)
    # steps 1-2 of the 2-step run had a different schedule after warm-up; compare step 0 exactly
    # and the resumed tail against a one-process run resumed the same way
    cpt(CPTConfig(src=src, out=str(tmp_path / "one-2"), **{**RUN, "steps": 2}))
    cpt(CPTConfig(src=src, out=str(tmp_path / "one-2"), resume=True, **RUN))
    _close(curve(tmp_path / "one-2"), ours, rel=1e-4)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "fsdp")
    assert type(loaded).__name__ == "MHARDeltaForCausalLM"


def test_cli_errors_one_line_exit_2(models, tmp_path, capsys):
    rc = cpt_main([str(models["qwen3"]), "--out", str(tmp_path / "r"), *ARGS])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--control" in err and len(err.splitlines()) == 1
    out = tmp_path / "kept"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    rc = cpt_main([str(models["qwen3-delta"]), "--out", str(out), *ARGS])
    assert rc == 2 and "--overwrite" in capsys.readouterr().err and (out / "precious.txt").exists()
    for bad, needle in ((["--ema", "1.5"], "--ema"), (["--seq-len", "4096"], "position limit"),
                        (["--min-lr", "1"], "--min-lr")):
        try:  # (a flag's own check is argparse's refusal: it exits)
            rc = cpt_main([str(models["qwen3-delta"]), "--out", str(tmp_path / "x"), *ARGS, *bad])
        except SystemExit as exc:
            rc = exc.code
        err = capsys.readouterr().err.strip()
        assert rc == 2 and needle in err and len(err.splitlines()) == 1, err
    assert cpt_main([str(tmp_path / "nope"), "--out", str(tmp_path / "y"), *ARGS]) == 2


def test_cli_time_limit_stops_cleanly_and_resume_finishes(models, tmp_path, capsys):
    """`mhar cpt --time-limit` counts from the start of the command: a limit already past stops the
    run after step 1 (not a checkpoint step: the stop writes one), exit 0, one line saying so;
    --resume finishes it with its EMA. A limit of 0 is refused in one line (exit 2)."""
    src, out = str(models["qwen3-delta"]), tmp_path / "r"
    assert cpt_main([src, "--out", str(out), *ARGS, "--time-limit", "1e-9"]) == 0
    assert capsys.readouterr().out.strip() == (f"{out}: stopped at the time limit after step 1, with a "
                                               f"checkpoint there; rerun with --resume to continue")
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 1
    assert not (out / "summary.json").exists()
    summary = cpt(CPTConfig(src=src, out=str(out), resume=True, **RUN))
    assert summary["finished"] and summary["steps"] == 4 and (out / "ema" / "model.safetensors").exists()
    capsys.readouterr()  # (the resumed run's loading bars)
    with pytest.raises(SystemExit) as exc:
        cpt_main([src, "--out", str(tmp_path / "x"), *ARGS, "--time-limit", "0"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "--time-limit: 0 must be a finite number above 0" in err
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------------------- compiled sublayers
def test_compile_sublayers_reaches_the_cpt_trainer(models, tmp_path, capsys):
    """`mhar cpt` takes `mhar train`'s --compile-sublayers: forced on a CPU, the trainer refuses it
    in one line (inductor's CPU code is not what the flag is for); off, the run records it."""
    src = str(models["qwen3-delta"])
    rc = cpt_main([src, "--out", str(tmp_path / "on"), *ARGS, "--compile-sublayers"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--compile-sublayers needs a CUDA device" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "on").exists()
    assert cpt_main([src, "--out", str(tmp_path / "off"), *ARGS, "--no-compile-sublayers"]) == 0
    assert json.loads((tmp_path / "off" / "train_config.json").read_text())["compile_sublayers"] is False
    assert json.loads((tmp_path / "off" / "summary.json").read_text())["compiled_sublayers"] is False


@pytest.mark.parametrize("kind,backend", [
    ("qwen3-delta", "aot_eager"),
    pytest.param("llama", "aot_eager", marks=pytest.mark.slow),  # the plain control (~10 s more)
    pytest.param("qwen3-delta", "inductor", marks=pytest.mark.slow),  # 1-4 minutes of CPU code generation
    pytest.param("llama", "inductor", marks=pytest.mark.slow),
])
def test_a_compiled_sublayer_cpt_run_gives_the_eager_losses(models, tmp_path, monkeypatch, kind, backend):
    """The CPT trainer with compiled sublayers trains the converted model and the plain control
    to the same losses as eager; every layer's attention and MLP module is compiled, the routing
    norms are not. On the CPU the device check is lifted for the test; "aot_eager" traces and
    splits autograd as inductor does, without generating code (inductor's own CPU code: slow)."""
    import mhar_probe.train as train_module
    from mhar_probe.compiled import compile_sublayers, decoder_layers, sublayers_compiled

    monkeypatch.setattr(train_module, "choose_compile_sublayers", lambda requested, device: bool(requested))
    monkeypatch.setattr(train_module, "compile_sublayers", lambda model: compile_sublayers(model, backend=backend))
    torch._dynamo.reset()
    curves, trainers = {}, {}
    for compiled in (False, True):
        out = tmp_path / f"compiled-{compiled}"
        cfg = CPTConfig(src=str(models[kind]), out=str(out), control=kind == "llama", compile_sublayers=compiled,
                        **{**RUN, "steps": 2})
        trainers[compiled] = CPTTrainer(cfg)
        summary = trainers[compiled].run()
        assert summary["compiled_sublayers"] is compiled
        curves[compiled] = curve(out)
    model = trainers[True].model
    assert sublayers_compiled(model) and not sublayers_compiled(trainers[False].model)
    assert all(layer.input_layernorm._compiled_call_impl is None for layer in decoder_layers(model))
    assert [c[0] for c in curves[True]] == [c[0] for c in curves[False]] == [0, 1, 2]
    for mine, ref in zip(curves[True], curves[False]):
        for a, b in zip(mine[1:], ref[1:]):
            assert (a is None) == (b is None) and (a is None or a == pytest.approx(b, rel=1e-5)), (mine, ref)
