"""The table a study device call prints last: one row per run folder of a study's sweep.

    python results/study100m/table.py /tmp/study100m "NVIDIA H100 80GB HBM3"

run, status, steps, tokens, tokens/s (median over the logged steps after the first 20, which hold
compilation and graph capture), final validation loss, tail-mean, epochs (tokens / the corpus's
training tokens), and the cards and commits that trained it (its sessions, `mhar_probe.provenance`;
the card given on the command line for a run trained before sessions were recorded).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from mhar_probe.provenance import cards, commits
from mhar_probe.runfiles import TRAIN_CONFIG, RunFiles


def rows_of(study: Path) -> list[dict]:
    """One dict per run folder under study/runs (and study/ladder/*)."""
    out = []
    for run in sorted(p.parent for p in study.glob(f"runs/*/{TRAIN_CONFIG}")):
        files = RunFiles(run)  # each file checked by its reader; a missing one reads as empty
        summary, metrics, corpus = files.summary(), files.metrics(), files.corpus()
        rates = [m["tokens_per_s"] for m in metrics if m.get("step", 0) > 20 and "tokens_per_s" in m]
        vals = [m["val_loss"] for m in metrics if "val_loss" in m]
        tokens = summary.get("tokens", metrics[-1]["tokens"] if metrics else 0)
        train_tokens = summary.get("train_tokens", corpus.get("train_tokens"))
        out.append(dict(run=run.name, status="finished" if summary.get("finished") else "partial",
                        steps=summary.get("steps", metrics[-1]["step"] if metrics else 0), tokens=tokens,
                        tokens_per_s=statistics.median(rates) if rates else None,
                        final_val_loss=vals[-1] if vals else None, tail_mean=summary.get("tail_mean_val_loss"),
                        epochs=tokens / train_tokens if train_tokens else None,
                        cards=", ".join(cards(files.sessions())), commits=", ".join(commits(files.sessions()))))
    return out


def fmt(v: object, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str]) -> int:
    study, card = Path(argv[0]), (argv[1] if len(argv) > 1 else "") or "cpu"
    print("| run | status | steps | tokens | tokens/s | final val loss | tail-mean | epochs | card | commit |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows_of(study):
        print(f"| {r['run']} | {r['status']} | {r['steps']} | {r['tokens']:,} | {fmt(r['tokens_per_s'], ',.0f')} "
              f"| {fmt(r['final_val_loss'], '.4f')} | {fmt(r['tail_mean'], '.4f')} | {fmt(r['epochs'], '.2f')} "
              f"| {r['cards'] or card} | {r['commits'] or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
