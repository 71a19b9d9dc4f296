"""`make demo`: the whole story on the embedded corpus, on two CPU cores.

Stages (each skips work that is already done, so a second run is quick):
  1. sweep     tiny baseline, hyper, attnres, mhar (H in {2, 4, 8}), mhar_hw; a second seed of
               baseline / attnres / mhar for paired deltas; two narrower baselines (compute ladder)
  2. capture   per-head routing weights of the routed runs on held-out text (xarray, netCDF)
  3. probe     forced-compromise probes: width disagreement vs random-query null, collinearity,
               per-head deviations, head alignment
  4. eval      held-out perplexity and last-word accuracy through the LM Evaluation Harness
  5. stats     McNemar baseline vs MHAR, tail-means and paired seed deltas, CEG fit
  6. figures   every paper figure and table these runs allow
  7. report    one Markdown + HTML page with the tables and figures inline

Modules: `plan` (recipe, grids, sizes), `runs` (runs found through the sweep manifests),
`analysis_steps` (typed calls into analysis / figures), `report`, `run` (the stages).
Every run shares the recipe and, per seed, the data order (paired comparisons).
"""

from .report import comparison_table, write_report
from .run import run_demo

__all__ = ["comparison_table", "run_demo", "write_report"]
