"""Shared by the tests that regenerate a committed study folder (results/ladder, results/study100m), and a
synthetic 350M study (results/study350m before its runs are in)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
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


#: a synthetic evaluation: per task, each arm's accuracy and the number of items
ACCURACY = {"mhar_lastword": {"baseline": 0.27, "attnres": 0.29, "mhar": 0.33, "hyper": 0.28},
            "mhar_nextline": {"baseline": 0.80, "attnres": 0.81, "mhar": 0.815, "hyper": 0.80}}
EVAL_ITEMS = 300
EVAL_DATE = "2026-11-28T12-00-00.000000"


def synthetic_correct(method: str, H: int | None, seed: int, task: str, n: int = EVAL_ITEMS) -> np.ndarray:
    """Per item, whether the arm answers it right, with probability the arm's accuracy (ACCURACY): for 70% of
    the items (w_i < 0.7) the seed's shared draw decides (u_i < acc: the seed's arms agree there), for the
    rest the arm's own (v_i < acc). [n] bool"""
    task_id = sorted(ACCURACY).index(task)
    u = np.random.default_rng([seed, task_id]).random(n)
    w, v = np.random.default_rng([seed, task_id, 1 + sorted(ACCURACY[task]).index(method), H or 0]).random((2, n))
    acc = ACCURACY[task][method]
    return np.where(w < 0.7, u < acc, v < acc)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def synthetic_eval(folder: Path, name: str, method: str, H: int | None, seed: int) -> None:
    """What the eval stage writes for one run (mhar_probe.evaluate.harness: the harness's own files under
    `folder`/<model name>/, and `folder`/provenance.json): PAPER350's tasks, per item its correctness from
    `synthetic_correct` in the sample lines of harness 0.4.13 (mhar_lastword: loglikelihood, `acc`;
    mhar_nextline: multiple choice, `acc` and `acc_norm`)."""
    from mhar_probe.demo.plan import PAPER350

    model = folder / name
    model.mkdir(parents=True)
    results: dict = {"results": {}, "configs": {}, "model_name_sanitized": name, "date": EVAL_DATE}
    for task in PAPER350.eval_tasks:
        right = synthetic_correct(method, H, seed, task)
        lines = []
        for i, ok in enumerate(right.tolist()):
            context = f"{task} item {i}:"
            if task == "mhar_lastword":
                target = f" word{i}"
                doc = dict(context=context, target=target)
                args = {"gen_args_0": {"arg_0": context, "arg_1": target}}
                resps = [[["-3.5", str(ok)]]]
                scores = dict(metrics=["perplexity", "acc"], perplexity=-3.5, acc=int(ok))
            else:
                choices = [f"line {i} a", f"line {i} b"]
                target = str(i % 2)
                doc = dict(context=context, choices=choices, label=i % 2)
                args = {f"gen_args_{k}": {"arg_0": context + "\n", "arg_1": c} for k, c in enumerate(choices)}
                resps = [[["-20.0", "False"]], [["-21.0", "False"]]]
                scores = dict(metrics=["acc", "acc_norm"], acc=float(ok), acc_norm=float(ok))
            lines.append(dict(doc_id=i, doc=doc, target=target, arguments=args, resps=resps,
                              filtered_resps=[r[0] for r in resps], filter="none",
                              doc_hash=_sha(json.dumps(doc, sort_keys=True)), prompt_hash=_sha(context),
                              target_hash=_sha(target), **scores))
        (model / f"samples_{task}_{EVAL_DATE}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        kind = "loglikelihood" if task == "mhar_lastword" else "multiple_choice"
        metrics = ["perplexity", "acc"] if task == "mhar_lastword" else ["acc", "acc_norm"]
        results["configs"][task] = dict(task=task, output_type=kind, metric_list=[dict(metric=m) for m in metrics])
        results["results"][task] = {f"{m},none": float(right.mean()) for m in metrics if m != "perplexity"}
    (model / f"results_{EVAL_DATE}.json").write_text(json.dumps(results))
    (folder / "provenance.json").write_text(json.dumps(dict(run=name, tasks=list(PAPER350.eval_tasks),
                                                            limit=EVAL_ITEMS)))


def synthetic_paper350_study(out: Path, arms: list[tuple[str, int | None, int]],
                             unevaluated: list[tuple[str, int | None, int]] = ()) -> None:
    """The runs of PAPER350 named by (method, H, seed), as an export holds them (summary, train options,
    metrics, the sweep's manifest), with the losses of `synthetic_loss` at the plan's evaluations, and each
    run's evaluation (`synthetic_eval`) but those of `unevaluated`."""
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
        if (method, H, seed) not in unevaluated:
            synthetic_eval(out / "runs" / "evals" / spec.name, spec.name, method, H, seed)
        rows.append(dict(name=spec.name, axes=spec.axes(), status="finished"))
    write_manifest(out / "runs", {}, rows)
