"""Probes on routing datasets: analytic cases, tables, and the capture / probe CLI end to end."""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest
import torch
import xarray as xr

import mhar_probe  # noqa: F401
from analysis.probes import (head_alignment, headalign_table, matched_source_count, per_head_deviation,
                             perhead_table, probe_table, source_collinearity, width_disagreement, write_table)
from analysis.probes.probe import STEMS, pairs_of, probe
from mhar_probe.capture import CaptureError, capture_routing
from mhar_probe.cli.capture import add_capture_subparser
from mhar_probe.cli.probe import add_probe_subparser
from mhar_probe.model import MHARConfig, MHARForCausalLM

SMALL = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)


def model(method: str, randomise: bool = True, seed: int = 0, **kw) -> MHARForCausalLM:
    torch.manual_seed(seed)
    m = MHARForCausalLM(MHARConfig(residual_method=method, **{**SMALL, **kw})).eval()
    if randomise:
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for site in m.sites:
                site.query.copy_(torch.randn(site.query.shape, generator=g))
    return m


def capture(m: MHARForCausalLM, draws: int = 3) -> xr.Dataset:
    batches = [torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    return capture_routing(m, batches, progress=False, draws=draws)


@pytest.fixture(scope="module")
def runs() -> dict[str, xr.Dataset]:
    return {k: capture(model(k)) for k in ("attnres", "mhar", "mhar_hw")}


# ------------------------------------------------------------------------------ analytic
def test_zero_query_zero_disagreement_and_zero_deviation():
    ds = capture(model("mhar", randomise=False))  # zero queries: every head uniform
    w = width_disagreement(ds)
    np.testing.assert_allclose(w.summary_kl.values, 0.0, atol=1e-7)
    np.testing.assert_allclose(w.summary_excess.values, 0.0, atol=1e-7)
    d = per_head_deviation(ds)
    assert float(d.max_abs) < 1e-6 and float(d.null_max_abs_mean) < 1e-6


def test_identical_heads_give_zero_deviation(runs):
    ds = runs["mhar"].copy(deep=True)
    for name in ("weight_mean", "weight_mean_half", "null_weight_mean"):
        ds[name] = ds[name].isel(head=[0] * ds.sizes["head"]).assign_coords(head=ds["head"].values)
    d = per_head_deviation(ds)
    np.testing.assert_allclose(d.deviation.fillna(0).values, 0.0, atol=1e-15)
    assert float(d.max_abs) == 0.0


def test_deviation_matches_hand_computation(runs):
    ds = runs["mhar"]
    d = per_head_deviation(ds, first_sites=None)
    w = ds.weight_mean.values  # [site, source, head]
    expected = w - w.mean(-1, keepdims=True)
    np.testing.assert_allclose(d.deviation.values, expected)
    np.testing.assert_allclose(d.deviation.sum("head").values[np.isfinite(w[..., 0])], 0.0, atol=1e-12)
    assert -1.0 <= float(d.replication_r) <= 1.0
    assert float(d.cross_head_corr_independent) == -1.0  # H = 2: D_1 = -D_0


def test_width_summary_is_mean_over_routed_sites(runs):
    ds = runs["attnres"]
    w = width_disagreement(ds).sel(slicing="contiguous")
    per_site = ds.slice_kl.sel(slicing="contiguous").mean(("head", "slice")).values
    routed = ds.site_num_sources.values >= 2
    assert float(w.summary_kl) == pytest.approx(per_site[routed].mean())
    nulls = ds.null_slice_kl.sel(slicing="contiguous").mean(("head", "slice")).values[:, routed].mean(1)
    assert float(w.summary_null_mean) == pytest.approx(nulls.mean())
    assert float(w.summary_null_std) == pytest.approx(nulls.std(ddof=1))
    assert float(w.summary_excess) == pytest.approx(per_site[routed].mean() - nulls.mean())
    assert w.attrs["method"] == "attnres" and w.attrs["probe"] == "width_disagreement"


def test_an_empty_interleaved_control_is_detected_and_not_reported(runs):
    """At d = S x head_dim (here 32 = 4 x 8) the head-interleaved slices are the contiguous ones:
    the capture says so, the KL of both slicings is the same number, and the probe table reports
    no interleaved control. With 8 attention heads of 8 dims the control differs and is reported."""
    empty = runs["attnres"]
    real = capture(model("attnres", hidden_size=64, num_attention_heads=8))
    for ds, differs in ((empty, False), (real, True)):
        kl = ds.slice_kl
        same = np.array_equal(kl.sel(slicing="contiguous"), kl.sel(slicing="interleaved"), equal_nan=True)
        assert same is not differs
        col = probe_table([ds]).iloc[:, 0]
        assert bool(col["head-interleaved slicing differs from contiguous"]) is differs
        assert bool(np.isfinite(col["head-interleaved slicing: learned excess"])) is differs
        # datasets captured before interleave_distinct existed are judged from their KL
        assert bool(width_disagreement(ds.drop_vars("interleave_distinct")).interleaved_differs) is differs


def test_cross_head_spread_tells_independent_from_grouped_heads():
    """The mean off-diagonal r of deviations is tied to -1/(H-1) whatever the heads do (sum_h D_h = 0);
    the spread of r about it is not. Synthetic token-mean weights on a real H = 4 capture (its
    random-query null stays): heads with independent noise give a small spread, two pairs of heads
    sharing opposite deviations a spread near its analytic 0.943, far outside the null."""
    ds = capture(model("mhar", routing_heads=4), draws=6)
    rng = np.random.default_rng(0)
    shape = ds.weight_mean.shape  # [site, source, head]
    base = rng.random(shape[:2])[..., None]
    pattern = rng.normal(size=shape[:2])[..., None]
    noise = lambda: 0.01 * rng.normal(size=shape)  # noqa: E731
    visible = np.isfinite(ds.weight_mean.values)
    stats = {}
    for name, heads in (("independent", base + noise()),
                        ("grouped", base + 0.05 * pattern * np.array([1, 1, -1, -1]) + 0.1 * noise())):
        synth = ds.copy()
        synth["weight_mean"] = (ds.weight_mean.dims, np.where(visible, heads, np.nan))
        stats[name] = per_head_deviation(synth)
    for d in stats.values():  # the constraint pins the mean either way
        assert float(d.cross_head_corr_mean) == pytest.approx(-1 / 3, abs=0.1)
    assert float(stats["independent"].cross_head_spread) < 0.4
    assert float(stats["grouped"].cross_head_spread) == pytest.approx(np.sqrt(48 / 54), abs=0.05)
    assert float(stats["grouped"].cross_head_spread_z) > float(stats["independent"].cross_head_spread_z) + 3
    assert float(stats["grouped"].cross_head_spread_z) > 3


def test_collinearity_probe_collinear_and_orthogonal(runs):
    ds = runs["attnres"].copy(deep=True)
    N = ds.sizes["source"]
    ds["source_cosine"] = ds.source_cosine.where(np.isnan(ds.source_cosine), 1.0)
    c = source_collinearity(ds)
    np.testing.assert_allclose(c.site_cosine.values[1:], 1.0)
    assert np.isnan(c.site_cosine.values[0])  # one source: no pairs
    eye = np.broadcast_to(np.eye(N), ds.source_cosine.shape)
    ds["source_cosine"] = ds.source_cosine.copy(data=np.where(np.isnan(ds.source_cosine.values), np.nan, eye))
    assert float(source_collinearity(ds).all_sources_cosine) == 0.0
    assert int(c.num_sources_all) == 2 * SMALL["num_hidden_layers"] + 1


def test_matched_source_count(runs):
    a, b = runs["attnres"], runs["mhar"]
    m = matched_source_count([a, a, b])
    np.testing.assert_allclose(m.ratio_to_first.values[1], 1.0)
    assert float(m.median_ratio_to_first[1]) == 1.0
    assert list(m.num_sources.values) == list(range(2, 2 * SMALL["num_hidden_layers"] + 2))
    w = width_disagreement(b).sel(slicing="contiguous")
    np.testing.assert_allclose(m.kl.values[2], w.kl.values[1:])  # site s reads s + 1 sources


def test_head_alignment_reads_losses(runs, tmp_path):
    mh, hw = runs["mhar"].copy(), runs["mhar_hw"].copy()
    for ds, loss, name in ((mh, 3.25, "a"), (hw, 3.5, "b")):
        (tmp_path / name).mkdir()
        rows = [{"step": 0, "val_loss": 9.0}, {"step": 1, "loss": 4.0}, {"step": 2, "val_loss": loss}]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        ds.attrs["run_path"] = str(tmp_path / name)
    a = head_alignment(mh, hw)
    assert float(a.delta_val_loss) == pytest.approx(0.25)
    assert a.attrs["matched_heads"] == 1 and "input1_method" in a.attrs
    with pytest.raises(CaptureError, match="compares an mhar run"):
        head_alignment(hw, mh)
    with pytest.raises(CaptureError, match="multi-head"):
        per_head_deviation(runs["attnres"])


def test_null_halves_are_the_null_of_each_half_and_give_the_null_replication_r():
    """null_weight_mean_half[:, k] is the random-query null over half k's tokens alone: rows
    alternate between halves here (no documents), so capturing the even rows by themselves (same
    queries, same draws) gives half 0's null; the null's split-half r is the Pearson r of its
    two halves' deviation maps over the cells the statistics use (issue 32, item 5)."""
    m = model("mhar", routing_heads=4)
    rows = [torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    both = capture_routing(m, rows, progress=False, draws=3)
    even = capture_routing(m, [r[:1] for r in rows], progress=False, draws=3)
    np.testing.assert_allclose(both.null_weight_mean_half.sel(half=0).values, even.null_weight_mean.values,
                               rtol=1e-5, atol=1e-7)
    assert both.null_weight_mean_half.dims == ("draw", "half", "site", "source", "head")
    d = per_head_deviation(both)
    keep = np.isfinite(both.weight_mean.values) & (both.site_num_sources.values >= 2)[:, None, None]
    keep[10:] = False
    for k in range(3):
        h = both.null_weight_mean_half.values[k]  # [half, site, source, head]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # sites with fewer heads: all-NaN cells
            dev = h - np.nanmean(h, axis=-1, keepdims=True)
        want = np.corrcoef(dev[0][keep], dev[1][keep])[0, 1]
        assert float(d.null_replication_r[k]) == pytest.approx(want, abs=1e-9)
    sd = float(d.null_replication_r.std(ddof=1))
    assert float(d.replication_z) == pytest.approx((float(d.replication_r) - float(d.null_replication_r.mean())) / sd)
    old = both.drop_vars("null_weight_mean_half")  # a dataset captured before the null had halves
    assert np.isnan(float(per_head_deviation(old).replication_z))


def test_head_alignment_pairs_equal_head_counts_and_refuses_others(runs, capsys):
    """MHAR-HW (H = its KV groups, 2 here) is paired with the MHAR run of the same H, whatever the
    input order; with no such run it is compared with nothing (issue 32: H=4 hw was set against H=16)."""
    hw = runs["mhar_hw"]
    h4, h2 = capture(model("mhar", routing_heads=4)), capture(model("mhar", routing_heads=2))
    assert hw.attrs["G"] == 2 and h4.attrs["routing_heads"] == 4 and h2.attrs["routing_heads"] == 2
    pairs, unmatched = pairs_of([h4, hw, h2])
    assert [(mh.attrs["routing_heads"], b.attrs["method"]) for mh, b in pairs] == [(2, "mhar_hw")] and not unmatched
    assert list(headalign_table(pairs).index) == ["d32/L2/kv2 H2"]
    pairs, unmatched = pairs_of([h4, hw])
    assert pairs == [] and unmatched == [hw]
    with pytest.raises(CaptureError, match="equal head count"):
        head_alignment(h4, hw)


def test_head_alignment_reads_losses_from_the_folder_the_dataset_lies_in(runs, tmp_path):
    """An exported run's routing.nc names the folder it was captured in (on another machine); the
    losses come from metrics.jsonl beside the file that was read."""
    from mhar_probe.capture.io import open_routing_dataset, write_dataset

    opened = []
    for method, loss in (("mhar", 3.25), ("mhar_hw", 3.5)):
        run = tmp_path / method
        run.mkdir()
        (run / "metrics.jsonl").write_text(json.dumps({"step": 10, "val_loss": loss}) + "\n")
        ds = runs[method].copy()
        ds.attrs["run_path"] = f"/gpu-machine/tmp/{method}"  # where it was captured: not here
        write_dataset(ds, run / "routing.nc")
        opened.append(open_routing_dataset(run / "routing.nc"))
    a = head_alignment(*opened)
    assert float(a.val_loss.sel(variant="mhar")) == 3.25 and float(a.delta_val_loss) == pytest.approx(0.25)


# ------------------------------------------------------------------------------ tables
def test_tables_write_markdown_latex_csv(runs, tmp_path):
    dss = list(runs.values())
    t = probe_table(dss)
    assert "Width-disagreement KL (trained)" in t.index and t.shape[1] == 3
    paths = write_table(t, tmp_path, "probe", caption="probe", label="tab:probe")
    md, tex, csv = (p.read_text() for p in paths)
    assert md.count("\n|") >= t.shape[0] and "learned excess" in md
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex and r"\label{tab:probe}" in tex
    back = __import__("pandas").read_csv(paths[2], index_col=0)
    assert float(back.loc["N sources"].iloc[0]) == 5
    with pytest.raises(CaptureError, match="already exist"):
        write_table(t, tmp_path, "probe")
    assert perhead_table(dss[1:]).shape[0] == 2 and headalign_table([(dss[1], dss[2])]).shape[0] == 1


def test_runs_of_different_head_counts_keep_their_own_columns():
    """The per-head table labels each run with its head count (`routing_heads`, or `H` in datasets
    written before the rename), so runs at H = 2 and H = 4 are two columns, not one."""
    from analysis.probes.provenance import run_label

    h2, h4 = capture(model("mhar", routing_heads=2)), capture(model("mhar", routing_heads=4))
    assert (run_label(h2).split()[-1], run_label(h4).split()[-1]) == ("H2", "H4")
    assert perhead_table([h2, h4]).shape[0] == 2
    old = h4.copy()
    old.attrs = {**{k: v for k, v in h4.attrs.items() if k != "routing_heads"}, "H": 4}
    assert run_label(old) == run_label(h4)


# ------------------------------------------------------------------------------ CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    add_capture_subparser(sub)
    add_probe_subparser(sub)
    return p


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A minimal run directory: model, tokenizer and train_config.json over a small text corpus."""
    root = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(root / "cache"))  # tokenizer / token caches stay in tmp
        yield _make_run(root)


def _make_run(root):
    from mhar_probe.data import get_tokenizer, load_corpus

    corpus_file = root / "corpus.txt"
    words = "routing depth heads query softmax source layer residual attention width".split()
    rng = np.random.default_rng(0)
    corpus_file.write_text("<|endoftext|>".join(" ".join(rng.choice(words, 200)) for _ in range(40)))
    corpus = load_corpus(str(corpus_file), val_fraction=0.25)
    tok = get_tokenizer(corpus, vocab_size=300)
    run = root / "tiny-mhar"
    cfg = MHARConfig(residual_method="mhar", **{**SMALL, "vocab_size": len(tok)})
    torch.manual_seed(0)
    m = MHARForCausalLM(cfg)
    with torch.no_grad():
        for site in m.sites:
            site.query.normal_()
    m.save_pretrained(run)
    tok.save_pretrained(run)
    (run / "train_config.json").write_text(json.dumps({"corpus": str(corpus_file), "corpus_max_bytes": None,
                                                       "seq_len": 16, "preset": "tiny", "method": "mhar"}))
    return run


def test_capture_and_probe_cli(run_dir, tmp_path, capsys):
    p = _parser()
    out = tmp_path / "r.nc"
    args = p.parse_args(["capture", str(run_dir), "--out", str(out), "--tokens", "128", "--batch-size", "4",
                         "--draws", "2", "--no-progress"])
    assert args.func(args) == 0
    ds = xr.open_dataset(out, engine="h5netcdf")
    assert ds.attrs["tokens_seen"] == 128 and ds.attrs["checkpoint_sha256"] and ds.attrs["split"] == "val"
    ds.close()
    with pytest.raises(CaptureError, match="already exists"):
        args.func(args)
    probe_out = tmp_path / "tables"
    args = p.parse_args(["probe", str(out), str(run_dir), "--out", str(probe_out), "--draws", "2",
                         "--tokens", "64", "--no-progress"])
    assert args.func(args) == 0
    assert {f.name for f in probe_out.iterdir()} == {f"{s}.{e}" for s in ("probe", "sites", "perhead")
                                                     for e in ("md", "tex", "csv")}
    with pytest.raises(CaptureError, match="already exist"):
        args.func(args)
    args = p.parse_args(["probe", str(out), "--draws", "5", "--out", str(tmp_path / "t2")])
    with pytest.raises(CaptureError, match="captured with slices=4, draws=2"):
        args.func(args)
    bad = tmp_path / "bad.nc"
    bad.write_text("hello")
    args = p.parse_args(["probe", str(bad), "--out", str(tmp_path / "t3")])
    with pytest.raises(CaptureError, match="not a netCDF4/HDF5 file"):
        args.func(args)


def test_probe_function_returns_the_tables_the_cli_writes(runs, tmp_path, capsys):
    """`analysis.probes.probe.probe` is the command's function: its DataFrames are the CLI's CSV
    files, cell for cell, and the CLI prints its `lines()`; an mhar_hw without an mhar partner of its H
    is named and left out of the head alignment."""
    from mhar_probe.capture.io import write_dataset
    from mhar_probe.cli import main

    datasets = {**runs, "mhar_h4": capture(model("mhar", routing_heads=4))}  # runs["mhar"]: H = 2
    files = []
    for name, ds in datasets.items():
        write_dataset(ds, tmp_path / f"{name}.nc")
        files.append(str(tmp_path / f"{name}.nc"))
    assert main(["probe", *files, "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    tables = probe(files, tmp_path / "fn")
    for stem in STEMS:
        df = getattr(tables, stem)
        assert df.to_csv() == (tmp_path / "cli" / f"{stem}.csv").read_text(), stem
        assert (tmp_path / "fn" / f"{stem}.md").read_text() == (tmp_path / "cli" / f"{stem}.md").read_text()
    assert list(tables.headalign.index) == ["d32/L2/kv2 H2"] and tables.unmatched == []
    assert printed.splitlines() == [line.replace(str(tmp_path / "fn"), str(tmp_path / "cli")) for line in tables.lines()]
    alone = probe([files[0], files[2], files[3]], tmp_path / "alone")  # mhar_hw (H = 2) beside mhar at H = 4 only
    hw = alone.probe.columns[1]
    assert hw.endswith("mhar_hw H2") and alone.headalign is None and alone.unmatched == [(hw, 2)]
    assert alone.lines()[0] == (f"head alignment: no mhar run of {hw}'s shape with H = 2 among the inputs; "
                                f"{hw} is not compared")
    assert not (tmp_path / "alone" / "headalign.csv").exists()
