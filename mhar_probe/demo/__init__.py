"""`make demo`: the whole story on the embedded corpus, on two CPU cores; and the same stages for
any other plan (`mhar demo --plan ladder`: the GPU ladder of results/ladder).

Stages (each skips work that is already done, so a second run is quick):
  1. sweep     the plan's grids (demo: tiny baseline, hyper, attnres, mhar H in {2, 4, 8}, mhar_hw;
               a second seed of baseline / attnres / mhar for paired deltas) and narrower baselines
  2. capture   per-head routing weights of the routed runs on held-out text (xarray, netCDF)
  3. eval      held-out tasks through the LM Evaluation Harness, with samples
  4. probe     forced-compromise probes: width disagreement vs random-query null, collinearity,
               per-head deviations, head alignment
  5. stats     McNemar of the plan's pairs at every seed evaluated (and combined over seeds),
               tail-means and paired seed deltas, CEG fit
  6. claims    the claim table: each paper claim the runs can test, our interval, a verdict
  7. figures   every paper figure and table these runs allow
  8. report    one Markdown + HTML page with the claims, runs, tables and figures inline

Stages 1-3 need the models; 4-8 read only files, so `export.export_study` (no weights) is all a
report needs. Modules: `plan` (recipes, grids, sizes), `runs` (runs found through the sweep
manifests), `claims`, `export`, `report`, `run` (the stages, calling the library functions of
`analysis` and `figures` that the commands call). Every run shares the recipe and, per seed, the data order (paired comparisons).
"""

from .report import comparison_table, write_report
from .run import run_demo

__all__ = ["comparison_table", "run_demo", "write_report"]
