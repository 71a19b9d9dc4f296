"""Shared by the tests that regenerate a committed study folder (results/ladder, results/study100m), and a
synthetic 350M study (results/study350m before its runs are in)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


def without_paths(obj, approx: bool = False):
    """`obj` less its "path" keys; with `approx`, floats compare to 1e-9 (least-squares fits differ
    in their last bits between machines)."""
    if isinstance(obj, dict):
        return {k: without_paths(v, approx) for k, v in obj.items() if k != "path"}
    if isinstance(obj, list):
        return [without_paths(v, approx) for v in obj]
    if approx and isinstance(obj, float):
        return pytest.approx(obj, rel=1e-9, abs=1e-12, nan_ok=True)
    return obj


def baseline_only_study(study_dir: Path, dest: Path) -> list[dict]:
    """`study_dir`'s runs/ copied into `dest`/runs as the study stood before its first routed run:
    no attnres or MHAR run, no evaluation, the manifest listing the baselines alone (returned)."""
    shutil.copytree(study_dir / "runs", dest / "runs",
                    ignore=shutil.ignore_patterns("100m-mhar-*", "100m-attnres-*", "evals"))
    manifest = json.loads((dest / "runs" / "manifest.json").read_text())
    manifest["runs"] = [r for r in manifest["runs"] if r["axes"]["method"] == "baseline"]
    (dest / "runs" / "manifest.json").write_text(json.dumps(manifest))
    return manifest["runs"]


#: a synthetic study: held-out loss per evaluation of the plan's schedule, per seed, and each arm's gain
BASE_LOSS = {0: 3.00, 1: 3.02, 2: 2.99}
GAIN = {("attnres", None): (-0.12, [0.000, 0.004, -0.003]), ("mhar", 8): (-0.15, [0.001, 0.003, -0.002]),
        ("mhar", 16): (-0.10, [0.0]), ("hyper", None): (-0.07, [0.0])}


def synthetic_loss(method: str, H: int | None, seed: int, step: int) -> float:
    """3 + 6 / (1 + step / 500) plus the seed's offset; an arm's gain grows to its end value by the last
    quarter of PAPER350's schedule."""
    from mhar_probe.demo.plan import PAPER350

    base = BASE_LOSS[seed] + 6.0 / (1 + step / 500)
    if method == "baseline":
        return base
    end, noise = GAIN[(method, H)]
    return base + (end + noise[seed]) * min(1.0, step / (0.75 * PAPER350.steps))


def synthetic_paper350_study(out: Path, arms: list[tuple[str, int | None, int]]) -> None:
    """The runs of PAPER350 named by (method, H, seed), as an export holds them (summary, train options,
    metrics, the sweep's manifest), with the losses of `synthetic_loss` at the plan's evaluations."""
    from mhar_probe.demo.plan import PAPER350, evaluation_steps
    from mhar_probe.sweep.manifest import write_manifest
    from mhar_probe.tail import full_tail_mean

    specs = {(s.method, s.H if s.method == "mhar" else None, s.seed): s
             for g in PAPER350.grids.values() for s in PAPER350.grid(g).expand()}
    rows = []
    for method, H, seed in arms:
        spec = specs[(method, H, seed)]
        run = out / "runs" / spec.name
        run.mkdir(parents=True)
        steps = evaluation_steps(PAPER350.steps, PAPER350.recipe["eval_every"])
        points = [(t, synthetic_loss(method, H, seed, t)) for t in steps]
        (run / "metrics.jsonl").write_text("".join(json.dumps(dict(
            step=t, tokens=t * 32768, flops=t * 1e15, loss=v + 0.01, tokens_per_s=4.7e5, val_loss=v)) + "\n"
            for t, v in points))
        options = dict(method=method, preset="350m", seed=seed, lr=5e-4, kv_heads=8, heads=H, steps=PAPER350.steps,
                       corpus="corpus350")
        (run / "train_config.json").write_text(json.dumps(options))
        (run / "config.json").write_text(json.dumps(dict(hidden_size=1024, num_hidden_layers=24,
                                                         num_key_value_heads=8)))
        (run / "summary.json").write_text(json.dumps(dict(
            options, finished=True, routing_heads=H, tail_mean_val_loss=full_tail_mean(points), tokens=PAPER350.steps * 32768,
            parameters=385_929_216, flops=3.3e18 * (1.01 if method != "baseline" else 1.0),
            initial_val_loss=points[0][1], final_val_loss=points[-1][1])))
        rows.append(dict(name=spec.name, axes=spec.axes(), status="finished"))
    write_manifest(out / "runs", {}, rows)
