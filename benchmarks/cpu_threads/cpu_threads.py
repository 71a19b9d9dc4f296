"""Tokens/s of the README's tiny CPU run at several thread counts, alone and beside busy processes.

The run is the README's `mhar train --preset tiny --method mhar` (batch 16 x 128 tokens a step),
cut to --steps steps (one evaluation and checkpoint at the end), as a fresh `mhar train` process
each time. Thread settings:
  torch     torch's default (one thread per CPU): what `mhar train` did before --threads existed,
            given here as --threads <CPUs allowed>
  1         --threads 1
  auto      no --threads: `mhar_probe.cputhreads` chooses from the idle CPUs at start
Neighbours: none, or --busy processes running `while True: pass` for the whole measurement.
Reported per (setting, neighbours): the median tokens/s of the steps after the first (from the
run's metrics.jsonl), the thread count the run got (its sessions.json) and the command's wall time.

    PYTHONPATH=. python benchmarks/cpu_threads/cpu_threads.py --steps 12 --out benchmarks/cpu_threads/cpu_tiny.json
    PYTHONPATH=. python benchmarks/cpu_threads/cpu_threads.py --steps 150 --settings auto --eval-every 25 \
        --out benchmarks/cpu_threads/cpu_tiny_150.json      # the README's "150 steps" claim, end to end

Results: benchmarks/cpu_threads/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from mhar_probe import __version__
from mhar_probe.cputhreads import allowed_cpus
from mhar_probe.provenance import benchmark_record

BUSY = "while True: pass"


def train_once(out: Path, steps: int, eval_every: int, threads: str, log: Path) -> dict:
    """One `mhar train` of the tiny preset into `out`; its tokens/s, threads and wall time."""
    cmd = [sys.executable, "-m", "mhar_probe.cli", "train", "--out", str(out), "--preset", "tiny",
           "--method", "mhar", "--steps", str(steps), "--eval-every", str(eval_every),
           "--checkpoint-every", str(steps), "--overwrite"]
    if threads != "auto":
        cmd += ["--threads", threads]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with log.open("a") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s") and r["step"] > 1]
    sessions = json.loads((out / "sessions.json").read_text())
    return dict(threads=sessions[-1]["hardware"].get("cpu_threads"), median_tokens_per_s=statistics.median(rates),
                steps_timed=len(rates), wall_s=wall, load_avg_1min_before=load)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--eval-every", type=int, default=None, help="default: --steps (one evaluation at the end)")
    ap.add_argument("--settings", nargs="+", default=["torch", "1", "auto"])
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1], help="busy neighbour processes to measure beside")
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default=None,
                    help="the commit measured, for a copied tree with neither a stamp nor git history")
    args = ap.parse_args()
    cpus = len(allowed_cpus())
    work = Path(tempfile.mkdtemp(prefix="cpu_threads_"))
    log = work / "train.log"
    train_once(work / "warm", 2, 2, "auto", log)  # builds the corpus' tokenizer and token caches once
    results = []
    for busy in args.busy:
        neighbours = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
        try:
            time.sleep(2 if busy else 0)  # let the neighbours show in /proc/stat
            for setting in args.settings:
                threads = str(cpus) if setting == "torch" else setting
                r = train_once(work / f"{setting}_{busy}", args.steps, args.eval_every or args.steps, threads, log)
                results.append(dict(setting=setting, busy_neighbours=busy, **r))
                print(json.dumps(results[-1]), flush=True)
        finally:
            for p in neighbours:
                p.kill()
                p.wait()
    provenance = benchmark_record("cpu", args.commit)  # the commit from the stamp or git, the software, the CPU
    doc = dict(benchmark="cpu_threads", created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
               commit=(provenance["code"]["commit"] or "")[:7], provenance=provenance, package_version=__version__,
               torch=torch.__version__, python=platform.python_version(),
               platform=platform.platform(), device=f"cpu x{cpus} ({platform.processor() or platform.machine()})",
               run="mhar train --preset tiny --method mhar (batch 16 x 128)", steps=args.steps, results=results)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}; logs in {log}")


if __name__ == "__main__":
    main()
