"""Mid-training on GPUs, in one script (run on a 2-GPU machine):

  (a) identity: a converted random model's first-step loss equals its control's (1 GPU, bf16
      autocast, `mhar cpt` with --steps 1 for both, same seed and batch);
  (b) a short two-GPU FSDP2 + activation-checkpointing run of the delta form through
      torchrun with --routing-backend triton (eager if triton does not import);
  (c) training tokens/s of the delta form with the eager and the fused (triton) routing
      backend at a moderately sized converted model (random Llama d=2048 L=16 by default),
      one GPU, bf16 autocast, AdamW step included; CUDA events, median of timed steps.

    PYTHONPATH=. python benchmarks/cpt/gpu_check.py --out benchmarks/cpt/results

Writes results.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mhar_probe.provenance import benchmark_record


def build(root: Path, d: int, layers: int, vocab_tokens: int, seq: int) -> tuple[Path, Path]:
    """A random Llama (GQA 4:1, FFN 2.75d) with the embedded corpus's tokenizer, converted."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mhar_probe.convert import convert_checkpoint
    from mhar_probe.data import get_tokenizer, load_corpus

    tok = get_tokenizer(load_corpus(max_bytes=2_000_000), vocab_size=vocab_tokens)
    heads = d // 128
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=d, intermediate_size=int(2.75 * d) // 64 * 64,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
                      max_position_embeddings=max(4096, seq), eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    base, conv = root / f"llama-d{d}-L{layers}", root / f"llama-d{d}-L{layers}-delta"
    LlamaForCausalLM(cfg).save_pretrained(base)
    tok.save_pretrained(base)
    convert_checkpoint(base, conv, heads=8, overwrite=True)
    return base, conv


def cli(args: list[str], nproc: int = 1) -> float:
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    if nproc == 1:
        env["CUDA_VISIBLE_DEVICES"] = "0"
        cmd = [sys.executable, "-m", "mhar_probe.cli", "cpt", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "-m", "mhar_probe.cli", "cpt", *args]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-6000:], file=sys.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "", flush=True)
    return time.perf_counter() - t


