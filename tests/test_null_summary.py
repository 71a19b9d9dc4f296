"""The random-query null's summary form (analysis.probes.null_summary): a routing dataset that keeps,
per draw, only the statistics the probes and claims read gives the same null means, sds and z-scores
as the dataset with the null's maps, checked against a float64 computation written here from the
maps; it survives the disk, is what an export writes, and refuses a reading it cannot give."""

from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
import torch
import xarray as xr

import mhar_probe  # noqa: F401
from analysis.probes import per_head_deviation, width_disagreement
from analysis.probes.null_summary import NULL_FORM, has_null_draws, summarise_null
from mhar_probe.capture import CaptureError, capture_routing
from mhar_probe.capture.io import NULL_DRAWS, open_routing_dataset, write_dataset
from mhar_probe.demo.claims import spread_read
from mhar_probe.demo.export import summarise_routing
from mhar_probe.model import MHARConfig, MHARForCausalLM

SMALL = dict(vocab_size=97, hidden_size=32, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)


def _capture(method: str, draws: int = 6, **kw) -> xr.Dataset:
    """A capture of a model with random routing queries (13 sites: first_sites = 10 cuts some off)."""
    torch.manual_seed(0)
    m = MHARForCausalLM(MHARConfig(residual_method=method, **{**SMALL, **kw})).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for site in m.sites:
            site.query.copy_(torch.randn(site.query.shape, generator=g))
    rows = [torch.randint(0, 97, (2, 8), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    return capture_routing(m, rows, progress=False, draws=draws)


@pytest.fixture(scope="module")
def mhar(tmp_path_factory) -> tuple[xr.Dataset, xr.Dataset]:
    """(draws form, summary form), both read back from disk as a committed study holds them."""
    folder = tmp_path_factory.mktemp("null")
    draws = open_routing_dataset(write_dataset(_capture("mhar", routing_heads=4), folder / "draws.nc"))
    assert summarise_routing(folder / "draws.nc", folder / "summary.nc")
    return draws, open_routing_dataset(folder / "summary.nc")


def _z(value: float, null: np.ndarray) -> float:
    return (value - null.mean()) / null.std(ddof=1)


def _deviation_by_hand(w: np.ndarray, keep: np.ndarray) -> tuple[float, float]:
    """max |D| and the spread of the cross-head r of one map w [site, source, head] (float64)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # cells no head reads: all-NaN
        D = w - np.nanmean(w, axis=-1, keepdims=True)
    common = keep.all(-1)
    r = np.corrcoef(np.stack([D[..., h][common] for h in range(w.shape[-1])]))
    off = r[~np.eye(len(r), dtype=bool)]
    return float(np.abs(D[keep]).max()), float(np.sqrt(np.mean((off - off.mean()) ** 2)))


@pytest.mark.parametrize("first_sites", [10, None])
def test_deviation_nulls_and_z_match_the_maps_and_a_hand_computation(mhar, first_sites):
    draws, summary = mhar
    assert not has_null_draws(summary) and summary.attrs[NULL_FORM] == "summary"
    assert "null_weight_mean" not in summary and summary.sizes["draw"] == 6
    a, b = per_head_deviation(draws, first_sites), per_head_deviation(summary, first_sites)
    for name in ("null_max_abs", "null_max_abs_mean", "null_max_abs_std", "null_mean_abs_mean",
                 "null_replication_r", "null_replication_r_mean", "null_replication_r_std", "replication_z",
                 "cross_head_spread_null", "cross_head_spread_null_mean", "cross_head_spread_z", "max_abs"):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)  # to the last bit
    assert "null_deviation" in a and "null_deviation" not in b  # the maps come only from the draws
    # independent: float64 from the stored float32 maps, numpy's own corrcoef
    w = draws.weight_mean.values
    keep = np.isfinite(w) & (draws.site_num_sources.values >= 2)[:, None, None]
    if first_sites is not None:
        keep[first_sites:] = False
    assert 0 < keep.sum() < np.isfinite(w).sum()
    maps = draws.null_weight_mean.values.astype(np.float64)  # [draw, site, source, head]
    by_hand = np.array([_deviation_by_hand(m, keep) for m in maps])  # [draw, 2]
    np.testing.assert_allclose(b.null_max_abs.values, by_hand[:, 0], rtol=1e-6)
    np.testing.assert_allclose(b.cross_head_spread_null.values, by_hand[:, 1], rtol=1e-6)
    assert float(b.cross_head_spread_z) == pytest.approx(_z(float(b.cross_head_spread), by_hand[:, 1]), rel=1e-5)
    halves = draws.null_weight_mean_half.values.astype(np.float64)  # [draw, half, site, source, head]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # cells no head reads: all-NaN
        dev = halves - np.nanmean(halves, axis=-1, keepdims=True)
    rep = np.array([np.corrcoef(d[0][keep], d[1][keep])[0, 1] for d in dev])
    np.testing.assert_allclose(b.null_replication_r.values, rep, rtol=1e-6)
    assert float(b.replication_z) == pytest.approx(_z(float(b.replication_r), rep), rel=1e-5)


def test_width_and_spread_nulls_match_the_maps_and_a_hand_computation(mhar, tmp_path):
    draws, summary = mhar
    a, b = width_disagreement(draws), width_disagreement(summary)
    for name in ("null_mean", "null_std", "excess", "summary_null_mean", "summary_null_std", "summary_excess"):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    routed = draws.site_num_sources.values >= 2
    kl = draws.null_slice_kl.sel(slicing="contiguous").values.astype(np.float64)  # [draw, site, head, slice]
    per_draw = np.nanmean(kl, axis=(-2, -1))[:, routed].mean(1)  # [draw]
    assert float(b.sel(slicing="contiguous").summary_null_mean) == pytest.approx(per_draw.mean(), rel=1e-6)
    assert float(b.sel(slicing="contiguous").summary_null_std) == pytest.approx(per_draw.std(ddof=1), rel=1e-5)
    # the claim table's depth-read spread: per draw, TV from uniform averaged over routed sites and heads
    write_dataset(draws, tmp_path / "d.nc")
    write_dataset(summary, tmp_path / "s.nc")
    (read_a, final_a), (read_b, final_b) = spread_read(tmp_path / "d.nc"), spread_read(tmp_path / "s.nc")
    assert read_a == read_b and final_a == final_b and read_b.draws == 6
    n = draws.site_num_sources.values
    w = draws.null_weight_mean.values.astype(np.float64)
    tv = 0.5 * np.nansum(np.abs(w - (1.0 / n)[:, None, None]), axis=-2)  # [draw, site, head]
    spread = tv[:, n >= 2].mean(axis=(1, 2))
    assert read_b.null_mean == pytest.approx(spread.mean(), rel=1e-12)
    assert read_b.z == pytest.approx(_z(read_b.value, spread), rel=1e-9)


def test_the_summary_keeps_its_statistics_exactly_on_disk_and_is_smaller(mhar, tmp_path):
    draws, summary = mhar
    path = write_dataset(summary, tmp_path / "again.nc")
    back = open_routing_dataset(path)
    xr.testing.assert_identical(summary, back)  # nothing cast: the statistics are not null maps
    assert back.null_dev_replication_r.dtype == np.float64
    assert not any(name in back for name in NULL_DRAWS)
    assert summarise_null(back) is back  # summarising twice changes nothing
    for name in ("weight_mean", "weight_mean_half", "slice_kl", "source_cosine", "query_norm"):
        xr.testing.assert_identical(draws[name], back[name])  # the trained measurements are kept
    maps = write_dataset(draws, tmp_path / "draws.nc")

    def null_bytes(file) -> int:  # the stored (deflated) bytes of the null's variables
        with h5py.File(file, "r") as f:
            return sum(f[k].id.get_storage_size() for k in f if k.startswith("null_"))

    assert null_bytes(path) < null_bytes(maps) / 4


def test_a_reading_the_summary_cannot_give_is_refused_in_one_line(mhar):
    _, summary = mhar
    with pytest.raises(CaptureError, match="the first 10 sites and every site only, not the first 4 sites") as err:
        per_head_deviation(summary, first_sites=4)
    assert "\n" not in str(err.value)


def test_single_head_and_halfless_captures_summarise(tmp_path):
    """attnres (H = 1) keeps the width and spread nulls (no per-head deviation); a capture made before
    the null had halves keeps no split-half r, and reads NaN as before."""
    ds = _capture("attnres", draws=4)
    s = summarise_null(ds)
    assert {"null_site_kl", "null_read_spread"} <= set(s.data_vars) and "null_dev_max_abs" not in s
    np.testing.assert_array_equal(width_disagreement(ds).summary_excess.values,
                                  width_disagreement(s).summary_excess.values)
    old = _capture("mhar", draws=4, routing_heads=2).drop_vars("null_weight_mean_half")
    s = summarise_null(old)
    assert "null_dev_replication_r" not in s and "null_dev_max_abs" in s
    assert np.isnan(float(per_head_deviation(s).replication_z))
    assert float(per_head_deviation(s).null_max_abs_mean) == float(per_head_deviation(old).null_max_abs_mean)


def test_an_export_writes_the_summary_form(tmp_path):
    """`export_study` (what a device call commits) keeps the null as its per-draw statistics; the
    exported run's probes read as the run's own."""
    from mhar_probe.demo.export import export_study
    from mhar_probe.sweep.manifest import write_manifest

    src, dest = tmp_path / "src", tmp_path / "dest"
    run = src / "runs" / "r1"
    run.mkdir(parents=True)
    write_dataset(_capture("mhar", draws=3, routing_heads=2), run / "routing.nc")
    write_manifest(src / "runs", {}, [dict(name="r1", axes=dict(method="mhar", H=2, seed=0), status="finished")])
    written = export_study(src, dest)
    out = dest / "runs" / "r1" / "routing.nc"
    assert out in written
    a, b = open_routing_dataset(run / "routing.nc"), open_routing_dataset(out)
    assert has_null_draws(a) and not has_null_draws(b) and b.attrs[NULL_FORM] == "summary"
    assert float(per_head_deviation(a).replication_z) == float(per_head_deviation(b).replication_z)
