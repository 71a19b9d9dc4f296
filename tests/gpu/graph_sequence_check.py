"""Which runs, trained one after another in one process with the CUDA-graph step, break a later
capture? (The GPU ladder's first call: the fifth run, mhar H=8, failed to capture after baseline,
hyper, attnres and mhar H=4; the same model captured as the second run of a process.)

    python tests/gpu/graph_sequence_check.py [--steps 30]
Each sequence runs in a fresh process; prints one line per sequence: ok, or the error."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

MODEL = dict(hidden_size=128, num_hidden_layers=8, num_attention_heads=8, intermediate_size=256,
             max_position_embeddings=1024)
SEQUENCES = {
    "ladder order": ["baseline", "hyper", "attnres", "mhar4", "mhar8"],
    "mhar8 alone": ["mhar8"],
    "hyper then mhar8": ["hyper", "mhar8"],
    "mhar4 then mhar8": ["mhar4", "mhar8"],
    "attnres then mhar8": ["attnres", "mhar8"],
    "baseline then mhar8": ["baseline", "mhar8"],
    "mhar8 twice": ["mhar8", "mhar8"],
}


def run_sequence(names: list[str], steps: int) -> None:
    from mhar_probe.train import TrainConfig, Trainer

    for i, name in enumerate(names):
        method, heads = (name[:4], int(name[4:])) if name.startswith("mhar") else (name, None)
        cfg = TrainConfig(out=f"/tmp/gseq/{i}-{name}", preset="tiny", method=method, heads=heads, kv_heads=4,
                          steps=steps, lr=2e-3, batch_size=64, seq_len=512, eval_every=steps, eval_batches=2,
                          checkpoint_every=10_000, vocab_size=2048, progress=False, overwrite=True,
                          cuda_graphs=True, extra=dict(MODEL))
        summary = Trainer(cfg).run()
        print(f"  {name}: finished={summary.get('finished')} loss={summary.get('final_val_loss'):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run_sequence(json.loads(args.one), args.steps)
        return
    rows = []
    for label, names in SEQUENCES.items():
        p = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--one", json.dumps(names)],
                           capture_output=True, text=True)
        err = [ln for ln in (p.stdout + p.stderr).splitlines() if "Error" in ln or "error" in ln]
        rows.append((label, "ok" if p.returncode == 0 else f"FAILED: {err[-1] if err else p.returncode}"))
        print(f"{label}: {rows[-1][1]}\n{p.stdout}", flush=True)
    print("\n| sequence | result |\n|---|---|")
    for label, result in rows:
        print(f"| {label} | {result[:160]} |")


if __name__ == "__main__":
    main()
