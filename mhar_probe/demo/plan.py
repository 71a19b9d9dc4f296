"""What the demo trains and measures: the shared recipe, the grids, and the sizes of the
capture and evaluation. Every run shares the recipe and, per seed, the data order."""

from __future__ import annotations

from typing import Any

from ..sweep import SweepGrid

DEMO_STEPS = 150
RECIPE = dict(lr=2e-3, batch_size=8, eval_every=15, eval_batches=2, checkpoint_every=50,
              corpus_max_bytes=4_000_000)
MAIN_GRID = dict(methods=["baseline", "hyper", "attnres", "mhar"], heads=[2, 4, 8], seeds=[42])
HW_GRID = dict(methods=["mhar_hw"], heads=[None], seeds=[42])  # one full-width query per KV group: H = KV
SEED_GRID = dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[43])
LADDER_WIDTHS = (64, 96)  # narrower baselines: with the d=128 baseline, three compute budgets
ROUTED_METHODS = ("attnres", "mhar", "mhar_hw")  # the runs whose routing is captured and probed
MAIN_SEED = 42  # the seed of the captured, evaluated and CEG runs
EVAL_TASKS = ["mhar_heldout_ppl", "mhar_lastword", "mhar_nextline"]
EVAL_LIMIT = 200
CAPTURE_TOKENS = 16384
MCNEMAR_BOOTSTRAP = 2000
CEG_ALPHAS = [0.089, 0.15]


def grid(axes: dict[str, Any], steps: int, extra: dict[str, int] | None = None) -> SweepGrid:
    """A `tiny` grid with the demo's recipe over `axes` (`extra`: model-config overrides)."""
    common: dict[str, Any] = {k: v for k, v in RECIPE.items() if k != "lr"}
    common.update(progress=False, **({"extra": extra} if extra else {}))
    return SweepGrid.from_dict(dict(presets=["tiny"], steps=[steps], lrs=[RECIPE["lr"]], common=common, **axes))


def ladder_extra(width: int) -> dict[str, int]:
    """Model overrides of a ladder baseline of width `width`."""
    return dict(hidden_size=width, intermediate_size=3 * width)
