"""The readers that check each file kind (`mhar_probe.runfiles`, `mhar_probe.jsonl`,
`mhar_probe.model.saved`, `mhar_probe.capture.checks`), against files written by hand."""

from __future__ import annotations

import json
import math
import struct
import typing
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mhar_probe.errors import UserError
from mhar_probe.jsonl import read_jsonl
from mhar_probe.model.config import PRESETS, SIZE_LIMITS, ConfigError, MHARConfig
from mhar_probe.model.saved import check_config_values, weight_index
from mhar_probe.runfiles import (TRAIN_CONFIG_TYPES, RunFileError, check_metrics_row, read_json, read_state,
                                 read_summary, read_train_config)


def test_train_config_types_are_the_ones_train_config_declares():
    from mhar_probe.train import TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    assert {k: hints[k] for k in TRAIN_CONFIG_TYPES} == TRAIN_CONFIG_TYPES


def test_a_saved_train_config_reads_back(tmp_path):
    from dataclasses import asdict

    from mhar_probe.train import TrainConfig

    path = tmp_path / "train_config.json"
    path.write_text(json.dumps({k: v for k, v in asdict(TrainConfig()).items() if k != "explicit"}))
    assert read_train_config(path)["lr"] == TrainConfig().lr


@pytest.mark.parametrize("doc, needle", [
    ({"seq_len": "long"}, "seq_len = 'long' is not of type"), ({"steps": 0}, "steps = 0 must be at least 1"),
    ({"lr": -1.0}, "lr = -1.0 must be above 0"), ({"corpus": 5}, "corpus = 5"),
    ({"corpus_max_bytes": -2}, "must not be negative"), ({"steps": True}, "steps = True")])
def test_train_config_fields_are_typed_and_in_range(tmp_path, doc, needle):
    path = tmp_path / "train_config.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(RunFileError, match=str(path)) as exc:
        read_train_config(path)
    assert needle in str(exc.value)


@pytest.mark.parametrize("step, ok", [(0, True), (3, True), (4, False), (-1, False), ("2", False), (2.0, False),
                                      (True, False), (None, False)])
def test_checkpoint_step_is_an_integer_within_the_run(tmp_path, step, ok):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"step": step, "tokens": 0, "flops": 0.0}))
    if ok:
        assert read_state(path, steps=3)["step"] == step
    else:
        with pytest.raises(RunFileError, match="step = "):
            read_state(path, steps=3)


def test_checkpoint_tokens_must_be_finite(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"step": 1, "tokens": NaN, "flops": 0}')
    with pytest.raises(RunFileError, match="not valid JSON"):  # NaN is no JSON number
        read_state(path)
    path.write_text('{"step": 1, "tokens": -5, "flops": 0}')
    with pytest.raises(RunFileError, match="tokens = -5"):
        read_state(path)


def test_binary_garbage_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": 1}\n\xff\xfe garbage\n')
    with pytest.raises(UserError) as exc:
        list(read_jsonl(path, UserError))
    assert str(exc.value).startswith(f"{path}:3: not UTF-8 text (byte 0xff")
    doc = tmp_path / "summary.json"
    doc.write_bytes(b'{\n "a": 1,\n "b": "\xc3\x28"\n}')
    with pytest.raises(RunFileError, match=rf"^{doc}:3: not UTF-8 text \(byte 0xc3"):
        read_json(doc)


def test_summary_types(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"finished": "yes"}))
    with pytest.raises(RunFileError, match="finished = 'yes'"):
        read_summary(path)
    path.write_text(json.dumps({"finished": False, "failed": "the loss is nan", "steps": 3}))
    assert read_summary(path)["steps"] == 3


@pytest.mark.parametrize("row, needle", [
    ({"step": 1, "val_loss": 1e308}, "'val_loss' = 1e+308 is outside"),
    ({"step": 1, "flops": 1e308}, "'flops' = 1e+308 is outside"),
    ({"step": 1, "val_loss": math.nan}, "'val_loss' = nan"),
    ({"step": 1, "flops": -1.0}, "'flops' = -1.0"),
    ({"step": "1"}, "'step' must be an integer"),
    ({"step": 1, "val_loss": "low"}, "'val_loss' must be a number"),
    ([1, 2], "expected an object")])
def test_metrics_rows_are_refused_with_their_value(row, needle):
    with pytest.raises(RunFileError, match="m.jsonl:7: ") as exc:
        check_metrics_row(row, "m.jsonl:7")
    assert needle in str(exc.value)


