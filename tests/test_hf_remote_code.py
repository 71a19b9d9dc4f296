"""Saved runs and converted models load in any Hugging Face tool: each carries `auto_map` and the
model code it needs, so `from_pretrained(path, trust_remote_code=True)` works in a fresh
interpreter that never imports mhar_probe (checked by blocking the import), with logits equal
to the in-process model's bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

import mhar_probe  # noqa: F401  (registers the Auto classes for the in-process side)
from mhar_probe.convert import convert_checkpoint
from mhar_probe.model import METHODS, MHARConfig, MHARForCausalLM
from mhar_probe.parallel import save_hf_dir
from mhar_probe.train import TrainConfig, train

SMALL = dict(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64)
IDS = torch.arange(1, 25).reshape(2, 12) % 90 + 3

# The first lines of every script below: importing mhar_probe fails in that interpreter.
BLOCK_MHAR_PROBE = r"""
import importlib.abc, json, sys

class BlockMharProbe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mhar_probe" or name.startswith("mhar_probe."):
            raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, BlockMharProbe())
"""

# Runs in a fresh interpreter: mhar_probe cannot be imported there, so only the saved code can
# build the model. Loads each directory with trust_remote_code and saves its logits.
LOADER = BLOCK_MHAR_PROBE + r"""
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)  # as the in-process side: the CPU kernels' sums depend on the thread count
ids = torch.tensor(json.loads(sys.argv[1]))
for path in sys.argv[2:]:
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).eval()
    assert not [m for m in sys.modules if m.startswith("mhar_probe")]
    with torch.no_grad():
        logits = model(ids).logits
        generated = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
        # the last 5 tokens in one call after a cache of 7, with an all-ones mask (issue 32)
        cache = model(ids[:, :7], use_cache=True).past_key_values
        chunk = model(ids[:, 7:], past_key_values=cache, use_cache=True, attention_mask=torch.ones_like(ids)).logits
    save_file({"logits": logits.contiguous(), "generated": generated.contiguous(), "chunk": chunk.contiguous()},
              path + "/remote_out.safetensors")
    print(path, type(model).__module__, type(model).__name__)
"""


def load_remotely(*paths: Path) -> str:
    """Run LOADER on `paths` in a fresh interpreter (own module cache); returns its stdout."""
    home = paths[0].parent / "hf_home"
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", LOADER, json.dumps(IDS.tolist()), *map(str, paths)],
                          env=env, cwd=home.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def assert_same_as_in_process(path: Path) -> None:
    """Bit for bit, on one CPU thread in both processes (reduction order follows the thread count)."""
    local = AutoModelForCausalLM.from_pretrained(path).eval()  # through `import mhar_probe`
    remote = load_file(path / "remote_out.safetensors")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            assert torch.equal(remote["logits"], local(IDS).logits)
            assert torch.equal(remote["generated"], local.generate(IDS, max_new_tokens=4, do_sample=False,
                                                                   pad_token_id=0))
    finally:
        torch.set_num_threads(threads)


def randomise_routing(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for site in model.sites:
            site.query.copy_(torch.randn(site.query.shape, generator=g))
            if hasattr(site, "gate"):
                site.gate.fill_(0.5)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """A trained tiny run, every method through save_pretrained, the FSDP writer and a converted
    Qwen3; all loaded remotely in one subprocess."""
    root = tmp_path_factory.mktemp("remote")
    dirs: dict[str, Path] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))
        run = root / "run"
        train(TrainConfig(out=str(run), preset="tiny", method="mhar", seq_len=32, batch_size=4, steps=3,
                          eval_every=3, eval_batches=1, vocab_size=512, corpus_max_bytes=100_000,
                          progress=False))
        dirs["run"] = run
    for method in METHODS:
        torch.manual_seed(0)
        model = MHARForCausalLM(MHARConfig(residual_method=method, **SMALL))
        if method not in ("baseline", "hyper"):
            randomise_routing(model)
        model.save_pretrained(root / method)
        dirs[method] = root / method
    model = MHARForCausalLM(MHARConfig(residual_method="mhar", **SMALL))
    randomise_routing(model)
    triton_run = root / "trained_with_triton"  # as a GPU run saves it; no kernels where it is loaded
    model.save_pretrained(triton_run)
    edit = json.loads((triton_run / "config.json").read_text())
    (triton_run / "config.json").write_text(json.dumps({**edit, "routing_backend": "triton"}))
    dirs["trained_with_triton"] = triton_run
    save_hf_dir(root / "fsdp_writer", model.config, model.state_dict(), MHARForCausalLM, model.generation_config)
    dirs["fsdp_writer"] = root / "fsdp_writer"
    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=8, intermediate_size=64,
                                 tie_word_embeddings=True)).save_pretrained(root / "qwen3")
    with pytest.warns(UserWarning, match="no tokenizer"):
        convert_checkpoint(root / "qwen3", root / "converted", num_blocks=2, heads=4)
    dirs["converted"] = root / "converted"
    load_remotely(*dirs.values())
    return dirs


@pytest.mark.parametrize("name", ["run", *METHODS, "fsdp_writer", "converted"])
def test_the_shipped_code_forwards_several_cached_tokens_like_the_uncached_forward(saved, name):
    """The code a saved directory carries holds the cached multi-token fix: 5 tokens fed after a
    7-token KV cache give the uncached forward's logits (they were off by about 1 before)."""
    remote = load_file(saved[name] / "remote_out.safetensors")
    torch.testing.assert_close(remote["chunk"], remote["logits"][:, 7:], rtol=1e-4, atol=1e-4)


