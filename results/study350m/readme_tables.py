"""The generated parts of results/study350m/README.md: the table of runs (from the committed runs'
summaries, metrics and sessions) between `<!-- runs:begin -->` and `<!-- runs:end -->`.

    python results/study350m/readme_tables.py            # rewrites the marked part of the README
    python results/study350m/readme_tables.py --check    # exit 1 if the README's part is stale

tests/test_study350m.py runs the check, so no number of the table is written by hand.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "results" / "study100m"))
from table import rows_of  # noqa: E402  (results/study100m/table.py: one reader of a study's runs)

README = HERE / "README.md"
BEGIN, END = "<!-- runs:begin -->", "<!-- runs:end -->"


def runs_table(study: Path) -> str:
    rows = rows_of(study)
    if not rows:
        return "No run is in yet.\n"
    seed = lambda name: re.search(r"-s(\d+)-n\d+$", name).group(1)  # noqa: E731  (the sweep's run names)
    base = {seed(r["run"]): r["tail_mean"] for r in rows if "-baseline-" in r["run"] and r["tail_mean"]}
    out = ["| run | status | steps | tokens | tail-mean val loss | - same-seed baseline | tokens/s | epochs "
           "| card | commit |", "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ref = base.get(seed(r["run"]))
        delta = (f"{r['tail_mean'] - ref:+.4f}" if ref is not None and r["tail_mean"] is not None
                 and "-baseline-" not in r["run"] else "")
        fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        out.append(f"| {r['run']} | {r['status']} | {r['steps']:,} | {r['tokens']:,} | {fmt(r['tail_mean'], '.4f')} "
                   f"| {delta} | {fmt(r['tokens_per_s'], ',.0f')} | {fmt(r['epochs'], '.2f')} | {r['cards'] or '-'} "
                   f"| {r['commits'] or '-'} |")
    return "\n".join(out) + "\n"


def updated(text: str, table: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main(argv: list[str]) -> int:
    text = README.read_text()
    new = updated(text, runs_table(HERE))
    if "--check" in argv:
        return 0 if new == text else 1
    README.write_text(new)
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