def test_a_diverged_runs_nan_training_loss_is_kept():
    assert check_metrics_row({"step": 5, "loss": math.nan, "grad_norm": math.inf}, "m:1")["step"] == 5


# Llama 3.1 405B and DeepSeek-V3, two of the largest released decoders (their config.json): real
# models must stay inside the limits
LARGE_MODELS = [
    dict(hidden_size=16384, num_hidden_layers=126, num_attention_heads=128, num_key_value_heads=8,
         intermediate_size=53248, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5),
    dict(hidden_size=7168, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
         intermediate_size=18432, vocab_size=129280, max_position_embeddings=163840, rms_norm_eps=1e-6),
]


@pytest.mark.parametrize("doc", LARGE_MODELS + [dict(v, max_position_embeddings=2 * v["seq_len"])
                                                for v in ({k: x for k, x in p.items()} for p in PRESETS.values())])
def test_real_model_sizes_pass(doc):
    check_config_values({k: v for k, v in doc.items() if k != "seq_len"}, "config.json")


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 10**12), ("hidden_size", 10**9),
                                          ("vocab_size", 10**8), ("hidden_size", "wide"), ("num_hidden_layers", 0),
                                          ("intermediate_size", 2.5), ("num_attention_heads", True)])
def test_absurd_sizes_are_refused_on_the_raw_file_and_the_config(field, value):
    with pytest.raises(ConfigError, match=f"^cfg.json: {field}="):
        check_config_values({field: value}, "cfg.json")
    with pytest.raises(ConfigError, match=f"^{field}="):
        MHARConfig(**{field: value})
    with pytest.raises(ConfigError, match=f"text_config|{field}="):  # a converted model's nested base config
        check_config_values({"text_config": {field: value}}, "cfg.json")


def test_every_size_field_has_a_limit():
    assert set(MHARConfig.POSITIVE_INT_FIELDS) == set(SIZE_LIMITS)


def test_weight_headers_catch_truncation_and_list_dtypes(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.zeros(4, 4), "b": torch.zeros(3, dtype=torch.int32)}, path)
    index = weight_index(tmp_path)
    assert index["a"][:2] == ("F32", (4, 4)) and index["b"][:2] == ("I32", (3,))
    data = path.read_bytes()
    path.write_bytes(data[:-8])  # the last tensor's bytes cut short
    with pytest.raises(ConfigError, match="outside the file's .* data bytes"):
        weight_index(tmp_path)
    path.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ConfigError, match="header of 1000000000000 bytes"):
        weight_index(tmp_path)
    path.write_bytes(b"\x01\x02")
    with pytest.raises(ConfigError, match="truncated"):
        weight_index(tmp_path)


def test_weight_index_refuses_a_shard_outside_the_folder(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(ConfigError, match="not in"):
        weight_index(tmp_path)


def test_routing_dataset_checks(tmp_path):
    import numpy as np
    import xarray as xr

    from mhar_probe.capture.checks import check_routing_dataset
    from mhar_probe.capture.errors import CaptureError

    S, N, H = 3, 3, 2
    w = np.full((S, N, H), np.nan)
    for s in range(S):
        w[s, : s + 1] = 1.0 / (s + 1)
    ds = xr.Dataset({"weight_mean": (("site", "source", "head"), w)},
                    coords={"site": np.arange(S), "source": np.arange(N), "head": np.arange(H),
                            "site_num_sources": ("site", np.arange(1, S + 1)),
                            "site_num_heads": ("site", np.full(S, H))})
    check_routing_dataset(ds, Path("r.nc"))  # NaN only where a site cannot see: valid
    broken = ds.copy(deep=True)
    broken["weight_mean"][0, 0, 0] = np.nan
    with pytest.raises(CaptureError, match="r.nc: weight_mean holds 1 NaN"):
        check_routing_dataset(broken, Path("r.nc"))
    with pytest.raises(CaptureError, match="dimension 'head' is missing"):
        check_routing_dataset(ds.rename({"head": "h"}), Path("r.nc"))
    with pytest.raises(CaptureError, match="has dims"):
        check_routing_dataset(ds.assign(weight_mean=ds["weight_mean"].transpose("head", "source", "site")),
                              Path("r.nc"))
    with pytest.raises(CaptureError, match="site_num_sources"):
        check_routing_dataset(ds.assign_coords(site_num_sources=("site", np.array([1, 2, 9]))), Path("r.nc"))
    with pytest.raises(CaptureError, match="outside \\[0, 1\\]"):
        check_routing_dataset(ds.assign(weight_mean=ds["weight_mean"] * 5), Path("r.nc"))
