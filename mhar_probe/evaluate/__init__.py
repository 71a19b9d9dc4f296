"""Evaluation through EleutherAI's LM Evaluation Harness, offline (`mhar eval`).

`run_eval(EvalConfig(run, tasks, ...))` wraps a run's model and tokenizer in the harness's
`HFLM`, evaluates local tasks (the shipped held-out tasks `mhar_heldout_ppl`,
`mhar_lastword` and `mhar_nextline`, or YAMLs given with `--tasks-dir`) and writes the harness's own
`results_<date>.json` / `samples_<task>_<date>.jsonl`, which `mhar stats mcnemar` reads.
"""

from .errors import EvalError
from .harness import EvalConfig, EvalSummary, run_eval
from .heldout import LASTWORD_TASK, PPL_TASK, SHIPPED_TASKS, heldout_tasks

__all__ = ["EvalConfig", "EvalError", "EvalSummary", "LASTWORD_TASK", "PPL_TASK", "SHIPPED_TASKS",
           "heldout_tasks", "run_eval"]
