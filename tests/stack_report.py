"""`make test-latest`: run tests on the newest stack the ranges allow and say what changed.

    python tests/stack_report.py LOCK [pytest arguments...]

Runs pytest with the given arguments, then prints every installed package whose version
differs from the lock, and for each failed test the packages among those that its traceback
passes through (the likely culprits), e.g.

    FAILED tests/test_model.py::test_x -- in transformers 5.25.0 (lock 5.24.0): TypeError: ...

It also says where a newer transformers exists beyond pyproject's upper bound, with the command
that tries it. Exit status: pytest's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

TRACKED_BEYOND_BOUND = "transformers"


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if m:
            pins[normalise(m.group(1))] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    return {normalise(d.metadata["Name"]): d.version for d in metadata.distributions()}


def changed_against(lock: dict[str, str], have: dict[str, str]) -> dict[str, tuple[str, str]]:
    """name -> (locked, installed) for every locked package installed at another version."""
    return {n: (v, have[n]) for n, v in sorted(lock.items()) if n in have and have[n] != v}


def failures(junit: Path) -> list[tuple[str, str]]:
    """(test id, failure text) for every failed or erroring test in a JUnit XML report."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                path = case.get("classname", "").replace(".", "/")
                out.append((f"{path}.py::{case.get('name')}", (node.get("message") or "") + "\n" + (node.text or "")))
    return out


def culprits(text: str, changed: dict[str, tuple[str, str]]) -> list[str]:
    """The changed distributions whose top-level modules appear as site-packages frames in `text`."""
    modules = set(re.findall(r"site-packages/([A-Za-z0-9_]+)", text))
    dists = metadata.packages_distributions()
    names = {normalise(d) for m in modules for d in dists.get(m, [])}
    return [n for n in changed if n in names]


def newest_beyond_bound(name: str) -> str | None:
    """The newest release of `name` on the index when the installed one is older, else None."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True)
    m = re.search(rf"^{name} \(([^)]+)\)", proc.stdout, flags=re.MULTILINE)
    have = installed().get(normalise(name))
    return m.group(1) if m and have and m.group(1) != have else None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    lock = read_lock(Path(argv[0]))
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        status = subprocess.run([sys.executable, "-m", "pytest", f"--junitxml={junit}", *argv[1:]]).returncode
        failed = failures(junit) if junit.exists() else []
    changed = changed_against(lock, installed())
    print("\n== test-latest: the stack against the lock ==")
    if changed:
        print("newer or other than the lock: " + ", ".join(f"{n} {new} (lock {old})" for n, (old, new) in changed.items()))
    else:
        print("every locked package is at its locked version: nothing upstream has moved")
    for test, text in failed:
        names = culprits(text, changed)
        where = ", ".join(f"{n} {changed[n][1]} (lock {changed[n][0]})" for n in names) or \
            "no changed package in its traceback"
        last = next((ln.strip() for ln in reversed(text.strip().splitlines()) if ln.strip()), "")
        print(f"FAILED {test} -- in {where}: {last[:300]}")
    newer = newest_beyond_bound(TRACKED_BEYOND_BOUND)
    if newer:
        print(f"{TRACKED_BEYOND_BOUND} {newer} is out, beyond pyproject's upper bound; try it with "
              f"make test-latest LATEST_OVERRIDES='{TRACKED_BEYOND_BOUND}=={newer}'")
    print(f"result: {'PASSED' if status == 0 else 'FAILED'} ({len(failed)} failed)")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
