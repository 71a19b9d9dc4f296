"""Statistics on evaluation outputs and training curves (paper: McNemar, tail-means, seeds,
LR sweep, compute-equivalent gain).

Modules, one job each:
  errors     StatsError, the user-error type
  atomic     temp-file + rename output
  mcnemar    exact McNemar / binomial p-values, paired bootstrap, Holm, per-task comparison
  lm_eval_io reader for LM Evaluation Harness `--log_samples` output and pairing of two arms
  report     table / CSV / JSON / LaTeX rendering of comparison rows
  curves     metrics.jsonl reader, tail-means, paired seed deltas, best-vs-best LR
  ceg        power-law fits and compute-equivalent gain
  cli        `stats mcnemar|ceg|tails` argparse sub-commands
"""

from .errors import StatsError

__all__ = ["StatsError"]
