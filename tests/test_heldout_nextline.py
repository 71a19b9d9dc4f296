"""The indexed next-line builder picks exactly the items of the plain quadratic search it replaced
(the distractor nearest in length among other documents of the source, ties by hash, then pool
order), on documents built to have many ties, several sources and a document of its own source."""

from __future__ import annotations

import random

from mhar_probe.data.document import Document
from mhar_probe.evaluate.heldout import NL_CONTEXT_LINES, NL_LINE_CHARS, NL_MAX_PER_DOC, _stable_int, nextline_items


def reference_nextline_items(docs, max_total):
    """The definition, read literally: for each target, scan every other-document line of its source."""
    lo, hi = NL_LINE_CHARS
    docs = sorted(docs, key=lambda d: d.id)
    eligible = lambda ln: lo < len(ln.strip()) <= hi  # noqa: E731
    pool = {}
    for doc in docs:
        for ln in doc.text.splitlines():
            if eligible(ln):
                pool.setdefault(doc.source, []).append((len(ln.rstrip()), doc.id, ln.rstrip()))
    for lines in pool.values():
        lines.sort()
    per_doc = []
    for doc in docs:
        lines = [ln.rstrip() for ln in doc.text.splitlines()]
        cands = [x for x in pool.get(doc.source, []) if x[1] != doc.id]
        items = []
        for i in range(1, len(lines)):
            if len(items) >= NL_MAX_PER_DOC or not cands:
                break
            target = lines[i]
            context = [ln for ln in lines[:i] if ln.strip()][-NL_CONTEXT_LINES:]
            if not eligible(target) or not context:
                continue
            h = _stable_int(doc.id, str(i))
            j = min(range(len(cands)), key=lambda k: (abs(cands[k][0] - len(target)), (k * 2654435761 + h) % 97))
            wrong = cands[j][2]
            if wrong.strip() == target.strip():
                continue
            label = h % 2
            items.append({"id": f"{doc.id}^{i}", "source": doc.source, "context": "\n".join(context),
                          "choices": [target, wrong] if label == 0 else [wrong, target], "label": label})
        per_doc.append(items)
    rows = [x for row in __import__("itertools").zip_longest(*per_doc) for x in row if x is not None]
    return rows[:max_total]


def test_matches_the_quadratic_reference():
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "x", "return", "value", "  # note"]
    docs = []
    for k in range(40):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(rng.randint(3, 60))]
        lines = [ln if rng.random() > 0.1 else "" for ln in lines]  # blank lines: the context skips them
        docs.append(Document(id=f"d{k:02d}", source=f"s{k % 3}" if k < 39 else "alone", text="\n".join(lines)))
    expected = reference_nextline_items(docs, 5000)
    assert len(expected) > 300
    assert nextline_items(docs, 5000) == expected
    assert not [it for it in expected if it["source"] == "alone"]  # no other document: no items
