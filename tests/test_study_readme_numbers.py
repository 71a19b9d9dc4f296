"""results/study100m/README.md's numbers come from the committed files: its generated blocks equal
what results/study100m/readme_numbers.py renders from the runs now, and the numbers the prose
quotes from the claim table (the CEG reading, the per-KV margin, the verdict counts of the
top-level README) are the claim table's."""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "study100m"
sys.path.insert(0, str(STUDY))

import readme_numbers  # noqa: E402  (results/study100m/readme_numbers.py)

README = (STUDY / "README.md").read_text()


def _claims(folder: Path = STUDY) -> dict[str, dict]:
    return {c["key"]: c for c in json.loads((folder / "claims.json").read_text())}


def _ascii(text: str) -> str:
    return text.replace("\u2212", "-")


def test_generated_blocks_are_the_runs_numbers_now():
    assert readme_numbers.render(README) == README, "run python results/study100m/readme_numbers.py"
    for name in readme_numbers.BLOCKS:
        assert f"<!-- numbers:{name} -->" in README


def test_main_table_reads_the_tail_window_of_the_runs():
    first, last, tokens = readme_numbers.tail_window("100m-baseline-kv4-lr5e-4-s0-n3815")
    assert (first, last) == (3575, 3815) and round(tokens / 1e6, 1) == 15.7
    assert "steps 3,575-3,815, 15.7M tokens" in README and "3,565" not in README
    assert readme_numbers.resumes("100m-attnres-h1-kv4-lr5e-4-s0-n3815") == "3,750"  # disclosed in the table


def test_three_seed_block_agrees_with_the_claim_table():
    claims = _claims()
    block = _ascii(README.split("<!-- numbers:three-seed -->")[1].split("<!--")[0])
    for key, what in (("delta_attnres", "attnres - baseline"), ("delta_mhar", "MHAR H=8 - baseline")):
        interval = re.match(r"([+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\])", claims[key]["ours"]).group(1)
        assert f"{what} = {interval}" in block
    order = re.search(r"mhar H=8 - attnres ([+-]\d\.\d{3} \[[^]]+\])", claims["order"]["ours"]).group(1)
    assert f"MHAR H=8 - attnres = {order}" in block


def test_prose_quotes_the_claim_table():
    claims = _claims()
    ceg = re.search(r"alpha (\d\.\d{3})\): (\d\.\d\dx \[\d\.\d\dx, \d\.\d\dx\])", claims["ceg"]["ours"])
    assert f"alpha {ceg.group(1)}" in README and ceg.group(2) in README
    assert claims["ceg"]["verdict"] == "not replicated" and "not replicated at the study's own exponent" in README
    margin = re.search(r"margin (\d\.\d{3})", claims["optimum"]["note"]).group(1)
    assert f"inside the {margin} margin" in README
    scale = re.search(r"100M -> 350M ([+-]\d\.\d{3} \[[^]]+\])", claims["scale"]["ours"]).group(1)
    assert _ascii(f"100M → 350M as {scale}") in _ascii(README).replace("\n  ", " ")
    assert "differ in commit" in claims["scale"]["note"] and "differ in commit" in claims["delta_mhar"]["note"]


def test_top_readme_counts_the_claim_verdicts():
    counts = collections.Counter(c["verdict"] for c in _claims().values())
    top = (ROOT / "README.md").read_text().replace("\n", " ")
    assert (f"Of its {sum(counts.values())} claim rows {counts['replicated']} replicate, "
            f"{counts['not replicated']} do not and {counts['inconclusive at this scale']} are inconclusive") in top
