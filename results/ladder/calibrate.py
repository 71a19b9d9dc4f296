"""Calibration for the GPU ladder (issue 23), one device call: how much text the `installed`
corpus holds on this machine, how fast it tokenizes, and what candidate sizes cost to train,
capture and evaluate. Prints a short table last; details go to --out (JSON)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from mhar_probe.data import get_tokenizer, load_corpus, load_packed
from mhar_probe.sweep import run_sweep

CANDIDATES = {  # name: model overrides on the tiny preset (attention heads 8, KV 4)
    "d128L8": dict(hidden_size=128, num_hidden_layers=8, num_attention_heads=8, intermediate_size=256,
                   max_position_embeddings=1024),
}
VOCAB = 2048


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    out = Path(args.out)
    rec: dict = {}
    t = time.perf_counter()
    corpus = load_corpus("installed", max_bytes=None)
    rec["corpus_s"] = time.perf_counter() - t
    by = Counter()
    for d in corpus.train + corpus.val:
        by[d.source] += d.n_bytes
    rec["corpus_bytes"] = sum(by.values())
    rec["corpus_docs"] = len(corpus.train) + len(corpus.val)
    rec["top_sources"] = by.most_common(40)
    rec["meta"] = corpus.composition.meta
    print(f"corpus: {rec['corpus_docs']} docs, {rec['corpus_bytes'] / 1e6:.0f} MB in {rec['corpus_s']:.0f} s")
    t = time.perf_counter()
    tok = get_tokenizer(corpus, vocab_size=VOCAB)
    rec["tokenizer_s"] = time.perf_counter() - t
    t = time.perf_counter()
    rows = load_packed(corpus, tok, 512, "train")
    rec["tokenize_s"] = time.perf_counter() - t
    train_bytes = sum(d.n_bytes for d in corpus.train)
    rec["train_tokens"] = int(rows.numel())
    rec["bytes_per_token"] = train_bytes / rows.numel()
    print(f"tokenizer {rec['tokenizer_s']:.0f} s, tokenize {rec['tokenize_s']:.0f} s: "
          f"{rec['train_tokens'] / 1e6:.0f}M train tokens, {rec['bytes_per_token']:.2f} bytes/token")
    (out / "calibrate.json").write_text(json.dumps(rec, indent=1))
    rec["runs"] = {}
    for name, extra in CANDIDATES.items():
        common = dict(corpus="installed", vocab_size=VOCAB, corpus_max_bytes=None, seq_len=512, batch_size=64, eval_every=100,
                      eval_batches=8, checkpoint_every=10_000, progress=False, extra=extra)
        grid = dict(presets=["tiny"], methods=["baseline", "mhar"], heads=[8, 16], kv_heads=[4],
                    steps=[args.steps], lrs=[2e-3], seeds=[0], common=common)
        t = time.perf_counter()
        res = run_sweep(grid, f"/tmp/cal/{name}", progress=False)
        wall = time.perf_counter() - t
        for spec in res.runs:
            run = Path(f"/tmp/cal/{name}") / spec.name
            rows_ = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            tps = sorted(r["tokens_per_s"] for r in rows_ if "tokens_per_s" in r)[len(rows_) // 4:]
            summ = json.loads((run / "summary.json").read_text())
            rec["runs"][f"{name}/{spec.name}"] = dict(
                tok_s=tps[len(tps) // 2] if tps else None, val_loss=[r["val_loss"] for r in rows_ if "val_loss" in r],
                summary={k: summ.get(k) for k in ("parameters", "tokens", "flops", "final_val_loss")})
        rec["runs"][f"{name}/sweep_wall_s"] = wall
        print(f"{name}: sweep of {len(res.runs)} runs in {wall:.0f} s", flush=True)
        (out / "calibrate.json").write_text(json.dumps(rec, indent=1))
    base = next(Path("/tmp/cal/d128L8").glob("*baseline*"))
    mhar = next(Path("/tmp/cal/d128L8").glob("*mhar-h8*"))
    for what, cmd in (("capture", [sys.executable, "-m", "mhar_probe.cli", "capture", str(mhar), "--no-progress"]),
                      ("eval", [sys.executable, "-m", "mhar_probe.cli", "eval", str(base), "--tasks",
                                "mhar_heldout_ppl,mhar_lastword,mhar_nextline", "--limit", "2000",
                                "--batch-size", "64"])):
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        rec[f"{what}_s"] = time.perf_counter() - t
        rec[f"{what}_rc"] = p.returncode
        rec[f"{what}_tail"] = (p.stdout + p.stderr)[-3000:]
        print(f"{what}: rc {p.returncode} in {rec[f'{what}_s']:.0f} s\n{(p.stdout + p.stderr)[-1500:]}", flush=True)
    (out / "calibrate.json").write_text(json.dumps(rec, indent=1))
    print("\n| run | tok/s | last val loss |")
    for k, v in rec["runs"].items():
        if isinstance(v, dict):
            print(f"| {k} | {v['tok_s']:.0f} | {v['val_loss'][-1] if v['val_loss'] else '-'} | {v['summary']}")


if __name__ == "__main__":
    main()
