"""`mhar import`: checkpoints in the paper authors' format computed exactly by our models.

Each supported mode: a tiny authors-format checkpoint with random weights (convert/tiny_authors.py)
is imported and loaded through the workbench's own loader, and its logits must match the float64
reference written from the paper's equations and the authors' layout (max |dlogit| <= 1e-5 in
fp32); greedy generation with and without the KV cache must equal the reference's. Refusals are
one line each; shards are read one at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from authors_format import (authors_config, base_weights, plain_config, random_weights, reference_greedy, reference_logits,
                            write_checkpoint)
from mhar_probe.convert.authors import import_checkpoint, parameters_on_meta, read_shards
from mhar_probe.cli import main
from mhar_probe.model.saved import load_model

CASES = [  # (base, mode, gate, shards)
    ("llama", "delta_mh", "bias", 2),  # the released model's form (Marin-8B is a Llama-3.1)
    ("llama", "delta_mh", "sigmoid_scalar", 1),
    ("llama", "delta_mh", "learnable_alpha", 2),  # h = partial + alpha * routed, the paper's description
    ("llama", "delta_block", "learnable_alpha", 1),
    ("qwen3", "delta_mh", "bias", 1),
    ("qwen3", "delta_block", "bias", 3),
    ("qwen3", "full", "bias", 1),
    ("qwen3", "full_mh", "bias", 2),
    ("qwen3", "full_hw", "bias", 1),
]


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def imported(tmp_path: Path, cfg: dict, weights: dict, shards: int = 1):
    src = write_checkpoint(tmp_path / "src", cfg, weights, shards=shards)
    with pytest.warns(UserWarning, match="no tokenizer"):
        import_checkpoint(src, tmp_path / "dst")
    return load_model(tmp_path / "dst").eval()


@pytest.mark.parametrize("base,mode,gate,shards", CASES)
def test_import_matches_float64_reference(tmp_path, base, mode, gate, shards):
    cfg = authors_config(base, mode, gate=gate)
    weights = random_weights(cfg, seed=len(mode) + shards)
    model = imported(tmp_path, cfg, weights, shards)
    as_stored = {k: v.float().double() for k, v in weights.items()}  # the fp32 values on disk
    ids = torch.randint(0, cfg["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits.double()
    ref = reference_logits(cfg, as_stored, ids)
    assert (logits - ref).abs().max().item() <= 1e-5
    assert ref.abs().max().item() > 1.0  # logits of a size where a wrong mapping shows
    prompt = ids[:1, :6]
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=5, do_sample=False, use_cache=True)
        uncached = model.generate(prompt, max_new_tokens=5, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached, reference_greedy(cfg, as_stored, prompt, 5))


def test_provenance_records_source_mode_and_hashes(tmp_path):
    import hashlib

    cfg = authors_config("llama", "delta_mh")
    model = imported(tmp_path, cfg, random_weights(cfg), shards=2)
    record = json.loads((tmp_path / "dst" / "import.json").read_text())
    assert record["source"] == str((tmp_path / "src").resolve()) and record["hub_id"] is None
    assert record["attnres_mode"] == "delta_mh" and record["imported_as"]["method"] == "delta"
    files = sorted((tmp_path / "src").glob("*.safetensors"))
    assert record["weights_sha256"] == {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    assert model.config.delta_sources == "boundary_chain" and model.config.null_per_site


def refused(capsys, tmp_path: Path, cfg: dict, weights: dict, *expected: str) -> None:
    """`mhar import` (the CLI's own entry point) exits 2 with one line holding `expected`, writing nothing."""
    src = write_checkpoint(tmp_path / "src", cfg, weights)
    capsys.readouterr()
    status = main(["import", str(src), str(tmp_path / "dst")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("mhar import: error: ")
    for text in expected:
        assert text in lines[0], lines[0]
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("mode", ["block", "block_mh", "delta_v", "full_split"])
def test_unsupported_modes_are_refused_naming_the_supported(capsys, tmp_path, mode):
    cfg = authors_config("qwen3", mode)
    refused(capsys, tmp_path, cfg, random_weights(authors_config("qwen3", "full")), f"attnres_mode {mode!r}",
            "delta_mh, delta_block, full, full_mh, full_hw")


def test_missing_extra_and_misshaped_tensors_are_one_line(capsys, tmp_path):
    cfg = authors_config("llama", "delta_mh")
    w = random_weights(cfg)
    gone = dict(w)
    del gone["model.layers.3.mlp_null_source"]
    refused(capsys, tmp_path / "a", cfg, gone, "missing", "model.layers.3.mlp_null_source")
    refused(capsys, tmp_path / "b", cfg, {**w, "model.layers.0.v_res_proj.weight": torch.zeros(1, 32)},
            "does not have", "v_res_proj")
    refused(capsys, tmp_path / "c", cfg, {**w, "model.layers.2.attn_res_proj.weight": torch.zeros(2, 32)},
            "model.layers.2.attn_res_proj.weight has shape [2, 32]", "[1, 32]")


@pytest.mark.parametrize("base,mode,over,text", [
    ("llama", "full_mh", {}, "only delta_mh and delta_block"),
    ("llama", "delta_block", {"null": False}, "without null sources"),
    ("llama", "delta_mh", {"gate": "sigmoid_vector"}, "attnres_gate_type 'sigmoid_vector'"),
    ("qwen3", "full", {"gate": "sigmoid_scalar"}, "replacement modes take only 'bias'"),
    ("qwen3", "full_mh", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_type 'linear'"),
    ("qwen3", "full_hw", {"num_key_value_heads": 1}, "one KV head"),
])
def test_checkpoints_our_models_cannot_express_are_refused(capsys, tmp_path, base, mode, over, text):
    cfg = authors_config(base, mode, **over)
    refused(capsys, tmp_path, cfg, {"model.embed_tokens.weight": torch.zeros(64, 32)}, text)


def test_shards_are_read_one_at_a_time_and_assigned_before_the_next(tmp_path):
    """The spy hands out one shard's tensors at a time; when the next shard is asked for, the
    loader has already taken every tensor of the last one (assigned into the model), so no two
    shards' tensors are ever held outside the model at once."""
    cfg = authors_config("llama", "delta_mh")
    src = write_checkpoint(tmp_path / "src", cfg, random_weights(cfg), shards=3)
    held: list[dict] = []
    left_at_next_read: list[int] = []

    def spy(files):
        for path, tensors in read_shards(files):
            left_at_next_read.append(sum(len(t) for t in held))
            held.append(tensors)
            yield path, tensors

    with pytest.warns(UserWarning, match="no tokenizer"):
        import_checkpoint(src, tmp_path / "dst", shards=spy)
    assert len(held) == 3 and left_at_next_read == [0, 0, 0]
    assert sum(len(t) for t in held) == 0


def test_parameters_on_meta_allocates_no_weights_but_real_buffers():
    from transformers import LlamaConfig, LlamaForCausalLM

    with parameters_on_meta():
        model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in authors_config("llama", "delta_mh").items()
                                                if not k.startswith(("attnres", "model_type", "arch"))}))
    assert all(p.device.type == "meta" for p in model.parameters())
    assert all(b.device.type == "cpu" for b in model.buffers())
    assert torch.nn.Linear(2, 2).weight.device.type == "cpu"  # restored after the block


def test_capture_of_a_delta_model_holds_one_sites_sources_at_a_time(tmp_path, monkeypatch):
    """Delta sites' sources are folded into the probe sums when the site's weights arrive: when a
    site hands over its sources, no earlier site's are still held (streaming at the 8B shape)."""
    from mhar_probe.capture import capture as capture_module
    from mhar_probe.capture import capture_routing

    cfg = authors_config("llama", "delta_mh")
    model = imported(tmp_path, cfg, random_weights(cfg))
    held_before: list[int] = []
    keep = capture_module._Collector._keep_sources

    def spy(self, act, hook):
        held_before.append(len(self.sources))
        keep(self, act, hook)

    monkeypatch.setattr(capture_module._Collector, "_keep_sources", spy)
    ids = torch.randint(0, cfg["vocab_size"], (2, 3, 16), generator=torch.Generator().manual_seed(0))
    ds = capture_routing(model, list(ids), draws=2, progress=False)
    assert len(held_before) == 2 * (2 * cfg["num_hidden_layers"] + 1) and set(held_before) == {0}
    assert ds.attrs["recompute_max_abs_err"] < 1e-5 and int(ds.attrs["tokens_seen"]) == 2 * 3 * 16


def test_the_control_arm_and_other_checkpoints_are_refused_in_one_line(capsys, tmp_path):
    """A model_type that is neither the authors' nor a plain base names the supported ones; the plain
    control is checked like the routed arm (a mis-shaped base tensor, a routing tensor it cannot
    have, an integer tensor); a folder without config.json is named."""
    cfg = authors_config("llama", "delta_mh")
    w = random_weights(cfg)
    plain, base = plain_config(cfg), base_weights(w)
    refused(capsys, tmp_path / "a", {**plain, "model_type": "mistral"}, base, "model_type 'mistral'",
            "delta_mh, delta_block, full, full_mh, full_hw", "plain llama or qwen3")
    refused(capsys, tmp_path / "b", plain, {**base, "model.layers.1.self_attn.k_proj.weight": torch.zeros(32, 32)},
            "model.layers.1.self_attn.k_proj.weight has shape [32, 32]", "[16, 32]")
    refused(capsys, tmp_path / "c", plain, {**base, "model.layers.0.attn_res_proj.weight": torch.zeros(1, 32)},
            "(llama plain)", "does not have", "model.layers.0.attn_res_proj.weight")
    from safetensors.torch import save_file

    src = write_checkpoint(tmp_path / "d", plain, base)  # (which writes float32)
    save_file({**{k: v.float() for k, v in base.items()}, "model.norm.weight": torch.ones(32, dtype=torch.int64)},
              str(src / "model.safetensors"))
    capsys.readouterr()
    assert main(["import", str(src), str(tmp_path / "dst")]) == 2
    assert capsys.readouterr().err.strip() == (f"mhar import: error: {src / 'model.safetensors'}: tensor "
                                               f"model.norm.weight is I64, not a floating-point type")
    (tmp_path / "e").mkdir()
    capsys.readouterr()
    assert main(["import", str(tmp_path / "e"), str(tmp_path / "dst")]) == 2
    assert capsys.readouterr().err.strip() == f"mhar import: error: {tmp_path / 'e'} is not a model directory (no config.json)"
