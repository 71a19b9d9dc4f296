"""Capture, random-query null and probes at the released 8B model's shape (issue 53), timed.

The paper's released `wdlctc/marin-8b-cpt-mhar-delta` is a Llama-3.1-8B (Marin-8B) in the
authors' `delta_mh` layout: d 4096, L 32, 32 / 8 heads, FFN 14336, vocab 128256, untied
embeddings, RoPE theta 5e5 with llama3 scaling, attnres_num_blocks 8, attnres_num_heads 8, a null
source per site. No download is possible on the device, so this script builds that model with
random weights: the authors' config.json goes through `mhar import`'s own mapping
(`read_authors_config` -> `target_config` -> `build_model`, parameters on meta), then every
parameter is allocated on the device and drawn at random (matrices N(0, 0.02^2), norms 1, queries
N(0, (2 / sqrt(d/H))^2) so the routing is far from uniform, nulls N(0, 0.02^2), gates 1, the final
site's gate 0 as the import sets it).

With `--via-import DIR` it instead writes a random authors-format checkpoint to DIR (shards of
about 4 GB, one at a time) and runs the importer on it, timing the import and its peak host
memory (the shard-by-shard load: the model is never held twice).

For every (length T, batch B) it measures, over `--batches` batches of random ids after one
warm-up batch: a plain no-grad forward, `capture_routing(probes=False)` (token means, halves,
squares) and `capture_routing(probes=True, draws=8)` (+ slice-KL, the random-query null,
collinearity): seconds, tokens/s and peak device memory (torch.cuda.max_memory_allocated), plus
the process's peak host RSS. The JSON record names the card, torch, the commit and every option.

    PYTHONPATH=. python benchmarks/capture8b/run.py --config 8b --lengths 512 1024 2048 \
        --batch-sizes 1 2 4 --out benchmarks/capture8b/h100.json                     # one GPU
    PYTHONPATH=. python benchmarks/capture8b/run.py --config tiny --lengths 16 32 --batch-sizes 1 2 \
        --batches 1 --device cpu --out /tmp/capture8b_tiny.json                      # CPU, seconds

Results: benchmarks/capture8b/results.md.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import resource
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from mhar_probe import __version__
from mhar_probe.capture import capture_routing
from mhar_probe.convert.authors import build_model, import_checkpoint, read_authors_config, target_config
from mhar_probe.model.routing import choose_backend, set_routing_backend
from mhar_probe.provenance import benchmark_record

LLAMA31_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
                  rms_norm_eps=1e-5, rope_theta=500000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                  tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu",
                  bos_token_id=128000, eos_token_id=128001)
TINY = dict(LLAMA31_8B, vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 32}, bos_token_id=0, eos_token_id=1)
CONFIGS = {"8b": LLAMA31_8B, "tiny": TINY}
RELEASED = dict(attnres_mode="delta_mh", attnres_num_blocks=8, attnres_num_heads=8, attnres_use_null_source=True,
                attnres_gate_type="bias")


def authors_config(name: str) -> dict:
    blocks = {"8b": 8, "tiny": 2}[name]
    return {"model_type": "llama_attnres", "architectures": ["LlamaAttnResForCausalLM"],
            **RELEASED, "attnres_num_blocks": blocks, **CONFIGS[name]}


def init_value(name: str, shape: torch.Size, d: int, heads: int, final: int, gen: torch.Generator) -> torch.Tensor:
    """A random value for parameter `name` (float32, on the generator's device); `final`: the
    final site's index, whose gate is 0 (the authors' delta modes have no final routing)."""
    dev = gen.device
    if name.endswith("norm.weight"):  # layer norms, the final norm, the routing key norms
        return torch.ones(shape, device=dev)
    if name.endswith(".gate"):
        return torch.full(shape, 0.0 if name == f"sites.{final}.gate" else 1.0, device=dev)
    std = 2 / math.sqrt(d // heads) if name.endswith(".query") else 0.02
    return torch.randn(shape, generator=gen, device=dev) * std


def random_model(cfg: dict, device: torch.device, dtype: torch.dtype, seed: int = 0) -> nn.Module:
    """The delta_mh model of `cfg` via the importer's mapping, every parameter drawn at random on `device`."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(cfg))
        authors = read_authors_config(Path(tmp))
    config = target_config(authors)
    model = build_model(config)
    final = 2 * config.num_hidden_layers
    gen = torch.Generator(device=device).manual_seed(seed)
    for module_name, module in model.named_modules():
        for pname, p in list(module._parameters.items()):
            if p is None:  # an absent bias
                continue
            full = f"{module_name}.{pname}" if module_name else pname
            value = init_value(full, p.shape, config.hidden_size, config.routing_heads, final, gen)
            module._parameters[pname] = nn.Parameter(value.to(dtype), requires_grad=False)
    return model.to(device).eval()


