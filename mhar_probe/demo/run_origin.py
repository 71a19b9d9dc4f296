"""Where a claim's runs came from: the card and the commit, read from each run's own records.

A run trained since issue 51 carries its sessions (``summary.json["provenance"]["sessions"]``:
each start's code and card, `mhar_probe.provenance`). An older run carries neither; the only
commit its committed files hold is the git hash the evaluation harness recorded in its
``results_*.json`` (the tree that *evaluated* it, not necessarily the one that trained it), and no
card. `pair_note` says where paired runs differ, in one clause, or nothing where they agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..provenance import cards, commits
from ..runfiles import RunFiles


@dataclass(frozen=True)
class Origin:
    """One run's cards and commits, and which record gave them."""

    cards: tuple[str, ...]  # "N x NAME" per distinct card of its sessions; () where not recorded
    commits: tuple[str, ...]  # short commits; () where nothing records one
    source: str  # "sessions", "evaluation" (the harness's git hash) or "none"


def origin(run: Path) -> Origin:
    """The origin of the run folder ``run`` (its evaluations under ``run.parent / "evals"``)."""
    sessions = (RunFiles(run).summary().get("provenance") or {}).get("sessions")
    if sessions:
        return Origin(tuple(cards(sessions)), tuple(commits(sessions)), "sessions")
    hashes = []
    for path in sorted((run.parent / "evals" / run.name).rglob("results_*.json")):
        git_hash = json.loads(path.read_text()).get("git_hash")
        if isinstance(git_hash, str) and git_hash[:7] not in hashes:
            hashes.append(git_hash[:7])
    return Origin((), tuple(hashes), "evaluation" if hashes else "none")


def pair_note(runs: dict[str, Path]) -> str:
    """Where the runs (label -> folder) differ in card or commit, e.g. "paired runs differ in commit
    (as the evaluation harness recorded it): baseline s1 9cb9d2a, mhar H=8 s1 c3dcd43"; "" where
    they agree."""
    found = {name: origin(path) for name, path in runs.items()}
    parts = []
    recorded = {name: o.cards for name, o in found.items() if o.cards}
    if len(set(recorded.values())) > 1:
        parts.append("paired runs trained on different cards: "
                     + ", ".join(f"{name} {' then '.join(c)}" for name, c in recorded.items()))
    if recorded and len(recorded) < len(found):
        parts.append("cards not recorded for " + ", ".join(n for n in found if n not in recorded)
                     + " (trained before runs recorded their card)")
    known = {name: o for name, o in found.items() if o.commits}
    if len({o.commits for o in known.values()}) > 1:
        how = sorted({o.source for o in known.values()})
        where = " and ".join({"sessions": "from the runs' sessions",
                              "evaluation": "as the evaluation harness recorded it"}[s] for s in how)
        parts.append(f"paired runs differ in commit ({where}): "
                     + ", ".join(f"{name} {'+'.join(o.commits)}" for name, o in known.items()))
    return "; ".join(parts)


__all__ = ["Origin", "origin", "pair_note"]
