"""The routing backend is a run-time setting of a model, not a field of its config:
`set_routing_backend` checks it against the model's reads and sets it on every module that
routes; configs old and new load, and new saves do not name a backend."""

from __future__ import annotations

import json
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported

from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

import mhar_probe  # noqa: E402,F401  (registers the Auto classes)
from mhar_probe.convert import convert_model  # noqa: E402
from mhar_probe.model import ConfigError, MHARConfig, MHARForCausalLM  # noqa: E402
from mhar_probe.model import routing  # noqa: E402
from mhar_probe.model.routing import (ListSourceStack, RoutingBackend, choose_backend,  # noqa: E402
                                      routing_backend, routing_backend_of, set_routing_backend)
from mhar_probe.train import TrainConfig, train  # noqa: E402

SMALL = dict(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, routing_heads=4)
IDS = torch.arange(1, 13).reshape(2, 6)


def converted() -> torch.nn.Module:
    torch.manual_seed(0)
    base = Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, intermediate_size=64))
    return convert_model(base, num_blocks=2, heads=4)


@pytest.fixture
def spy(monkeypatch) -> list[str]:
    """Backend 'compile' replaced by the eager reference that logs each routing call."""
    calls: list[str] = []

    def route(*args, **kwargs):
        calls.append("route")
        return routing.route_reference(*args, **kwargs)

    monkeypatch.setitem(routing._BACKENDS, "compile", RoutingBackend(
        "compile", route, lambda cap, params=None: ListSourceStack(cap, route)))
    return calls


@pytest.mark.parametrize("name", ["mhar", "mhar_hw", "delta", "converted"])
def test_every_site_routes_with_the_runtime_setting(name, spy):
    model = converted() if name == "converted" else MHARForCausalLM(MHARConfig(residual_method=name, **SMALL))
    model.eval()
    calls = 2 * 2 + 1 + (2 * (SMALL["num_key_value_heads"] - 1) if name == "mhar_hw" else 0)  # one per query
    with torch.no_grad():
        reference = model(IDS).logits
        assert routing_backend_of(model) == "eager" and spy == []
        set_routing_backend(model, "compile")
        torch.testing.assert_close(model(IDS).logits, reference, rtol=0, atol=0)
        assert len(spy) == calls  # every routing call of every site went through the setting
        set_routing_backend(model, "eager")
        model(IDS)
        assert len(spy) == calls
        with routing_backend(model, "compile") as used:
            assert used == "compile"
            model(IDS)
        assert len(spy) == 2 * calls and routing_backend_of(model) == "eager"  # restored after the block


def test_an_old_run_directory_naming_a_backend_loads_and_is_saved_without_it(tmp_path):
    for name, model in (("mhar", MHARForCausalLM(MHARConfig(residual_method="delta", **SMALL))),
                        ("converted", converted())):
        model.save_pretrained(tmp_path / name)
        path = tmp_path / name / "config.json"
        saved = json.loads(path.read_text())
        assert "routing_backend" not in saved  # new saves do not write it
        path.write_text(json.dumps({**saved, "routing_backend": "triton"}))  # as runs were saved on a GPU
        with pytest.warns(UserWarning, match=r"routing_backend='triton' in a model config is ignored"):
            loaded = AutoModelForCausalLM.from_pretrained(tmp_path / name).eval()
        assert routing_backend_of(loaded) == "eager"  # read and ignored: the backend is chosen at run time
        with torch.no_grad():
            torch.testing.assert_close(loaded(IDS).logits, model.eval()(IDS).logits, rtol=0, atol=0)
        loaded.save_pretrained(tmp_path / f"{name}-again")
        assert "routing_backend" not in json.loads((tmp_path / f"{name}-again" / "config.json").read_text())


def test_choose_backend_defaults_by_device_and_refuses_unknown_names():
    assert choose_backend("cpu") == "eager" and choose_backend(torch.device("cpu"), "compile") == "compile"
    with pytest.raises(ConfigError, match="unknown routing backend 'cuda-magic'; choose one of eager, compile"):
        choose_backend("cpu", "cuda-magic")
    with pytest.raises(ConfigError, match="unknown routing backend 'cuda-magic'"):
        set_routing_backend(MHARForCausalLM(MHARConfig(residual_method="mhar", **SMALL)), "cuda-magic")


def test_triton_refuses_a_head_count_its_kernels_cannot_route_when_configured():
    pytest.importorskip("triton")
    model = MHARForCausalLM(MHARConfig(residual_method="delta", **{**SMALL, "routing_heads": 3}))
    with pytest.raises(ConfigError) as err:
        set_routing_backend(model, "triton")
    assert "power-of-two head count, got H=3" in str(err.value) and "\n" not in str(err.value)
    assert routing_backend_of(model) == "eager"  # left as it was
    hw = MHARForCausalLM(MHARConfig(residual_method="mhar_hw", **{**SMALL, "routing_heads": 2}))
    assert routing_backend_of(set_routing_backend(hw, "triton")) == "triton"  # G single-head reads + H = 2


def test_training_records_the_backend_as_a_run_option_not_in_the_model_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "run"
    train(TrainConfig(out=str(out), preset="tiny", method="delta", steps=1, seq_len=16, batch_size=2,
                      eval_every=1, eval_batches=1, vocab_size=300, corpus_max_bytes=60_000, progress=False,
                      extra=dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)))
    assert json.loads((out / "train_config.json").read_text())["routing_backend"] == "eager"
    assert "routing_backend" not in json.loads((out / "config.json").read_text())
