"""A reader of a clean clone is never sent to a missing page (issue 34, loose ends).

Every Markdown page that the code (modules, benchmark scripts, device scripts) cites must be in
the repository: a path that starts at a top-level folder from the root, a bare page name
(`README.md`, `DESIGN.md`, `results_h100.md`) beside the citing file or in a folder above it.
A page that left the tree is cited with the commit that holds it (`git show COMMIT:PATH`), and
such a line is not checked. Generated outputs (`claims.md`, `report.md`, ...) are not pages:
only upper-case names, `results*.md` and repository paths are read as citations.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
TOKEN = re.compile(r"[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b")


def _sources() -> list[Path]:
    """The tracked code a reader follows citations from (tests build fake pages: left out)."""
    out = subprocess.run(["git", "ls-files", "*.py", "*.sh", "Makefile"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return [ROOT / p for p in out if not p.startswith("tests/")]


def _is_citation(token: str) -> bool:
    name = token.rsplit("/", 1)[-1]
    if "/" in token:
        return token.split("/", 1)[0] in TOP or token.startswith("kernels/")
    return name[:-3].isupper() or name.startswith("results")


def _resolves(token: str, source: Path) -> bool:
    if (ROOT / token).exists():
        return True
    return any((folder / token).exists() for folder in source.parents if ROOT in (folder, *folder.parents))


def dangling(path: Path, text: str) -> list[str]:
    """`file:line: token` for every page cited in `text` (the file `path`) that is not in the tree."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if "git show" in line:
            continue
        for token in TOKEN.findall(line):
            if _is_citation(token) and not _resolves(token, path) and "NAME" not in token:
                out.append(f"{path.relative_to(ROOT)}:{n}: {token}")
    return out


def test_no_module_cites_a_page_that_is_not_in_the_repository():
    missing = [m for p in _sources() for m in dangling(p, p.read_text(encoding="utf-8", errors="replace"))]
    assert not missing, "pages cited but missing (cite the README section or the paper instead):\n" + \
        "\n".join(missing)


@pytest.mark.parametrize("text,bad", [("see DESIGN.md section 4", True), ("see README.md", False),
                                      ("benchmarks/kernels/results.md", False),
                                      ("benchmarks/kernels/results_h100.md", True),
                                      ("see kernels/README.md", False), ("writes claims.md", False)])
def test_the_scan_reads_a_citation(text, bad):
    module = ROOT / "mhar_probe" / "kernels" / "cited.py"  # judged as a module of the package would be
    assert bool(dangling(module, f'"""{text}"""\n')) == bad
