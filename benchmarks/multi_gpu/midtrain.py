"""The paper's mid-training protocol end to end on N processes (issue 36, item 5).

    python benchmarks/multi_gpu/midtrain.py --nproc 2 --out runs/midtrain --preset 100m \\
        --pretrain-steps 400 --cpt-steps 200                          # (benchmarks/multi_gpu/midtrain.sh)

1. pre-train a Qwen3-shaped base ourselves: `mhar train --method baseline` (no downloads);
2. export it as a Hugging Face Qwen3 checkpoint (`Qwen3ForCausalLM`: the baseline's parameter
   names are Qwen3's, so its state dict loads unchanged; the logits of both on a probe batch are
   checked to agree) and convert that with `mhar convert` (the delta form of MHAR, identical to
   the base at step 0: convert checks it);
3. continue it twice with the same schedule, seed and so data order: `mhar cpt CONV --out
   cpt-mhar` (delta-form MHAR) and `mhar cpt CONV --out cpt-control --control` (the plain base);
4. evaluate both on the held-out split: `mhar eval RUN --tasks mhar_heldout_ppl` (the harness),
   beside each run's own validation loss (a failed evaluation leaves n/a in the table);
5. print the table last: each arm's losses, MHAR - control, tokens/s, world size.

Every training phase runs under `torchrun --nproc_per_node NPROC` (one plain process for 1);
each phase has its own limit within `--budget` seconds and prints its wall time; a phase whose
run already finished in OUT is not run again (a second call continues where one ran out of
time). Extra flags go to every training phase with --train-args / --cpt-args (e.g. "--device cpu"
with gloo on the CPU, "--no-cuda-graphs" for the eager step; on GPUs DDP steps from CUDA graphs with
compiled sublayers by default).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from mhar_probe.proctree import descendants, signal_all

ARMS = ("mhar", "control")


def launcher(nproc: int, port: int) -> list[str]:
    if nproc == 1:
        return [sys.executable]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(port)]


def finished(run: Path) -> bool:
    try:
        return bool(json.loads((run / "summary.json").read_text()).get("finished"))
    except (OSError, ValueError):
        return False


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to `proc` and every process below it (torchrun starts its ranks in
    sessions of their own: killing torchrun alone would leave them holding the GPUs)."""
    tree = [proc.pid, *descendants(proc.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_all(tree, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Phases:
    """Runs commands one after another within a total budget, printing how each ended."""

    def __init__(self, budget: float) -> None:
        self.t0, self.budget, self.times = time.monotonic(), budget, {}

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def run(self, name: str, cmd: list[str], log: Path, required: bool = True) -> bool:
        """Run `cmd` (output to `log`) within the budget left; a failure of a `required` phase
        ends the driver, of another one is reported and the driver goes on."""
        limit = self.left()
        if limit < 5:
            if not required:
                print(f"## {name}: skipped, the budget ({self.budget:.0f} s) is spent", flush=True)
                return False
            raise SystemExit(f"## {name}: not started, the budget ({self.budget:.0f} s) is spent")
        print(f"## {name}: {shlex.join(cmd)}", flush=True)
        t0 = time.monotonic()
        with log.open("w") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                stop_tree(proc)
                rc = None
        self.times[name] = time.monotonic() - t0
        how = f"exit {rc}" if rc is not None else f"TIMED OUT at {limit:.0f} s"
        print(f"## {name}: {how} after {self.times[name]:.0f} s (log {log})", flush=True)
        if rc != 0:
            print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:]), flush=True)
            if required:
                raise SystemExit(f"## {name} failed; the phases before it stay in {log.parent}")
        return rc == 0