def throughput(src: Path, backend: str, batch: int, seq: int, steps: int, warmup: int) -> dict:
    """tokens/s of full training steps (fwd + bwd + AdamW) of the converted model."""
    from mhar_probe.cpt.models import load_cpt_model
    from mhar_probe.cpt.objective import param_groups, z_loss

    dev = torch.device("cuda", 0)
    model = load_cpt_model(src, control=False, routing_backend=backend).to(dev)
    with torch.no_grad():  # open the gates a little: the routed term then matters numerically
        for site in model.sites:
            site.gate.fill_(0.1)
            site.query.normal_(0, 0.02)
    opt = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-5, betas=(0.9, 0.95), fused=True)
    vocab = model.config.text_config.vocab_size
    rows = torch.randint(0, vocab, (batch, seq + 1), generator=torch.Generator().manual_seed(1)).to(dev)
    times = []
    torch.cuda.reset_peak_memory_stats(dev)
    for i in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(rows[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten()) + z_loss(logits, 1e-4)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) / 1e3)
    med = statistics.median(times)
    out = dict(backend=backend, batch=batch, seq=seq, median_step_s=med, tokens_per_s=batch * seq / med,
               peak_mem_gib=torch.cuda.max_memory_allocated(dev) / 2**30, loss=float(loss))
    del model, opt
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/cpt/results")
    ap.add_argument("--work", default="/tmp/mhar-cpt-bench")
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--commit", default=None,
                    help="the commit measured, for a copied tree with neither a stamp nor git history")
    a = ap.parse_args()
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MHAR_CACHE_DIR", str(work / "cache"))
    result: dict = dict(device=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
                        torch=torch.__version__, provenance=benchmark_record("cuda:0", a.commit))
    try:
        import triton  # noqa: F401

        import mhar_probe.kernels  # noqa: F401  registers 'triton'
        backend = "triton"
    except Exception as exc:  # the fused backend is not importable here
        backend, result["triton_error"] = "eager", f"{type(exc).__name__}: {exc}"
    result["backend_for_fsdp_run"] = backend

    def part(name: str, fn) -> None:
        """Run one part; a failure is recorded and the next part still runs."""
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - one call on a shared machine: keep going
            result[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
            print(f"part {name} failed: {exc}", file=sys.stderr, flush=True)
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")

    small_base, small = build(work, 512, 8, 4096, 512)
    common = ["--seq-len", "512", "--batch-size", "8", "--eval-every", "5", "--eval-batches", "1",
              "--warmup", "2", "--no-progress", "--corpus-max-bytes", "2000000"]

    def identity() -> None:  # (a) one GPU, bf16 autocast
        cli([str(small), "--out", str(work / "a-delta"), "--steps", "1", "--routing-backend", backend, *common,
             "--warmup", "1"])
        cli([str(small_base), "--out", str(work / "a-control"), "--control", "--steps", "1", *common, "--warmup", "1"])
        sd = json.loads((work / "a-delta" / "summary.json").read_text())
        sc = json.loads((work / "a-control" / "summary.json").read_text())
        result["identity"] = dict(delta_first_step_loss=sd["first_step_loss"],
                                  control_first_step_loss=sc["first_step_loss"], delta_val0=sd["initial_val_loss"],
                                  control_val0=sc["initial_val_loss"],
                                  abs_diff=abs(sd["first_step_loss"] - sc["first_step_loss"]))

    def fsdp() -> None:  # (b) two GPUs, FSDP2 + activation checkpointing, interrupted at 6 and resumed
        run = [str(small), "--out", str(work / "b-fsdp"), "--fsdp", "--checkpointing", "--routing-backend", backend,
               "--checkpoint-every", "3", *common]
        wall = cli([*run, "--steps", "6"], nproc=2)
        wall += cli([*run, "--steps", "10", "--resume"], nproc=2)
        sf = json.loads((work / "b-fsdp" / "summary.json").read_text())
        metrics = [json.loads(x) for x in (work / "b-fsdp" / "metrics.jsonl").read_text().splitlines()]
        result["fsdp"] = dict(world_size=sf["world_size"], steps=sf["steps"], initial_val_loss=sf["initial_val_loss"],
                              final_val_loss=sf["final_val_loss"], final_ema_val_loss=sf["final_ema_val_loss"],
                              losses=[m.get("loss") for m in metrics], wall_s=wall,
                              tokens_per_s_last=metrics[-1]["tokens_per_s"])

    rows: list[dict] = []

    def speed() -> None:  # (c) d=2048 L=16, eager vs fused routing, one GPU
        t0 = time.perf_counter()
        _, big = build(work, a.d, a.layers, 4096, a.seq)
        result["build_big_s"] = time.perf_counter() - t0
        result["model"] = dict(d=a.d, layers=a.layers, routing_heads=8, num_blocks=a.layers // 4)
        for b in (["eager", "triton"] if backend == "triton" else ["eager"]):
            rows.append(throughput(big, b, a.batch, a.seq, a.steps, a.warmup))
            result["throughput"] = rows
            (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
            print(rows[-1], flush=True)

    part("identity", identity)
    part("fsdp", fsdp)
    part("throughput", speed)

    print(f"\ndevice: {result['device']} x{result['gpus']}, torch {result['torch']}")
    i = result.get("identity")
    if i:
        print(f"(a) first-step loss  delta {i['delta_first_step_loss']:.6f}  control {i['control_first_step_loss']:.6f}"
              f"  |diff| {i['abs_diff']:.2e}")
    f = result.get("fsdp")
    if f:
        print(f"(b) FSDP2 x{f['world_size']} ({backend}, checkpointing, resumed at 6): val {f['initial_val_loss']:.4f} -> "
              f"{f['final_val_loss']:.4f} (EMA {f['final_ema_val_loss']:.4f}) in {f['steps']} steps")
    print(f"(c) delta form d={a.d} L={a.layers} B={a.batch} T={a.seq}, bf16, 1 GPU")
    print("    backend   tokens/s   step ms   peak GiB")
    for r in rows:
        print(f"    {r['backend']:8s} {r['tokens_per_s']:9.0f} {1e3 * r['median_step_s']:9.1f} {r['peak_mem_gib']:9.1f}")
    if len(rows) == 2:
        print(f"    fused / eager = {rows[1]['tokens_per_s'] / rows[0]['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