def test_every_saved_directory_names_its_code(saved):
    for name, path in saved.items():
        auto_map = json.loads((path / "config.json").read_text())["auto_map"]
        for ref in auto_map.values():
            module, _ = ref.split(".")
            assert (path / f"{module}.py").is_file(), (name, ref)
        assert set(auto_map) == {"AutoConfig", "AutoModelForCausalLM"}, name


@pytest.mark.parametrize("name", ["run", *METHODS, "fsdp_writer", "converted"])
def test_remote_code_without_mhar_probe_matches_in_process_model(saved, name):
    assert_same_as_in_process(saved[name])


def test_a_triton_run_loads_without_mhar_probe_on_the_eager_reference(saved):
    """A run saved on a GPU before the backend became a run-time choice names triton in its
    config.json; its own code, without mhar_probe, reads and ignores it (the backend is not part
    of the config any more) and computes what the eager model does."""
    path = saved["trained_with_triton"]
    with pytest.warns(UserWarning, match=r"routing_backend='triton' in a model config is ignored"):
        local = AutoModelForCausalLM.from_pretrained(path)
    assert "routing_backend" not in local.config.to_dict()
    remote = load_file(path / "remote_out.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(remote["logits"], local.eval()(IDS).logits, rtol=0, atol=1e-6)


def test_without_trust_remote_code_a_fresh_interpreter_is_told_what_to_pass(saved):
    code = ("from transformers import AutoModelForCausalLM; import sys\n"
            "AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=False)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", code, str(saved["run"])], env=env, capture_output=True,
                          text=True, timeout=300, cwd=saved["run"].parent)
    assert proc.returncode != 0 and "trust_remote_code" in proc.stderr


LM_EVAL_CLI = BLOCK_MHAR_PROBE + r"""
from lm_eval.__main__ import cli_evaluate

sys.argv = ["lm_eval", *sys.argv[1:]]
cli_evaluate()
"""


def test_stock_lm_eval_command_line_evaluates_a_run(saved, tmp_path):
    """`lm_eval --model hf --model_args pretrained=RUN,trust_remote_code=True` on a local task,
    in an interpreter where mhar_probe cannot be imported."""
    rows = [{"context": f"line {i} of the text", "choices": [f"line {i + 1}", f"word {i * 7 % 5}"], "label": 0}
            for i in range(6)]
    (tmp_path / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "toy.yaml").write_text(
        f"task: toy_remote\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / 'toy.jsonl'}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: \"{{context}}\\n\"\ndoc_to_target: label\n"
        "doc_to_choice: \"{{choices}}\"\nmetric_list:\n  - metric: acc\nmetadata:\n  version: 1.0\n")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": ""}
    args = ["--model", "hf", "--model_args", f"pretrained={saved['run']},trust_remote_code=True",
            "--tasks", "toy_remote", "--include_path", str(tmp_path), "--device", "cpu", "--batch_size", "2",
            "--output_path", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-c", LM_EVAL_CLI, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "out").rglob("results_*.json")
    acc = json.loads(results.read_text())["results"]["toy_remote"]["acc,none"]
    assert 0.0 <= acc <= 1.0


TOKENIZER_LOADER = BLOCK_MHAR_PROBE + r"""
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
print(json.dumps(tok("def f(x):\n    return x + 1\n").input_ids))
"""


def test_the_readme_tokenizer_load_needs_no_answer_to_a_prompt(saved):
    """transformers 5's AutoTokenizer reads config.json first, and a run's config names its own
    code (auto_map), so without mhar_probe the tokenizer takes `trust_remote_code=True` as the
    model does (README); it then loads with no prompt (stdin closed) and no warning, and gives
    the run's own tokenizer.json ids. With mhar_probe imported, the model type is known and no
    flag is needed."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    text = "def f(x):\n    return x + 1\n"
    expected = Tokenizer.from_file(str(saved["run"] / "tokenizer.json")).encode(text).ids
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", TOKENIZER_LOADER, str(saved["run"])], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                          cwd=saved["run"].parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Do you wish" not in proc.stdout + proc.stderr and "model of type" not in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == expected
    assert AutoTokenizer.from_pretrained(saved["run"])(text).input_ids == expected  # mhar_probe imported here
