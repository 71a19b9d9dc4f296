"""The numbers of results/study100m/README.md that the runs hold, rendered from the runs.

Each block sits in the README between ``<!-- numbers:NAME -->`` and ``<!-- /numbers:NAME -->``
and is made here from the committed files only (summary.json, metrics, the evaluations' results,
stats/mcnemar), so it cannot go stale:

    python results/study100m/readme_numbers.py          # rewrite the blocks in place
    python results/study100m/readme_numbers.py --check  # exit 1 and name the blocks that differ

tests/test_study_readme_numbers.py runs the check. Blocks:

* ``main-table``: per run of the main folder, the tail-mean held-out loss (its window: the last
  ``tail_k`` evaluations, steps and tokens), minus the same-seed baseline, tokens/s (median of the
  logged steps after the first 20), the card where a record names one, the commit the records give
  (`mhar_probe.demo.run_origin`), the steps it was resumed at, and both tasks' scores;
* ``three-seed``: the paired three-seed deltas of attnres and MHAR H=8 against the baseline and of
  MHAR against attnres (Student t interval, paired t p);
* ``downstream-seeds``: each task's MHAR - baseline and attnres - baseline accuracy at every seed, and
  the paired t over seeds of those differences;
* ``equal-tokens``: the 100M study's MHAR gain at the 350M pair's token count, beside the pair's.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from analysis.stats.curves import t_interval  # noqa: E402
from mhar_probe.demo.run_origin import origin  # noqa: E402
from mhar_probe.runfiles import RunFiles  # noqa: E402

STUDY = Path(__file__).resolve().parent
README = STUDY / "README.md"
#: (label, run folder name) in the table's order
MAIN = [
    ("baseline s0", "100m-baseline-kv4-lr5e-4-s0-n3815"),
    ("baseline s1", "100m-baseline-kv4-lr5e-4-s1-n3815"),
    ("baseline s2", "100m-baseline-kv4-lr5e-4-s2-n3815"),
    ("hyper-connections (n = 4) s0", "100m-hyper-kv4-lr5e-4-s0-n3815"),
    ("attnres (single-head) s0", "100m-attnres-h1-kv4-lr5e-4-s0-n3815"),
    ("attnres s1", "100m-attnres-h1-kv4-lr5e-4-s1-n3815"),
    ("attnres s2", "100m-attnres-h1-kv4-lr5e-4-s2-n3815"),
    ("MHAR H=8 (KV 4) s0", "100m-mhar-h8-kv4-lr5e-4-s0-n3815"),
    ("MHAR H=8 s1", "100m-mhar-h8-kv4-lr5e-4-s1-n3815"),
    ("MHAR H=8 s2", "100m-mhar-h8-kv4-lr5e-4-s2-n3815"),
    ("MHAR head-wise (H = G = 4) s0", "100m-mhar_hw-h4-kv4-lr5e-4-s0-n3815"),
    ("MHAR H=4 (= KV) s0", "100m-mhar-h4-kv4-lr5e-4-s0-n3815"),
    ("MHAR H=16 (2 KV) s0", "100m-mhar-h16-kv4-lr5e-4-s0-n3815"),
]
#: the card of runs trained before runs recorded theirs, as this README noted it when each was trained
#: (the device calls' logs, which printed it, were not committed)
CARDS_BEFORE_RECORDS = {"100m-mhar-h8-kv4-lr5e-4-s1-n3815": "H100"}
CARD_BEFORE_RECORDS = "H200"
TASKS = (("mhar_lastword", "acc,none"), ("mhar_nextline", "acc_norm,none"))
SEEDS = (0, 1, 2)
MINUS = "\u2212"


def _run(name: str) -> Path:
    return STUDY / "runs" / name


def _name(method: str, seed: int) -> str:
    return {"baseline": f"100m-baseline-kv4-lr5e-4-s{seed}-n3815", "attnres": f"100m-attnres-h1-kv4-lr5e-4-s{seed}-n3815",
            "mhar": f"100m-mhar-h8-kv4-lr5e-4-s{seed}-n3815"}[method]


def signed(x: float, digits: int) -> str:
    return f"{x:+.{digits}f}".replace("-", MINUS)


def scores(name: str) -> dict[str, float]:
    """The evaluation's score of each task (TASKS' metric), from its one results file."""
    found = sorted((STUDY / "runs" / "evals" / name).rglob("results_*.json"))
    if len(found) != 1:
        raise SystemExit(f"{name}: {len(found)} evaluation results files, expected one")
    results = json.loads(found[0].read_text())["results"]
    return {task: results[task][metric] for task, metric in TASKS}


def tail_window(name: str) -> tuple[int, int, float]:
    """(first step, last step, tokens between them) of the run's tail-mean window: its last tail_k
    evaluations."""
    files = RunFiles(_run(name))
    k = files.summary()["tail_k"]
    evals = [m for m in files.metrics() if "val_loss" in m]
    return evals[-k]["step"], evals[-1]["step"], evals[-1]["tokens"] - evals[-k]["tokens"]


def tokens_per_s(name: str) -> float:
    rates = [m["tokens_per_s"] for m in RunFiles(_run(name)).metrics() if m.get("step", 0) > 20 and "tokens_per_s" in m]
    return statistics.median(rates)


def resumes(name: str) -> str:
    """The steps a run was resumed at: a restart's first step carries its compilation and graph
    capture, so it runs at a fraction of the run's median rate (under a fifth); the run's
    train_config.json ``resume`` flag must agree."""
    files = RunFiles(_run(name))
    metrics = [m for m in files.metrics() if m.get("step", 0) > 20 and "tokens_per_s" in m]
    median = statistics.median(m["tokens_per_s"] for m in metrics)
    steps = [m["step"] - 1 for m in metrics if m["tokens_per_s"] < 0.2 * median]
    assert bool(steps) == bool(files.train_config().get("resume")), f"{name}: resume flag and metrics disagree"
    return ", ".join(f"{s:,}" for s in steps) or "-"


def tail_mean(name: str) -> float:
    return RunFiles(_run(name)).summary()["tail_mean_val_loss"]


def card_and_commit(name: str) -> tuple[str, str]:
    o = origin(_run(name))
    card = ", ".join(o.cards) if o.cards else CARDS_BEFORE_RECORDS.get(name, CARD_BEFORE_RECORDS) + "*"
    commit = "+".join(o.commits) + ("" if o.source == "sessions" else " (eval)") if o.commits else "-"
    return card, commit


def main_table() -> str:
    first, last, tokens = tail_window(MAIN[0][1])
    k = RunFiles(_run(MAIN[0][1])).summary()["tail_k"]
    windows = {tail_window(name) for _, name in MAIN}
    assert len(windows) == 1, f"the runs' tail windows differ: {windows}"
    lines = [f"| run | tail-mean val loss (last {k} evals, steps {first:,}-{last:,}, {tokens / 1e6:.1f}M tokens) "
             f"| {MINUS} same-seed baseline | tokens/s | card | commit | resumed at step | `mhar_lastword` acc "
             f"| `mhar_nextline` acc_norm |",
             "|---|---:|---:|---:|---|---|---:|---:|---:|"]
    for label, name in MAIN:
        seed = RunFiles(_run(name)).summary()["seed"]
        loss = tail_mean(name)
        delta = "" if "baseline" in name else signed(loss - tail_mean(_name("baseline", seed)), 4)
        card, commit = card_and_commit(name)
        s = scores(name)
        lines.append(f"| {label} | {loss:.4f} | {delta} | {tokens_per_s(name):,.0f} | {card} | {commit} | {resumes(name)} "
                     f"| {s['mhar_lastword']:.3f} | {s['mhar_nextline']:.3f} |")
    lines += ["", f"\\* card as noted when the run was trained, not from the run's own record (these runs predate "
              f"recorded cards); commit \"(eval)\": the git hash the evaluation harness recorded, the only commit "
              f"the committed files hold for these runs, not necessarily the one that trained them."]
    return "\n".join(lines)


def _paired(a: str, b: str) -> tuple[list[float], float, float, float, float]:
    """Per-seed tail-mean deltas a - b, their mean and t interval, and the paired t p-value."""
    deltas = [tail_mean(_name(a, s)) - tail_mean(_name(b, s)) for s in SEEDS]
    mean, _, _, low, high = t_interval(deltas)
    p = stats.ttest_1samp(deltas, 0.0).pvalue
    return deltas, mean, low, high, p


def three_seed() -> str:
    out = []
    for a, b, what in (("attnres", "baseline", "attnres "), ("mhar", "baseline", "MHAR H=8 "),
                       ("mhar", "attnres", "MHAR H=8 ")):
        deltas, mean, low, high, p = _paired(a, b)
        out.append(f"{what}{MINUS} {b} = {signed(mean, 3)} [{signed(low, 3)}, {signed(high, 3)}] (paired t p = {p:.3f}; "
                   f"seeds {', '.join(signed(d, 4) for d in deltas)})")
    return ("Over the three paired seeds (Student t, 2 degrees of freedom, tail-mean held-out loss): "
            + "; ".join(out) + ".")


def downstream_seeds() -> str:
    lines = [f"| task | pair | seed 0 | seed 1 | seed 2 | mean over seeds | paired t p |", "|---|---|---:|---:|---:|---:|---:|"]
    for task, _ in TASKS:
        for a, b in (("mhar", "baseline"), ("attnres", "baseline"), ("mhar", "attnres")):
            diffs = [scores(_name(a, s))[task] - scores(_name(b, s))[task] for s in SEEDS]
            p = stats.ttest_1samp(diffs, 0.0).pvalue
            what = {"mhar": "MHAR H=8", "attnres": "attnres", "baseline": "baseline"}
            lines.append(f"| `{task}` | {what[a]} {MINUS} {what[b]} | " + " | ".join(signed(d, 3) for d in diffs)
                         + f" | {signed(sum(diffs) / 3, 3)} | {p:.2f} |")
    return "\n".join(lines)


def equal_tokens() -> str:
    """The 100M study's MHAR - baseline gain read at the 350M pair's token count (its last 11
    evaluations at or before that many tokens), beside the 350M pair's gain."""
    pair = STUDY / "scale350m" / "runs"
    big = {m: RunFiles(next(pair.glob(f"350m-{m}-*"))).summary() for m in ("baseline", "mhar-h8")}
    budget = big["baseline"]["tokens"]
    gains, window = [], None
    for s in SEEDS:
        evals = {m: {e["step"]: e for e in RunFiles(_run(_name(m, s))).metrics() if "val_loss" in e}
                 for m in ("baseline", "mhar")}
        k = RunFiles(_run(_name("baseline", s))).summary()["tail_k"]
        steps = [st for st, e in sorted(evals["baseline"].items()) if e["tokens"] <= budget and st in evals["mhar"]][-k:]
        gains.append(sum(evals["mhar"][st]["val_loss"] - evals["baseline"][st]["val_loss"] for st in steps) / k)
        window = (steps[0], steps[-1], evals["baseline"][steps[-1]]["tokens"])
    big_gain = big["mhar-h8"]["tail_mean_val_loss"] - big["baseline"]["tail_mean_val_loss"]
    return (f"At an equal {budget / 1e6:.1f}M tokens (the 100M runs' evaluations at steps {window[0]:,}-{window[1]:,}, "
            f"{window[2] / 1e6:.1f}M tokens), the 100M study's MHAR H=8 {MINUS} baseline is "
            f"{signed(sum(gains) / len(gains), 3)} over three seeds ({', '.join(signed(g, 3) for g in gains)}), "
            f"larger than the 350M pair's {signed(big_gain, 3)} (one seed).")


BLOCKS = {"main-table": main_table, "three-seed": three_seed, "downstream-seeds": downstream_seeds,
          "equal-tokens": equal_tokens}


def render(text: str) -> str:
    """``text`` with every numbers block replaced by its rendering (each block must be present once)."""
    for name, make in BLOCKS.items():
        pattern = re.compile(rf"(<!-- numbers:{name} -->\n)(?:.*?\n)?(<!-- /numbers:{name} -->)", re.S)
        if len(pattern.findall(text)) != 1:
            raise SystemExit(f"{README}: block numbers:{name} must appear exactly once")
        body = make()
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main(argv: list[str]) -> int:
    text = README.read_text()
    new = render(text)
    if argv[1:] == ["--check"]:
        if new != text:
            print(f"{README}: numbers blocks differ from the runs; run python {Path(__file__).relative_to(ROOT)}")
            return 1
        return 0
    if argv[1:]:
        print("usage: python results/study100m/readme_numbers.py [--check]", file=sys.stderr)
        return 2
    if new != text:
        README.write_text(new)
    print(f"{README}: {len(BLOCKS)} numbers blocks rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
