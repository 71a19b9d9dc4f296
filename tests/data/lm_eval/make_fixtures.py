"""Regenerate the lm-eval fixture files from a real, offline LM Evaluation Harness run.

Run from the repository root:  .venv/bin/python tests/data/lm_eval/make_fixtures.py

Two "arms" (deterministic fake language models that differ in a seed and a skill level)
are evaluated on two local tasks with `log_samples=True`, and the files are written through
`EvaluationTracker.save_results_aggregated` / `save_results_samples`, exactly as the
`lm_eval` CLI does:

- `toy_mc`:  multiple_choice, metrics acc and acc_norm (filter "none").
- `toy_gen`: generate_until with two filters ("strict-match", "flexible-extract"), metric
  exact_match, so each document appears on two lines.

`new/` holds the files as written by the installed harness (>= 0.4.7: `filter` and
`metrics` fields). `old/` holds the same runs in the pre-0.4.7 layout: identical lines with
the `filter` and `metrics` keys removed (the harness added exactly those two keys in 0.4.7;
hashes date from 0.4.3).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
N_DOCS = 60


def _u(*parts: object) -> float:
    """Deterministic uniform(0, 1) from a hash of the parts."""
    h = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(h[:12], 16) / 16**12


def make_data(root: Path) -> None:
    mc, gen = [], []
    for i in range(N_DOCS):
        a, b = i % 7 + 2, i % 5 + 3
        right = a * b
        choices = [str(right + k) for k in (-2, 0, 3, 7)]
        mc.append({"question": f"What is {a} times {b}?", "choices": choices, "label": 1})
        gen.append({"question": f"Compute {a} plus {b} plus {i}.", "answer": str(a + b + i)})
    (root / "toy_mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mc))
    (root / "toy_gen.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gen))
    (root / "toy_mc.yaml").write_text(f"""task: toy_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'toy_mc.jsonl'}
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: "{{{{choices}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
""")
    (root / "toy_gen.yaml").write_text(f"""task: toy_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {root / 'toy_gen.jsonl'}
output_type: generate_until
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
generation_kwargs:
  until:
    - "Question:"
  do_sample: false
filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### (\\\\-?[0-9]+)"
      - function: "take_first"
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(-?[0-9]+)"
      - function: "take_first"
metadata:
  version: 1.0
""")


def make_lm(seed: int, skill: float):
    from lm_eval.api.model import LM

    class ToyLM(LM):
        """Deterministic fake model: right with probability `skill`, from hashed inputs."""

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            out = []
            for r in requests:
                ctx, cont = r.args
                a, b = (int(x) for x in ctx.split("What is ")[1].split("?")[0].split(" times "))
                bonus = 2.0 if (cont.strip() == str(a * b) and _u(seed, ctx) < skill) else 0.0
                out.append((-3.0 * _u(seed, ctx, cont) - len(cont) * 0.1 + bonus, False))
            return out

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            return [-1.0 for _ in requests]

        def generate_until(self, requests, disable_tqdm: bool = False):
            out = []
            for r in requests:
                ctx = r.args[0]
                nums = [int(x) for x in ctx.replace(".", " ").split() if x.isdigit()]
                ans = sum(nums[-3:])
                u = _u(seed, ctx)
                if u < skill * 0.6:
                    out.append(f" {ans - 1} so #### {ans}")       # strict and flexible right
                elif u < skill:
                    out.append(f" The answer is {ans}")          # only flexible right
                else:
                    out.append(f" #### {ans + 1}")               # both wrong
            return out

    return ToyLM()


def run_arm(name: str, seed: int, skill: float, task_dir: Path, out_dir: Path) -> None:
    from lm_eval import evaluator
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(task_dir))
    tracker = EvaluationTracker(output_path=str(out_dir / name))
    results = evaluator.simple_evaluate(
        model=make_lm(seed, skill), tasks=["toy_mc", "toy_gen"], task_manager=tm,
        log_samples=True, evaluation_tracker=tracker, random_seed=0, numpy_random_seed=0,
        torch_random_seed=0, fewshot_random_seed=0,
    )
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task_name in results["configs"]:
        tracker.save_results_samples(task_name=task_name, samples=samples[task_name])


def scrub(path: Path, tmp: Path) -> None:
    """Remove machine-specific absolute paths so fixtures are stable."""
    text = path.read_text(encoding="utf-8").replace(str(tmp), "/tmp/toy_tasks")
    if path.name.startswith("results_"):
        data = json.loads(text)
        data["pretty_env_info"] = "(removed from the fixture)"
        text = json.dumps(data, indent=2, ensure_ascii=False)
    path.write_text(text, encoding="utf-8")


def main() -> None:
    new = HERE / "new"
    old = HERE / "old"
    for d in (new, old):
        shutil.rmtree(d, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        make_data(tmp_p)
        run_arm("arm_a", seed=1, skill=0.55, task_dir=tmp_p, out_dir=new)
        run_arm("arm_b", seed=2, skill=0.75, task_dir=tmp_p, out_dir=new)
        for f in new.rglob("*.json*"):
            scrub(f, tmp_p)
    # Old layout: the same lines without the 0.4.7 `filter` / `metrics` keys.
    shutil.copytree(new, old)
    for f in old.rglob("samples_*.jsonl"):
        lines = [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
        for rec in lines:
            rec.pop("filter", None)
            rec.pop("metrics", None)
        f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