def export_qwen3(run: Path, dst: Path) -> float:
    """The baseline run's model as a Hugging Face Qwen3 checkpoint (with the run's tokenizer) in
    `dst`; returns max |logits_qwen3 - logits_run| on a probe batch (float32, CPU), refused
    above 1e-4."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    import mhar_probe  # noqa: F401  (registers the Auto classes)
    from mhar_probe.model import saved

    model = saved.load_model(run, "pre-trained base", local_files_only=True).float().eval()
    c = model.config
    if c.residual_method != "baseline":
        raise SystemExit(f"{run} trained {c.residual_method}, not baseline: only the plain residual is Qwen3")
    qcfg = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                       num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                       head_dim=c.head_dim, intermediate_size=c.intermediate_size,
                       max_position_embeddings=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps,
                       rope_theta=c.rope_theta, tie_word_embeddings=c.tie_word_embeddings, attention_bias=False,
                       bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id)
    qwen = Qwen3ForCausalLM(qcfg).float().eval()
    missing, unexpected = qwen.load_state_dict(model.state_dict(), strict=False)
    if unexpected or set(missing) - ({"lm_head.weight"} if c.tie_word_embeddings else set()):
        raise SystemExit(f"the baseline's parameters are not Qwen3's: missing {missing}, unexpected {unexpected}")
    qwen.tie_weights()
    ids = torch.randint(0, c.vocab_size, (2, min(64, c.max_position_embeddings)),
                        generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        deviation = (qwen(ids).logits - model(ids).logits).abs().max().item()
    if not deviation <= 1e-4:
        raise SystemExit(f"the Qwen3 export deviates from the run by {deviation:g} (> 1e-4); nothing written")
    qwen.save_pretrained(dst)
    AutoTokenizer.from_pretrained(run, local_files_only=True).save_pretrained(dst)
    return deviation


def heldout_metrics(eval_dir: Path) -> dict[str, float]:
    """The numbers of the harness's results file in `eval_dir` (task mhar_heldout_ppl)."""
    files = sorted(eval_dir.rglob("results*.json"))
    if not files:
        return {}
    results = json.loads(files[-1].read_text()).get("results", {})
    task = results.get("mhar_heldout_ppl", {})
    return {k.split(",")[0]: float(v) for k, v in task.items()
            if isinstance(v, (int, float)) and "stderr" not in k and k.split(",")[0] != "sample_len"}