def write_random_checkpoint(cfg: dict, folder: Path, shard_bytes: float = 4e9, seed: int = 0) -> None:
    """A random authors-format delta_mh checkpoint in `folder`, written shard by shard (bf16)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    d, f, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    gen = torch.Generator().manual_seed(seed)
    shapes = {"model.embed_tokens.weight": (V, d), "lm_head.weight": (V, d), "model.norm.weight": (d,)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "self_attn.q_proj.weight": (nh * hd, d), p + "self_attn.k_proj.weight": (nkv * hd, d),
                       p + "self_attn.v_proj.weight": (nkv * hd, d), p + "self_attn.o_proj.weight": (d, nh * hd),
                       p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                       p + "mlp.down_proj.weight": (d, f), p + "input_layernorm.weight": (d,),
                       p + "post_attention_layernorm.weight": (d,)})
        for kind in ("attn", "mlp"):
            shapes.update({p + f"{kind}_res_proj.weight": (1, d), p + f"{kind}_res_norm.weight": (d,),
                           p + f"{kind}_null_source": (d,)})
    part: dict[str, torch.Tensor] = {}
    files: list[tuple[str, list[str]]] = []

    def flush() -> None:
        name = f"model-{len(files) + 1:05d}.safetensors"
        save_file(part, str(folder / name))
        files.append((name, list(part)))
        part.clear()

    for name, shape in shapes.items():
        std = 2 / math.sqrt(d // cfg["attnres_num_heads"]) if "res_proj" in name else 0.02
        value = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=gen) * std
        part[name] = value.to(torch.bfloat16)
        if sum(t.numel() * 2 for t in part.values()) >= shard_bytes:
            flush()
    if part:
        flush()
    weight_map = {k: name for name, keys in files for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_device_mib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None


def host_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(device: torch.device, fn) -> tuple[float, float | None]:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0, peak_device_mib(device)


def measure(model: nn.Module, device: torch.device, vocab: int, T: int, B: int, batches: int, draws: int,
            seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, vocab, (B, T), generator=g).to(device) for _ in range(batches + 1)]
    capture_routing(model, ids[:1], probes=True, draws=draws, progress=False)  # warm-up (kernels, matrices)
    tokens = batches * B * T

    def forward() -> None:
        with torch.no_grad():
            for x in ids[1:]:
                model(x, use_cache=False)

    row: dict = {"seq_len": T, "batch": B, "batches": batches, "tokens": tokens}
    for arm, fn in (("forward", forward),
                    ("weights", lambda: capture_routing(model, ids[1:], probes=False, progress=False)),
                    ("probes", lambda: capture_routing(model, ids[1:], probes=True, draws=draws, progress=False))):
        seconds, peak = timed(device, fn)
        row[arm] = {"seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds, 1),
                    "peak_device_mib": None if peak is None else round(peak, 1)}
    row["host_peak_rss_mib"] = round(host_peak_mib(), 1)
    return row


def table(record: dict) -> str:
    """The record as the Markdown table of results.md: per (T, B), tokens/s and peak device memory of
    each arm (GiB), and the host's peak RSS."""
    gib = lambda mib: f"{mib / 1024:.1f}"  # noqa: E731
    lines = ["| T | B | forward tok/s | weights tok/s | probes tok/s | peak GiB: forward / weights / probes | host RSS GiB |",
             "|---:|---:|---:|---:|---:|---|---:|"]
    for r in record["rows"]:
        lines.append(f"| {r['seq_len']} | {r['batch']} | " + " | ".join(f"{r[a]['tokens_per_s']:,.0f}" for a in ARMS)
                     + " | " + " / ".join(gib(r[a]["peak_device_mib"]) for a in ARMS) + f" | {gib(r['host_peak_rss_mib'])} |")
    return "\n".join(lines) + "\n"


