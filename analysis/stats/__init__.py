"""Statistics on evaluation outputs and training curves (paper: McNemar, tail-means, seeds,
LR sweep, compute-equivalent gain).

Modules, one job each:
  errors     StatsError, the user-error type
  output     refuse-to-clobber atomic writes
  mcnemar    exact McNemar / binomial p-values, paired bootstrap, Holm, per-task comparison
  lm_eval_io reader for LM Evaluation Harness `--log_samples` output and pairing of two arms
  report     table / CSV / JSON / LaTeX rendering of comparison rows
  curves     metrics.jsonl reader, tail-means, paired seed deltas, best-vs-best LR, gain over training
  ceg        power-law fits and compute-equivalent gain
  text       the printed tables and JSON files of the commands
  paired_eval  `mhar stats mcnemar`: mcnemar_eval_dirs -> McNemar
  mcnemar_seeds  a pair's McNemar at every seed and the line across seeds (CMH over seeds as strata)
  tails      `mhar stats tails`: tails -> Tails
  gain       `mhar stats ceg`: compute_equivalent_gain -> Gain
  gain_curves  a study's paired gain over training: gain_curves -> GainCurves (JSON and markdown)
The command line (`mhar_probe.cli.stats`) parses, calls these and prints their `lines()`.
"""

from .errors import StatsError

__all__ = ["StatsError"]
