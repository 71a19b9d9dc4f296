"""benchmarks/: every path that a results.md or the index names exists (a reader can follow it).

Paths are the backticked tokens that name a file or folder: they start at a top-level folder of
the repository or end in a file suffix; a bare name is looked up beside the page, and a pattern
(`*`) must match a file. Placeholders (`...`, `$OUT`), commands (anything with a space) and the
"Superseded" sections (paths that left the tree, read with `git show COMMIT:PATH`) are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
TOPICS = ["kernels", "train_throughput", "capture_overhead", "capture8b", "cpt", "multi_gpu", "cpu_threads"]
TOP = ("benchmarks/", "mhar_probe/", "tests/", "figures/", "notebooks/", "analysis/", "results/ladder/", "results/study100m/")
SUFFIXES = (".json", ".md", ".py", ".sh", ".ipynb")
PAGES = sorted([BENCH / "README.md", *BENCH.glob("*/results.md")])


def named_paths(page: Path) -> list[str]:
    text = page.read_text()
    text = re.split(r"^## Superseded", text, flags=re.M)[0]
    out = []
    for token in re.findall(r"`([^`]+)`", text):  # a code span may run over a line break
        if any(c in token for c in " \n$<>") or "..." in token or ":" in token:
            continue
        if token.startswith(TOP) or token.endswith(SUFFIXES) or token.endswith("/"):
            out.append(token)
    return out


def test_one_results_page_per_topic():
    assert [p.parent.name for p in PAGES if p.name == "results.md"] == sorted(TOPICS)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(BENCH)))
def test_named_paths_exist(page):
    missing = []
    for token in named_paths(page):
        base = ROOT if token.startswith(TOP) else page.parent
        if not ((base / token).exists() if "*" not in token else any(base.glob(token))):
            missing.append(token)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_figures_read_the_topic_folders(tmp_path):
    """table_cost finds the end-to-end files in benchmarks/train_throughput/, and table_kernel_speed
    lists the kernel files that compare triton with compile (not the triton-only runs beside them),
    the newest run per card, shape and H."""
    from figures.build import build

    report = build(None, tmp_path / "figs", only=["table_cost", "table_kernel_speed"], benchmarks=[BENCH])
    assert not report.failed and not report.skipped
    cost = report.made["table_cost"][0].data["table"]
    files = {row.cells[-1].value for row in cost.rows if row.source == "yours"}
    assert "h100.json" in files
    presets = {row.cells[0].value for row in cost.rows if row.source == "yours" and row.cells[-1].value == "h100.json"}
    assert presets == {"100m", "350m", "1b"}  # one file, a row per preset and arm
    speedups = report.made["table_kernel_speed"][0].data["graph_speedups"]
    assert speedups and all(v is not None and v > 1 for v in speedups.values())
    # the newest run per card, shape and H: the H100 kernel tables supersede results_h100.json (11-27),
    # 1B at H = 1 comes from its 12-06 run with FLA in the process, 100M and 350M at H = 1 from their
    # 12-07 runs with FLA (which supersede the 12-06 734ef24 table entirely), and every shape at H = 8
    # from the 12-07 table (which supersedes the 12-06 1B file entirely)
    assert {name for name, _, _ in speedups} == {"results_h200.json", "h100_kernel_table_100m_fla_ec96206.json",
                                                 "h100_kernel_table_350m_fla_ec96206.json",
                                                 "h100_kernel_table_1b_fla_ce3036b.json",
                                                 "h100_kernel_table_h8_34f0258.json"}
    assert {(shape, H) for name, shape, H in speedups if name == "h100_kernel_table_1b_fla_ce3036b.json"} == {("1B", 1)}
    assert {(shape, H) for name, shape, H in speedups if name == "h100_kernel_table_h8_34f0258.json"} == \
        {("100M", 8), ("350M", 8), ("1B", 8)}
    assert {(shape, H) for name, shape, H in speedups if "ec96206" in name} == {("100M", 1), ("350M", 1)}
    assert len(speedups) == 12  # 3 shapes x H 1, 8 on each card
