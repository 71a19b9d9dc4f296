"""A local two-way multiple-choice task in the LM Evaluation Harness's YAML format, written from the
embedded corpus's held-out lines, for models without a run's corpus split (an imported checkpoint):
given a line, the real next line against another line of the text.

`write_nextline_task(DIR)` writes DIR/nextline.jsonl (rows {"context", "choices", "label"}) and
DIR/nextline.yaml (task `toy_nextline`, metrics acc and acc_norm); `mhar eval MODEL --tasks
toy_nextline --tasks-dir DIR` evaluates it with its samples logged, what `mhar stats mcnemar` reads.
"""

from __future__ import annotations

import json
from pathlib import Path

NEXTLINE_TASK = "toy_nextline"


def write_nextline_task(root: Path, *, corpus_max_bytes: int = 150_000, items: int = 40,
                        max_chars: int = 40) -> Path:
    """The task folder `root` (created); lines of 9..`max_chars` characters, so that context and
    choice fit a 32-token context; the label alternates between the two choices."""
    from ..data import load_corpus

    corpus = load_corpus(None, max_bytes=corpus_max_bytes)
    lines = [ln.strip() for d in corpus.val for ln in d.text.splitlines() if 8 < len(ln.strip()) <= max_chars]
    rows = []
    for i in range(min(items, len(lines) - 1)):
        wrong = lines[(i * 7 + len(lines) // 2) % len(lines)]
        if wrong == lines[i + 1]:
            continue
        choices = [lines[i + 1], wrong] if i % 2 == 0 else [wrong, lines[i + 1]]
        rows.append({"context": lines[i], "choices": choices, "label": i % 2})
    root.mkdir(parents=True, exist_ok=True)
    (root / "nextline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "nextline.yaml").write_text(f"""task: {NEXTLINE_TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'nextline.jsonl'}
output_type: multiple_choice
test_split: test
doc_to_text: "{{{{context}}}}\\n"
doc_to_target: label
doc_to_choice: "{{{{choices}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
  - metric: acc_norm
metadata:
  version: 1.0
""")
    return root
