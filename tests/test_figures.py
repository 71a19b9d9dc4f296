"""Figure and table generators on synthetic run directories: every generator renders and shows
the right numbers (independently recomputed from the metrics files), stars and diagonal sit at
the right cells, missing cells are masked, skips name what is missing, output is byte-stable."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.runs import load_runs, select, to_grid
from figures.build import build
from figures.registry import load_generators
from figures.synthetic import tail_mean_of, write_run
from figures.tables import Cell, Table, to_latex, to_markdown
from mhar_probe.cli.figures import add_figures_subparser
from mhar_probe.errors import UserError

LM_EVAL = Path(__file__).parent / "data" / "lm_eval" / "new"
# kv x H grid: H = 4 is best at KV = 1, 2 and 4 (H = 8 over-splits); cell (KV=4, H=8) has no run
GRID = {(kv, H): 3.0 + 0.02 * abs(np.log2(H) - 2) - 0.005 * kv for kv in (1, 2, 4) for H in (1, 2, 4, 8)
        if (kv, H) != (4, 8)}


def loss_of(kv: int, H: int, steps: int) -> float:
    return GRID[(kv, H)] + (0.4 if steps == 40 else 0.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for steps in (40, 80):
        for (kv, H) in GRID:
            write_run(root, f"mhar-h{H}-kv{kv}-n{steps}", method="mhar", H=H, kv=kv, steps=steps, lr=2e-3,
                      final_loss=loss_of(kv, H, steps), noise=0.001, eval_every=2 if steps == 40 else 5)
    for seed in (1, 2, 3):
        for lr in (5e-4, 1e-3):
            for method, final, H in (("baseline", 3.10, None), ("hyper", 3.08, None), ("attnres", 3.06, None),
                                     ("mhar", 3.00, 8), ("mhar", 3.03, 16)):
                name = f"{method}{H or ''}-s{seed}-lr{lr:g}"
                write_run(root, name, method=method, H=H, kv=2, seed=seed, lr=lr, steps=80,
                          final_loss=final + (0.05 if lr == 1e-3 else 0) + 0.002 * seed)
    for method, final in (("baseline", 2.9), ("attnres", 2.87), ("mhar", 2.84)):
        write_run(root, f"wide-{method}", method=method, H=8 if method == "mhar" else None, kv=2, hidden_size=256,
                  seed=1, steps=80, final_loss=final)
    # an extra seed in one cell only: the width and LR tables must average the seeds all cells share
    write_run(root, "wide-baseline-s2", method="baseline", kv=2, hidden_size=256, seed=2, steps=80, final_loss=2.5)
    write_run(root, "baseline-s4-lr0.0005", method="baseline", kv=2, seed=4, lr=5e-4, steps=80, final_loss=2.5)
    for method, final in (("baseline", 3.5), ("hyper", 3.48), ("attnres", 3.47), ("mhar", 3.40)):
        write_run(root, f"web-{method}", method=method, H=8 if method == "mhar" else None, kv=2, seed=1, steps=80,
                  final_loss=final, corpus="web.jsonl", flops_per_token=1.01e6 if method == "mhar" else 1e6)
    evals = root / "evals"
    shutil.copytree(LM_EVAL / "arm_a", evals / "baseline-s1-lr0.0005")
    shutil.copytree(LM_EVAL / "arm_b", evals / "mhar8-s1-lr0.0005")
    bench = root / "benchmarks"
    (bench / "kernels").mkdir(parents=True)
    (bench / "train_throughput_tiny.json").write_text(json.dumps(dict(
        meta=dict(device="cpu", args=dict(preset="tiny", backend="eager")),
        results=[dict(method="baseline", tokens_per_s=1000.0, peak_memory_gb=1.0),
                 dict(method="mhar", tokens_per_s=640.0, peak_memory_gb=1.25),
                 dict(method="mhar/padded", tokens_per_s=500.0, peak_memory_gb=1.25),
                 dict(method="baseline", tokens_per_s=800.0, peak_memory_gb=1.0),
                 dict(method="mhar", tokens_per_s=720.0, peak_memory_gb=1.25)])))
    # --interleave: the ratio is the median of per-round ratios, not the ratio of the medians
    (bench / "train_throughput_interleaved.json").write_text(json.dumps(dict(
        meta=dict(device="H100", args=dict(preset="1b", backend="triton", interleave=True)),
        results=[dict(method="baseline", tokens_per_s=1000.0, peak_memory_gb=26.5, vs_baseline_round_median=1.0),
                 dict(method="mhar", tokens_per_s=800.0, peak_memory_gb=27.1, vs_baseline_round_median=0.85,
                      peak_memory_kind="resident + step growth (interleaved)")])))
    (bench / "kernels" / "routing.json").write_text(json.dumps(dict(meta=dict(device="H100"), rows=[
        dict(shape="100M", H=8, backend="compile", fwdbwd_ms=30.0, graph_fwdbwd_ms=24.0),
        dict(shape="100M", H=8, backend="triton", fwdbwd_ms=6.0, floor_ms=0.92, graph_fwdbwd_ms=3.0),
        dict(shape="100M", H=8, backend="triton-prev", fwdbwd_ms=7.0, graph_fwdbwd_ms=4.0),
        dict(shape="100M", H=8, backend="eager", oom=True)])))
    return root


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    return build(runs, tmp_path_factory.mktemp("figs") / "out")


def table_rows(report, name: str, source: str = "yours") -> list[list]:
    return report.made[name][0].data["table"].values(source)


def test_every_generator_renders(report):
    assert not report.failed, report.failed
    assert set(report.made) == set(load_generators()) - set(report.skipped)
    # the synthetic runs have no captured routing datasets: those generators are exercised in
    # tests/test_figures_routing.py, and here they must skip (not fail) naming what they need
    routing = {"depth_read", "depth_map", "perhead", "table_probe", "table_headalign"}
    assert set(report.skipped) == routing, {k: s.reason for k, s in report.skipped.items()}
    assert all("routing.nc" in s.reason or "captured" in s.reason for s in report.skipped.values())
    for outputs in report.made.values():
        for o in outputs:
            for p in o.paths:
                assert p.exists() and p.stat().st_size > 0, p
    index = json.loads((report.out / "index.json").read_text())
    assert set(index["made"]) == set(report.made)


def test_dataset_and_grid_pivot(runs):
    ds = load_runs(runs)
    run = "mhar-h2-kv1-n80"
    assert float(ds["tail_mean"].sel(run=run)) == pytest.approx(tail_mean_of(runs / run))
    assert set(ds["val_loss"].dims) == {"run", "eval_step"} and ds.attrs["tail_k"] == 11
    grid = to_grid(select(ds, method="mhar", steps=40, seed=0), dims=("kv", "H"))
    assert grid.sel(kv=4, H=8).isnull() and float(grid.sel(kv=1, H=2)) == pytest.approx(
        tail_mean_of(runs / "mhar-h2-kv1-n40"))
    with pytest.raises(UserError, match="same cell"):
        to_grid(select(ds, method="mhar"), dims=("kv", "H"))


def test_kv_grid_stars_diagonal_and_masked_cell(report, runs):
    out = report.made["kv_grid"][0]
    assert out.name == "kv_grid_tiny"
    assert sorted(out.data["stars"]) == [(1, 4), (2, 4), (4, 4)]
    assert out.data["diagonal"] == [(1, 1), (2, 2), (4, 4)]
    assert out.data["missing"] == [(4, 8)]
    assert np.isnan(float(out.data["grid"].sel(kv=4, H=8)))
    assert float(out.data["grid"].sel(kv=2, H=1)) == pytest.approx(tail_mean_of(runs / "mhar-h1-kv2-n80"))


def test_heads_under_uses_shorter_budget_and_outlines_smallest_kv(report, runs):
    out = report.made["heads_under"][0]
    assert out.data["budgets"] == [40, 80] and out.data["outlined"] == 1
    assert float(out.data["grid"].sel(kv=1, H=4)) == pytest.approx(tail_mean_of(runs / "mhar-h4-kv1-n40"))


def test_head_ushape_lines_and_paper_overlay(report):
    out = report.made["head_ushape"][0]
    hs, ys = out.data["lines"][1]
    assert hs == [1, 2, 4, 8] and int(np.argmin(ys)) == 2
    assert out.data["paper"]["8"] == 3.129


def test_training_curves_ema_and_inset(report):
    out = report.made["training_curves"][0]
    assert {"baseline", "mhar"} <= set(out.data["curves"])
    start, end = out.data["inset"]
    assert end == 80 and start == 48
    assert len(out.data["curves"]["mhar"]["ema"]) == 80


def test_main_table_numbers(report, runs):
    rows = table_rows(report, "table_main")
    assert len(rows) == 1
    expect = {m: np.mean([tail_mean_of(runs / f"{m}-s{s}-lr0.0005") for s in (1, 2, 3)])
              for m in ("baseline", "hyper", "attnres", "mhar8", "mhar16")}
    assert rows[0][2:] == pytest.approx([expect[m] for m in ("baseline", "hyper", "attnres", "mhar8", "mhar16")])
    md = (report.out / "table_main.md").read_text()
    assert f"{expect['mhar8']:.3f} ({expect['mhar8'] - expect['baseline']:+.3f})" in md
    paper = table_rows(report, "table_main", "paper")
    assert paper[0][2:] == [3.031, 2.999, 2.970, 2.969, 2.996]
    assert "(-0.061)" in md  # the paper's printed delta, not one recomputed from rounded losses
    tex = (report.out / "table_main.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex and "\\textit{" in tex
    with open(report.out / "table_main.csv") as f:
        assert next(csv.reader(f))[0] == "source"


def test_lr_sweep_and_seeds(report, runs):
    best = report.made["table_lr_sweep"][0].data["best"]
    mhar = best[("embedded", "tiny", 80, "mhar")]
    assert mhar.best_lr == 5e-4 and mhar.H == 8
    base = np.mean([tail_mean_of(runs / f"baseline-s{s}-lr0.0005") for s in (1, 2, 3)])  # not seed 4
    assert mhar.delta == pytest.approx(mhar.tail_mean - base)
    assert best[("embedded", "tiny", 80, "baseline")].tail_mean == pytest.approx(base)
    assert any("left out: baseline seed 4)" in n for n in report.made["table_lr_sweep"][0].data["table"].notes)
    deltas = report.made["table_seeds"][0].data["deltas"]
    d = deltas[("embedded", "tiny", 80, "mhar", 8)]
    expect = [tail_mean_of(runs / f"mhar8-s{s}-lr0.0005") - tail_mean_of(runs / f"baseline-s{s}-lr0.0005")
              for s in (1, 2, 3)]
    assert d.mean == pytest.approx(np.mean(expect)) and d.sd == pytest.approx(np.std(expect, ddof=1))


def test_web_table_with_ceg(report, runs):
    from analysis.stats.ceg import fit_power_law, lower_envelope

    res = report.made["table_web"][0].data["results"][("web.jsonl", "tiny")]
    base, mhar = tail_mean_of(runs / "web-baseline"), tail_mean_of(runs / "web-mhar")
    assert res["comparison"].loss["mhar"] == pytest.approx(mhar)
    rows = [json.loads(x) for x in (runs / "web-baseline" / "metrics.jsonl").read_text().splitlines()]
    pts = [(r["flops"], r["val_loss"]) for r in rows if "val_loss" in r and r["flops"] > 0]
    alpha = fit_power_law(*lower_envelope([tuple(zip(*pts))])).alpha
    assert res["ceg"] == pytest.approx((base / mhar) ** (1 / alpha) / 1.01)


def test_width_table(report, runs):
    cells = report.made["table_width"][0].data["cells"]
    wide = cells[("embedded", 4, 2, 80, 256)]
    assert wide["mhar"] == pytest.approx(tail_mean_of(runs / "wide-mhar"))
    assert wide["attnres"] == pytest.approx(tail_mean_of(runs / "wide-attnres"))
    # the baseline's extra seed 2 has no partner in the other cells: left out, and said so
    assert wide["baseline"] == pytest.approx(tail_mean_of(runs / "wide-baseline"))
    assert "d256: averaged over the seeds all three cells share (1)." in report.made["table_width"][0].data["table"].notes


def test_cost_kernel_corpus_tables(report):
    ratios = report.made["table_cost"][0].data["ratios"]
    assert ratios[("train_throughput_tiny.json", "mhar")] == pytest.approx(0.64)
    assert ratios[("train_throughput_tiny.json", "mhar", 1)] == pytest.approx(0.9)  # against the 2nd baseline
    assert ratios[("train_throughput_tiny.json", "mhar/padded", 0)] == pytest.approx(0.5)
    assert ratios[("train_throughput_tiny.json", "baseline", 1)] == pytest.approx(1.0)
    assert ratios[("train_throughput_interleaved.json", "mhar")] == pytest.approx(0.85)  # not 800 / 1000
    assert any("train_throughput_interleaved.json: arms interleaved" in n
               for n in report.made["table_cost"][0].data["table"].notes)
    assert any(r[1] == "mhar/padded" and r[2] == "eager-padded" for r in table_rows(report, "table_cost"))
    assert "MHAR (padded kernels)" in (report.out / "table_cost.md").read_text()
    assert report.made["table_kernel_speed"][0].data["speedups"][("routing.json", "100M", 8)] == pytest.approx(5.0)
    assert report.made["table_kernel_speed"][0].data["graph_speedups"][("routing.json", "100M", 8)] == \
        pytest.approx(8.0)  # device time: compile 24 / triton 3 (the other backend rows are ignored)
    md = (report.out / "table_kernel_speed.md").read_text()
    assert "OOM" in md and "5.3x" in md  # yours (eager OOM) and the paper's speedup
    rows = table_rows(report, "table_corpus")
    assert rows[0] == ["train", "docs", 10, 6000, pytest.approx(60.0)]


def test_eval_tables(report):
    down = report.made["table_downstream"][0].data["metrics"]
    assert set(down) == {"baseline-s1-lr0.0005", "mhar8-s1-lr0.0005"}
    assert down["baseline-s1-lr0.0005"]["toy_mc"][1] == pytest.approx(0.5666666666666667)
    (cmp,) = report.made["table_midtrain"][0].data["comparisons"].values()
    rows = table_rows(report, "table_midtrain")
    assert [r[7:9] for r in rows] == [[row.b, row.c] for row in cmp.rows]
    assert [r[9] for r in rows] == pytest.approx([row.p_value for row in cmp.rows])
    assert [r[11] for r in rows] == [row.n_distinct for row in cmp.rows] and all(r[11] for r in rows)


def test_skips_name_missing_inputs(tmp_path):
    write_run(tmp_path / "runs", "only-baseline", method="baseline", steps=20)
    rep = build(tmp_path / "runs", tmp_path / "out", benchmarks=[tmp_path / "none"])
    assert set(rep.made) == {"table_corpus"}
    assert "mhar" in " ".join(rep.skipped["kv_grid"].needs)
    assert "two or more learning rates" in rep.skipped["table_lr_sweep"].reason
    assert "bench_routing.py" in " ".join(rep.skipped["table_kernel_speed"].needs)
    assert "table_seeds" in (tmp_path / "out" / "index.md").read_text()


def test_outputs_are_deterministic_and_never_clobbered(runs, tmp_path):
    a = build(runs, tmp_path / "a", only=["kv_grid", "table_main"])
    b = build(runs, tmp_path / "b", only=["kv_grid", "table_main"])
    for o in a.made["kv_grid"] + a.made["table_main"]:
        for p in o.paths:
            assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name
    with pytest.raises(UserError, match="--overwrite"):
        build(runs, tmp_path / "a", only=["kv_grid"])
    build(runs, tmp_path / "a", only=["kv_grid"], overwrite=True)
    with pytest.raises(UserError, match="unknown figure"):
        build(runs, tmp_path / "c", only=["nope"])


def test_table_writers_escape_and_mark_paper_rows():
    t = Table("t", "T", ["a_b", "c"])
    t.add([Cell("x_1 & 50%", "x"), Cell.num(1.23456, delta=-0.5)])
    t.add([Cell("paper"), Cell.num(float("nan"))], source="paper")
    tex = to_latex(t)
    assert r"x\_1 \& 50\%" in tex and "1.235 (-0.500)" in tex
    assert "| *paper* | - |" in to_markdown(t)


def test_cli_handler(runs, tmp_path, capsys):
    import argparse

    p = argparse.ArgumentParser()
    add_figures_subparser(p.add_subparsers(dest="command"))
    args = p.parse_args(["figures", str(runs), "--out", str(tmp_path / "o"), "--only", "table_main", "kv_grid"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "made     table_main" in out and "kv_grid_tiny.png" in out


def test_build_returns_what_the_figures_command_writes_and_prints(runs, tmp_path, capsys):
    """`figures.build.build` is the command's function: the outputs it reports are the files the
    command made (tables byte for byte), and the command prints the report's `lines()`."""
    from figures.build import build
    from figures.registry import generator_lines
    from mhar_probe.cli import main

    only = ["table_main", "table_seeds", "kv_grid"]
    assert main(["figures", str(runs), "--out", str(tmp_path / "cli"), "--only", *only]) == 0
    printed = capsys.readouterr().out
    report = build(runs, tmp_path / "fn", only=only)
    assert sorted(report.made) == sorted(n for n in only if n not in report.skipped) and report.made
    for outputs in report.made.values():
        for o in outputs:
            for path in o.paths:
                assert path.parent == tmp_path / "fn" and (tmp_path / "cli" / path.name).is_file()
                if path.suffix in (".md", ".csv", ".tex"):
                    assert path.read_text() == (tmp_path / "cli" / path.name).read_text(), path.name
    assert json.loads((tmp_path / "cli" / "index.json").read_text()) == report.as_dict()
    assert printed == "".join(line.replace(str(tmp_path / "fn"), str(tmp_path / "cli")) + "\n"
                              for line in report.lines())
    assert main(["figures", str(runs), "--out", str(tmp_path / "x"), "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == generator_lines() and len(generator_lines()) > 10
    assert not (tmp_path / "x").exists()


def test_head_grid_averages_only_seeds_shared_by_every_cell(tmp_path):
    """A cell run with an extra seed must not be averaged over a different seed mix."""
    from analysis.runs import load_runs
    from figures.headgrid import head_grids
    from figures.synthetic import tail_mean_of, write_run

    r = {}
    for seed in (1, 2):
        r["h1", seed] = write_run(tmp_path, f"a{seed}", method="attnres", seed=seed, final_loss=3.0 + seed)
    r["h2", 1] = write_run(tmp_path, "m2", method="mhar", H=2, seed=1, final_loss=3.5)
    (grid,) = head_grids(load_runs(tmp_path))
    assert grid.grid.sel(kv=2, H=1).item() == pytest.approx(tail_mean_of(r["h1", 1]))  # seed 2 left out
    assert grid.grid.sel(kv=2, H=2).item() == pytest.approx(tail_mean_of(r["h2", 1]))
    assert int(grid.n_seeds.sel(kv=2, H=1)) == 1


def test_head_grid_leaves_out_cells_that_share_no_seed(tmp_path):
    """The middle rung once had attnres at seed 1 only and MHAR at seed 0 only: a grid of those two
    would set one seed's run against another's, so there is none."""
    from analysis.runs import load_runs
    from figures.headgrid import head_grids
    from figures.synthetic import write_run

    write_run(tmp_path, "a1", method="attnres", seed=1, final_loss=3.0)
    write_run(tmp_path, "m0", method="mhar", H=2, seed=0, final_loss=3.5)
    assert head_grids(load_runs(tmp_path)) == []
    write_run(tmp_path, "m1", method="mhar", H=2, seed=1, final_loss=3.4)  # now seed 1 is in both cells
    (grid,) = head_grids(load_runs(tmp_path))
    assert int(grid.n_seeds.sel(kv=2, H=2)) == 1


def test_throughput_reader_expands_per_backend_documents(tmp_path):
    from figures.benchfiles import throughput_files

    doc = lambda be, tps: {"meta": {"args": {"preset": "100m", "backend": be}},  # noqa: E731
                           "results": [{"method": "mhar", "tokens_per_s": tps}]}
    (tmp_path / "one.json").write_text(json.dumps(doc("eager", 1.0)))
    (tmp_path / "many.json").write_text(json.dumps({"meta": {}, "runs": {"triton": doc("triton", 3.0),
                                                                           "compile": doc("compile", 2.0)}}))
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    found = throughput_files(sorted(tmp_path.glob("*.json")))
    assert [(p.name, d["meta"]["args"]["backend"]) for p, d in found] == [
        ("many.json", "compile"), ("many.json", "triton"), ("one.json", "eager")]


def test_main_comparison_without_a_seed_in_every_cell_pairs_one_seed(tmp_path):
    """The middle rung once had the baseline at seeds 0 and 1, attnres at 1, MHAR at 0: no seed in
    every cell, so the table reads one seed of the baseline (the lowest of those most cells have)
    and only the cells run at it, never one seed's run against another's."""
    from analysis.runs import load_runs
    from figures.comparison import compare_methods
    from figures.synthetic import tail_mean_of, write_run

    b0 = write_run(tmp_path, "b0", method="baseline", seed=0, final_loss=3.0)
    write_run(tmp_path, "b1", method="baseline", seed=1, final_loss=4.0)
    write_run(tmp_path, "a1", method="attnres", seed=1, final_loss=3.8)
    m0 = write_run(tmp_path, "m0", method="mhar", H=2, seed=0, final_loss=2.9)
    cmp = compare_methods(load_runs(tmp_path), "tiny", "embedded")
    assert cmp.loss["baseline"] == pytest.approx(tail_mean_of(b0)) and cmp.n["baseline"] == 1
    assert cmp.loss["mhar"] == pytest.approx(tail_mean_of(m0)) and "attnres" not in cmp.loss


def test_main_comparison_averages_only_shared_seeds(tmp_path):
    from analysis.runs import load_runs
    from figures.comparison import compare_methods
    from figures.synthetic import tail_mean_of, write_run

    b1 = write_run(tmp_path, "b1", method="baseline", seed=1, final_loss=3.0)
    write_run(tmp_path, "b2", method="baseline", seed=2, final_loss=4.0)
    m1 = write_run(tmp_path, "m1", method="mhar", H=2, seed=1, final_loss=2.9)
    cmp = compare_methods(load_runs(tmp_path), "tiny", "embedded")
    assert cmp.loss["baseline"] == pytest.approx(tail_mean_of(b1)) and cmp.n["baseline"] == 1
    assert cmp.loss["mhar"] == pytest.approx(tail_mean_of(m1))


def test_one_kv_row_outlines_its_h_equals_kv_cell_instead_of_a_diagonal_line():
    import matplotlib.pyplot as plt
    import numpy as np
    import xarray as xr
    from matplotlib.patches import Rectangle

    from figures.headgrid import draw_heatmap

    grid = xr.DataArray(np.array([[3.9, 3.8, 3.85]]), dims=("kv", "H"), coords=dict(kv=[2], H=[2, 4, 8]))
    fig, ax = plt.subplots()
    drawn = draw_heatmap(ax, grid)
    assert drawn["diagonal"] == [(2, 2)]
    assert not [line for line in ax.get_lines() if line.get_label() == "H = KV"]
    (cell,) = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_label() == "H = KV"]
    assert (cell.get_x(), cell.get_y(), cell.get_width(), cell.get_height()) == (-0.5, -0.5, 1, 1)
    labels = ax.get_legend_handles_labels()[1]
    assert "lowest loss of its KV row" in labels
    plt.close(fig)


def cie_lab(colour: str) -> np.ndarray:
    """sRGB (D65) -> CIELAB, the textbook formulas."""
    from matplotlib.colors import to_rgb

    rgb = np.array(to_rgb(colour))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_the_methods_drawn_together_have_clearly_different_colours():
    """training_curves draws these five in one panel; single-head and MHAR were two blues
    (CIE76 distance 26), the baseline and MHAR two dark tones. Every pair now differs by > 40."""
    from figures.style import METHOD_COLORS

    together = ["baseline", "hyper", "attnres", "mhar", "mhar_hw"]
    for i, a in enumerate(together):
        for b in together[i + 1:]:
            distance = float(np.linalg.norm(cie_lab(METHOD_COLORS[a]) - cie_lab(METHOD_COLORS[b])))
            assert distance > 40, (a, b, distance)


def test_benchmark_tables_never_come_from_the_working_directory(tmp_path, monkeypatch):
    """`mhar figures` run from the repository root picked up its benchmarks/ (table_cost,
    table_kernel_speed); now only RUNS_DIR/benchmarks or --benchmarks count."""
    from figures.build import default_benchmark_dirs

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert default_benchmark_dirs(None) == []
    assert default_benchmark_dirs(tmp_path / "runs") == []
    (tmp_path / "runs" / "benchmarks").mkdir()
    assert default_benchmark_dirs(tmp_path / "runs") == [tmp_path / "runs" / "benchmarks"]


def _two_rate_study(root: Path) -> tuple[Path, Path]:
    """A study's main runs at lr 5e-4 (two seeds) in ROOT/runs and its second-rate runs at 1e-3 (seed 1)
    in ROOT/bestvsbest/runs, as the demo plans lay them out; baseline is better at 1e-3, the others at 5e-4."""
    main, second = root / "runs", root / "bestvsbest" / "runs"
    finals = {"baseline": (3.10, 3.05), "attnres": (3.06, 3.08), "mhar": (3.00, 3.02)}  # (5e-4, 1e-3)
    for method, (at_main, at_second) in finals.items():
        H = 8 if method == "mhar" else None
        for seed in (1, 2):
            write_run(main, f"{method}-s{seed}-lr5e-4", method=method, H=H, seed=seed, lr=5e-4, steps=40,
                      eval_every=2, final_loss=at_main + 0.002 * seed)
        write_run(second, f"{method}-s1-lr1e-3", method=method, H=H, seed=1, lr=1e-3, steps=40,
                  eval_every=2, final_loss=at_second + 0.002)
    for seed in (1, 2):  # at the main rate only: no best of its own
        write_run(main, f"hyper-s{seed}-lr5e-4", method="hyper", seed=seed, lr=5e-4, steps=40, eval_every=2,
                  final_loss=3.04)
    return main, second


def test_lr_sweep_reads_the_second_rate_folder_and_no_other_generator_does(tmp_path):
    from mhar_probe.demo.run import figures_stage

    main, second = _two_rate_study(tmp_path / "study")
    alone = build(main, tmp_path / "alone", benchmarks=[])  # one rate: no LR table
    assert "two or more learning rates" in alone.skipped["table_lr_sweep"].reason
    figures_stage(main, tmp_path / "both", second_runs=second)
    index = json.loads((tmp_path / "both" / "index.json").read_text())
    assert "table_lr_sweep" not in index["skipped"] and list(index["made"]).count("table_lr_sweep") == 1
    assert set(index["made"]) == set(alone.made) | {"table_lr_sweep"}  # the others' entries kept
    assert (tmp_path / "both" / "index.md").read_text().count("## table_lr_sweep (table") == 1
    with open(tmp_path / "both" / "table_lr_sweep.csv") as f:
        rows = {r["Method"]: r for r in csv.DictReader(f) if r["source"] != "paper"}
    tail = {(m, lr): tail_mean_of(d / f"{m}-s1-lr{lr}") for m in ("baseline", "attnres", "mhar")
            for d, lr in ((main, "5e-4"), (second, "1e-3"))}
    assert {m: float(r["Best LR"]) for m, r in rows.items()} == {"baseline": 1e-3, "attnres": 5e-4, "mhar": 5e-4}
    notes = (tmp_path / "both" / "table_lr_sweep.md").read_text()
    assert "left out, trained at one learning rate only: hyper (lr 0.0005)." in notes
    for m, r in rows.items():  # both rates listed, on seed 1 (the one both folders share)
        assert r["Tail-mean by LR"] == f"0.0005: {tail[(m, '5e-4')]:.3f}, 0.001: {tail[(m, '1e-3')]:.3f}"
    assert float(rows["mhar"]["Delta vs best baseline"]) == pytest.approx(
        tail[("mhar", "5e-4")] - tail[("baseline", "1e-3")], abs=1e-3)
    # every other output is the main folder's alone (reading both folders as one would change
    # table_corpus's source run, which sorts first among both rates' runs)
    others = sorted(p.name for p in (tmp_path / "alone").glob("*.csv"))
    assert "table_main.csv" in others and "table_seeds.csv" in others
    for name in others:
        assert (tmp_path / "both" / name).read_text() == (tmp_path / "alone" / name).read_text(), name
    mixed = build(tmp_path / "study", tmp_path / "mixed", benchmarks=[])
    assert (tmp_path / "mixed" / "table_corpus.md").read_text() != (tmp_path / "alone" / "table_corpus.md").read_text()
    assert "table_lr_sweep" in mixed.made


def test_only_a_plan_with_a_second_rate_hands_its_folder_to_the_figures(tmp_path):
    from mhar_probe.demo.plan import PLANS
    from mhar_probe.demo.run import second_rate_runs

    (tmp_path / "bestvsbest" / "runs").mkdir(parents=True)
    assert second_rate_runs(PLANS["study100m"], tmp_path) == tmp_path / "bestvsbest" / "runs"
    assert second_rate_runs(PLANS["middle"], tmp_path) is None  # no second rate: the main runs only
    assert second_rate_runs(PLANS["study100m"], tmp_path / "none") is None  # not trained yet


def test_more_runs_names_known_generators_and_existing_folders(runs, tmp_path):
    with pytest.raises(UserError, match="unknown figure/table name"):
        build(runs, tmp_path / "a", more_runs={"table_lr_swep": [runs]})
    with pytest.raises(UserError, match="does not exist"):
        build(runs, tmp_path / "b", more_runs={"table_lr_sweep": [tmp_path / "missing"]})


# ---------------------------------------------------------------- eval layout, refusals, one MHAR (issue 54)
def _eval_runs(root: Path) -> Path:
    """A baseline and an MHAR run; only the baseline evaluated, the way `mhar eval RUN` leaves it (RUN/eval)."""
    runs = root / "runs"
    write_run(runs, "base", method="baseline", seed=1, steps=40)
    write_run(runs, "mhar8", method="mhar", H=8, seed=1, steps=40)
    write_run(runs, "mhar2", method="mhar", H=2, seed=1, steps=40)
    shutil.copytree(LM_EVAL / "arm_a", runs / "base" / "eval")
    return runs


def test_figures_find_what_mhar_eval_writes_and_leave_out_runs_without_one(tmp_path):
    """`mhar eval RUN` writes RUN/eval; the downstream table finds it with no --evals, and with
    --evals RUNS_DIR, and names the runs without an evaluation instead of failing on them."""
    runs = _eval_runs(tmp_path)
    for i, evals in enumerate((None, runs)):
        rep = build(runs, tmp_path / f"out{i}", only=["table_downstream", "table_midtrain"], evals=evals)
        assert not rep.failed, rep.failed
        assert set(rep.made["table_downstream"][0].data["metrics"]) == {"base"}
        assert "No evaluation found for mhar2, mhar8" in (tmp_path / f"out{i}" / "index.md").read_text()
        assert "no baseline/MHAR pair" in rep.skipped["table_midtrain"].reason
    # the committed study layout, RUNS_DIR/evals/<run>, is found first
    shutil.copytree(LM_EVAL / "arm_b", runs / "evals" / "mhar8")
    rep = build(runs, tmp_path / "out2", only=["table_downstream", "table_midtrain"])
    assert set(rep.made["table_downstream"][0].data["metrics"]) == {"base", "mhar8"}
    assert list(rep.made["table_midtrain"][0].data["comparisons"]) == [("base", "mhar8")]


def test_a_figures_call_that_refuses_or_makes_nothing_leaves_no_output(tmp_path, capsys):
    from mhar_probe.cli import main

    (tmp_path / "empty").mkdir()
    runs = _eval_runs(tmp_path)
    calls = {"empty": [str(tmp_path / "empty")],
             "missing": [str(tmp_path / "nope")],
             "only": [str(runs), "--only", "depth_read", "perhead"],  # no captures: nothing can be made
             "evals": [str(runs), "--evals", str(tmp_path / "no-evals")]}
    for name, argv in calls.items():
        out = tmp_path / "o" / name / "figs"
        assert main(["figures", *argv, "--out", str(out)]) == 2, name
        assert not (tmp_path / "o").exists(), name  # neither --out nor the folders made for it
    err = capsys.readouterr().err
    assert f"runs directory {tmp_path / 'nope'} does not exist" in err
    assert f"--evals {tmp_path / 'no-evals'} does not exist" in err
    assert "nothing could be made" in err
    # the correct call then needs no --overwrite, and a second one is refused naming it
    assert main(["figures", str(runs), "--out", str(tmp_path / "o" / "only"), "--only", "table_main"]) == 0
    assert main(["figures", str(runs), "--out", str(tmp_path / "o" / "only"), "--only", "table_main"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_overwrite_replaces_a_figures_folder_whole_and_nothing_else(runs, tmp_path):
    out = tmp_path / "figs"
    build(runs, out, only=["kv_grid", "table_main"])
    build(runs, out, only=["table_main"], overwrite=True)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("kv_grid")) == []  # no stale figure left
    assert (out / "table_main.md").is_file() and not list(tmp_path.glob(".figs*"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="not a figures folder"):
        build(runs, tmp_path / "mine", only=["table_main"], overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_every_figure_and_table_shows_the_same_mhar(runs, tmp_path):
    """--mhar-heads (the demo passes the H its claims use) is MHAR in the curves as in the tables; without
    it the one default rule (H = 8 if trained) holds for both."""
    for heads, want in ((16, 16), (None, 8)):
        rep = build(runs, tmp_path / f"h{heads}", only=["training_curves", "table_main"], mhar_heads=heads)
        mains = {c.H_main for c in rep.made["table_main"][0].data["comparisons"].values()}
        assert mains == {want}
        ds = load_runs(runs)
        for o in rep.made["training_curves"]:
            name = o.data["curves"]["mhar"]["run"]
            assert int(select(ds, run=name)["H"].item()) == want, (heads, name)


def test_routing_figures_pick_the_study_mhar():
    from types import SimpleNamespace

    from figures.routing import pick

    runs = [SimpleNamespace(method="mhar", H=h, G=2, shape=(64, 4, 2), seed=0, name=f"m{h}") for h in (2, 4, 8)]
    assert pick(runs, "mhar").H == 8
    assert pick(runs, "mhar", prefer=2).H == 2
    assert pick(runs, "mhar", prefer=16).H == 8  # not captured: the default rule


def test_the_masked_cells_colour_is_none_of_the_colormaps_colours():
    """A cell a site cannot read must not look like a value: the mask colour is at least 0.2 (RGB
    distance) from every colour of each colormap drawn with it. The earlier #2b2b2b was 0.07 from
    mako_r's end, a depth weight of 1.0 (fig_depth_read's first row read as masked)."""
    import re

    import matplotlib.pyplot as plt
    import seaborn  # noqa: F401  (registers its colormaps)
    from matplotlib.colors import to_rgb

    from figures.style import UNREACHABLE

    sources = "\n".join(p.read_text() for p in (Path(__file__).resolve().parents[1] / "figures").glob("*.py"))
    names = set(re.findall(r'get_cmap\((\w+|"[\w_]+")\)\.with_extremes\(bad=UNREACHABLE\)', sources))
    assert len(names) >= 3, names  # WEIGHT_CMAP, DIVERGING and the study views' two
    import figures.fig_perhead as perhead
    import figures.style as style

    constants = {**vars(style), **vars(perhead)}
    mask = np.array(to_rgb(UNREACHABLE))
    for name in names:
        cmap = name.strip('"') if name.startswith('"') else constants[name]
        colours = plt.get_cmap(cmap)(np.linspace(0, 1, 512))[:, :3]
        assert np.min(np.linalg.norm(colours - mask, axis=1)) >= 0.2, cmap


def test_kernel_speed_table_takes_the_newest_run_per_card_shape_and_h(tmp_path):
    """Two runs on one card time 100M H=8 (the newer wins; its other shape stays), a third card's run
    stays: one row per card, shape and H, by model size within a card whatever the file's order, and
    a note naming each row's file and date."""
    bench = tmp_path / "benchmarks" / "kernels"
    bench.mkdir(parents=True)

    def run(name, device, date, shapes, triton):
        rows = [dict(shape=s, H=8, backend=b, fwdbwd_ms=ms, floor_ms=1.0)
                for s in shapes for b, ms in (("triton", triton), ("compile", 10.0 * triton))]
        (bench / name).write_text(json.dumps(dict(meta=dict(device=device, date=date), rows=rows)))

    run("old.json", "CARD A", "2026-11-27", ["100M"], 2.0)
    run("new.json", "CARD A", "2026-12-06", ["350M", "100M"], 1.0)
    run("other.json", "CARD B", "2026-11-01", ["100M"], 3.0)
    report = build(None, tmp_path / "figs", only=["table_kernel_speed"], benchmarks=[tmp_path / "benchmarks"])
    out = report.made["table_kernel_speed"][0]
    assert set(out.data["speedups"]) == {("new.json", "100M", 8), ("new.json", "350M", 8), ("other.json", "100M", 8)}
    rows = table_rows(report, "table_kernel_speed")
    assert [(r[0], r[4], r[-1]) for r in rows] == [("100M", 1.0, "CARD A"), ("350M", 1.0, "CARD A"), ("100M", 3.0, "CARD B")]
    notes = out.data["table"].notes
    assert "CARD A, 350M H=8, 100M H=8: new.json (2026-12-06)." in notes
    assert "CARD B, 100M H=8: other.json (2026-11-01)." in notes and not any("old.json" in n for n in notes)
