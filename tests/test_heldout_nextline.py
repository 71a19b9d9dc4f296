"""The indexed next-line builder picks exactly the items of the plain quadratic search it replaced
(the distractor nearest in length among other documents of the source, ties by hash, then pool
order), on documents built to have many ties, several sources, a document of its own source,
comment headers, boilerplate lines and a duplicated document."""

from __future__ import annotations

import hashlib
import random

import numpy as np

from mhar_probe.data.document import Document
from mhar_probe.evaluate.heldout import (ITEM_SEED, NL_CONTEXT_LINES, NL_LINE_CHARS, NL_MAX_PER_DOC, _stable_int,
                                         is_boilerplate, nextline_items)

COMMENT = ("#", "//", "/*", "*", "--", ";", "%", ".. ")


def reference_nextline_items(docs, max_total, seed=ITEM_SEED):
    """The definition, read literally: documents with distinct texts in seeded order; per document,
    target lines of the body in a seeded permutation; for each target, scan every other-document
    body line of its source."""
    lo, hi = NL_LINE_CHARS
    by_text = {}
    for d in sorted(docs, key=lambda d: d.id):
        by_text.setdefault(d.text, d)
    docs = sorted(by_text.values(), key=lambda d: (_stable_int(str(seed), "order", d.id), d.id))
    eligible = lambda ln: lo < len(ln.strip()) <= hi and not is_boilerplate(ln)  # noqa: E731

    def body(doc):
        lines = [ln.rstrip() for ln in doc.text.splitlines()]
        first = 0
        while first < len(lines) and (not lines[first].strip() or lines[first].lstrip().startswith(COMMENT)):
            first += 1
        return first, lines

    pool = {}
    for doc in docs:
        first, lines = body(doc)
        for ln in lines[first:]:
            if eligible(ln):
                pool.setdefault(doc.source, []).append((len(ln), doc.id, ln))
    for lines in pool.values():
        lines.sort()
    per_doc = []
    for doc in docs:
        first, lines = body(doc)
        cands = [x for x in pool.get(doc.source, []) if x[1] != doc.id]
        items = []
        text_key = hashlib.sha1(doc.text.encode()).hexdigest()
        order = first + np.random.default_rng(_stable_int(str(seed), "nextline", text_key)).permutation(
            max(0, len(lines) - first))
        for i in order.tolist():
            if len(items) >= NL_MAX_PER_DOC or not cands:
                break
            target = lines[i]
            context = [ln for ln in lines[first:i] if ln.strip()][-NL_CONTEXT_LINES:]
            if not eligible(target) or not context or is_boilerplate("\n".join(context)):
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
    seen, out = set(), []
    for r in rows:
        key = (r["context"], r["choices"][r["label"]])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out[:max_total]


def test_matches_the_quadratic_reference():
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "x", "return", "value", "  # note"]
    docs = []
    for k in range(40):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(rng.randint(3, 60))]
        lines = [ln if rng.random() > 0.1 else "" for ln in lines]  # blank lines: the context skips them
        lines = [ln if rng.random() > 0.02 else "value copyright 2020 x" for ln in lines]  # boilerplate lines
        if k % 4 == 0:  # a comment header: never context, target or distractor
            lines = ["# header alpha beta gamma", "#", "// more header text", ""] + lines
        docs.append(Document(id=f"d{k:02d}", source=f"s{k % 3}" if k < 39 else "alone", text="\n".join(lines)))
    docs.append(Document(id="d99", source="s0", text=docs[3].text))  # a copy of d03: read once
    expected = reference_nextline_items(docs, 5000)
    assert len(expected) > 300
    assert nextline_items(docs, 5000) == expected
    assert not [it for it in expected if it["source"] == "alone"]  # no other document: no items
    assert not [it for it in expected if it["id"].startswith("d99^")]
    assert not [it for it in expected if "header" in it["context"] or "opyright" in it["context"]
                or any("header" in c or "opyright" in c for c in it["choices"])]