ARMS = ("forward", "weights", "probes")
RESULTS = Path(__file__).with_name("results.md")


def filled_results(text: str) -> str:
    """results.md with each `<!-- table:NAME.json -->` ... `<!-- end -->` block holding `table()` of
    the record NAME.json beside it."""
    import re

    def fill(m: re.Match) -> str:
        record = json.loads(RESULTS.with_name(m.group(1)).read_text())
        return f"<!-- table:{m.group(1)} -->\n{table(record)}<!-- end -->"
    return re.sub(r"<!-- table:([\w.]+\.json) -->\n.*?<!-- end -->", fill, text, flags=re.S)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="8b")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--batches", type=int, default=4, help="timed batches per (T, B), after one warm-up")
    ap.add_argument("--draws", type=int, default=8, help="random-query null draws")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--device", default=None)
    ap.add_argument("--backend", default=None, help="routing backend (default: triton on CUDA, eager on CPU)")
    ap.add_argument("--via-import", default=None, metavar="DIR",
                    help="write a random authors-format checkpoint to DIR and time `mhar import` of it")
    ap.add_argument("--out", default=None, help="JSON record")
    ap.add_argument("--tables", action="store_true", help="only rewrite results.md's tables from the JSON records")
    args = ap.parse_args(argv)
    if args.tables:
        RESULTS.write_text(filled_results(RESULTS.read_text()))
        return {}

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    cfg = authors_config(args.config)
    provenance = benchmark_record(device)  # the commit from the stamp or git, the software, the card
    record: dict = {"config": args.config, "authors_config": cfg, "device": str(device),
                    "card": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
                    "torch": torch.__version__, "package_version": __version__, "commit": provenance["code"]["commit"] or "",
                    "provenance": provenance,
                    "dtype": str(dtype).removeprefix("torch."), "options": vars(args),
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    t0 = time.perf_counter()
    if args.via_import:
        src = Path(args.via_import)
        write_random_checkpoint(cfg, src / "src")
        record["write_seconds"] = round(time.perf_counter() - t0, 1)
        t1 = time.perf_counter()
        import_checkpoint(src / "src", src / "imported", dtype=str(dtype).removeprefix("torch."), overwrite=True)
        record["import"] = {"seconds": round(time.perf_counter() - t1, 1), "host_peak_rss_mib": round(host_peak_mib(), 1)}
        from mhar_probe.model.saved import load_model

        model = load_model(src / "imported", dtype=dtype).to(device).eval()
    else:
        model = random_model(cfg, device, dtype)
    record["build_seconds"] = round(time.perf_counter() - t0, 1)
    record["parameters"] = sum(p.numel() for p in model.parameters())
    set_routing_backend(model, choose_backend(device, args.backend))
    record["routing_backend"] = model.sites[0].routing_backend
    record["rows"] = [measure(model, device, cfg["vocab_size"], T, B, args.batches, args.draws, seed=T * 1000 + B)
                      for T in args.lengths for B in args.batch_sizes]
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    for row in record["rows"]:
        print(f"T={row['seq_len']:5d} B={row['batch']:2d}  " + "  ".join(
            f"{arm} {row[arm]['tokens_per_s']:9.1f} tok/s" + (f" {row[arm]['peak_device_mib']:.0f} MiB"
                                                              if row[arm]['peak_device_mib'] else "")
            for arm in ARMS))
    return record


if __name__ == "__main__":
    main()