def arm_row(run: Path) -> dict:
    s = json.loads((run / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rates = sorted(m["tokens_per_s"] for m in metrics if "tokens_per_s" in m)[1:]  # (not the capture step)
    return dict(final_val_loss=s["final_val_loss"], tail_mean_val_loss=s["tail_mean_val_loss"],
                final_ema_val_loss=s.get("final_ema_val_loss"), tokens=s["tokens"], world_size=s["world_size"],
                cuda_graphs=s.get("cuda_graphs"), tokens_per_s=rates[len(rates) // 2] if rates else float("nan"),
                heldout=heldout_metrics(run / "eval"))


def table(rows: dict[str, dict], base: dict) -> str:
    keys = ["final_val_loss", "tail_mean_val_loss", "final_ema_val_loss"]
    held = sorted(set().union(*(r["heldout"] for r in rows.values())))
    out = [f"base (pre-trained baseline): final val loss {base['final_val_loss']:.4f}, "
           f"{base['steps']} steps, world size {base['world_size']}",
           "| quantity | MHAR (delta) | control | MHAR - control |", "|---|---|---|---|"]

    def line(name, a, b):
        fmt = (lambda v, sign="": "n/a" if v is None else f"{v:{sign}.4f}")
        diff = None if a is None or b is None else a - b
        out.append(f"| {name} | {fmt(a)} | {fmt(b)} | {fmt(diff, '+')} |")

    m, c = rows["mhar"], rows["control"]
    for k in keys:
        line(k, m[k], c[k])
    for k in held:
        line(f"held-out {k} (mhar eval)", m["heldout"].get(k), c["heldout"].get(k))
    out.append(f"| tokens/s (median step, all ranks) | {m['tokens_per_s']:,.0f} | {c['tokens_per_s']:,.0f} | "
               f"ratio {m['tokens_per_s'] / c['tokens_per_s']:.3f} |")
    out.append(f"| tokens trained | {m['tokens']:,} | {c['tokens']:,} | |")
    out.append(f"| world size / CUDA graphs | {m['world_size']} / {m['cuda_graphs']} | "
               f"{c['world_size']} / {c['cuda_graphs']} | |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, required=True, help="processes per training phase (torchrun for > 1)")
    p.add_argument("--out", required=True, help="directory of every phase's run (base, qwen3, conv, cpt-*)")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--pretrain-steps", type=int, required=True)
    p.add_argument("--cpt-steps", type=int, required=True)
    p.add_argument("--heads", type=int, default=8, help="routing heads H of the converted model")
    p.add_argument("--num-blocks", type=int, default=None, help="delta blocks (default: mhar convert's, L//4)")
    p.add_argument("--batch-size", type=int, default=None, help="global batch of both phases (default: theirs)")
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--corpus-max-bytes", type=int, default=None)
    p.add_argument("--vocab-size", type=int, default=None, help="the base's BPE vocabulary (pre-training)")
    p.add_argument("--train-args", default="", help="extra flags of the pre-training phase")
    p.add_argument("--cpt-args", default="", help="extra flags of both continued-training phases")
    p.add_argument("--eval-limit", type=int, default=200, help="held-out items per evaluation (0: skip mhar eval)")
    p.add_argument("--eval-device", default=None, help="mhar eval --device (default: its own)")
    p.add_argument("--budget", type=float, default=540, help="seconds for all phases together")
    p.add_argument("--port", type=int, default=29571)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    phases = Phases(a.budget)
    cli = ["-m", "mhar_probe.cli"]
    common = [flag for name, value in (("--batch-size", a.batch_size), ("--micro-batch", a.micro_batch),
                                       ("--seq-len", a.seq_len), ("--eval-every", a.eval_every),
                                       ("--corpus-max-bytes", a.corpus_max_bytes))
              if value is not None for flag in (name, str(value))]
    base, qwen, conv = out / "base", out / "base-qwen3", out / "conv"
    if not finished(base):
        vocab = ["--vocab-size", str(a.vocab_size)] if a.vocab_size else []
        phases.run("pretrain", [*launcher(a.nproc, a.port), *cli, "train", "--method", "baseline", "--preset",
                                a.preset, "--steps", str(a.pretrain_steps), "--out", str(base), "--overwrite",
                                "--no-progress", *vocab, *common, *shlex.split(a.train_args)], out / "pretrain.log")
    if not (conv / "config.json").exists():
        t0 = time.monotonic()
        deviation = export_qwen3(base, qwen)
        print(f"## export: Qwen3 checkpoint in {qwen}, max |logit difference| {deviation:.2e} "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
        heads = ["--heads", str(a.heads)] + (["--num-blocks", str(a.num_blocks)] if a.num_blocks else [])
        phases.run("convert", [sys.executable, *cli, "convert", str(qwen), str(conv), *heads, "--overwrite"],
                   out / "convert.log")
    for arm in ARMS:
        run = out / f"cpt-{arm}"
        if not finished(run):
            control = ["--control"] if arm == "control" else []
            phases.run(f"cpt {arm}", [*launcher(a.nproc, a.port + 1), *cli, "cpt", str(conv), "--out", str(run),
                                      *control, "--steps", str(a.cpt_steps), "--overwrite", "--no-progress",
                                      *common, *shlex.split(a.cpt_args)], out / f"cpt-{arm}.log")
    if a.eval_limit > 0:
        device = ["--device", a.eval_device] if a.eval_device else []
        for arm in ARMS:
            run = out / f"cpt-{arm}"
            if not heldout_metrics(run / "eval"):
                phases.run(f"eval {arm}", [sys.executable, *cli, "eval", str(run), "--tasks", "mhar_heldout_ppl",
                                           "--limit", str(a.eval_limit), "--out", str(run / "eval"), "--overwrite",
                                           *device], out / f"eval-{arm}.log", required=False)
    base_summary = json.loads((base / "summary.json").read_text())
    rows = {arm: arm_row(out / f"cpt-{arm}") for arm in ARMS}
    (out / "midtrain.json").write_text(json.dumps(dict(base=base_summary, arms=rows, phases_s=phases.times,
                                                       argv=sys.argv[1:]), indent=2))
    print(f"## phases (s): {', '.join(f'{k} {v:.0f}' for k, v in phases.times.items())}")
    print(table(rows, base_summary))


if __name__ == "__main__":
    main()
