"""Hooks, run_with_cache and capture_routing against float64 references and analytic cases."""

from __future__ import annotations

import importlib.util
import math
import os

import h5py
import numpy as np
import pytest
import torch
import xarray as xr

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # triton backend on the CPU interpreter

import mhar_probe  # noqa: F401,E402
from mhar_probe.capture import (CaptureError, capture_routing, hook_points, hooks,  # noqa: E402
                                layout_of, open_routing_dataset, routing_backend, run_with_cache)
from mhar_probe.capture.heads import slice_kl  # noqa: E402
from mhar_probe.capture.io import NULL_DRAWS, write_dataset  # noqa: E402
from mhar_probe.capture.reducers import ProbeSpec, RoutingAccumulator  # noqa: E402
from mhar_probe.model import MHARConfig, MHARForCausalLM  # noqa: E402
from mhar_probe.model.routing import routing_backend_of  # noqa: E402

# Every backend, named here rather than read from the registry: `triton` registers on first use,
# and a failure to register must fail its cases, not make them vanish. Only a machine without the
# triton package skips them, and says so.
NO_TRITON = importlib.util.find_spec("triton") is None


def _on(backend: str, *more: str):
    """One parameter set on `backend`; triton's skip only where the package is absent."""
    marks = pytest.mark.skipif(NO_TRITON, reason="the triton package is not installed") if backend == "triton" else ()
    return pytest.param(backend, *more, marks=marks)


BACKENDS = [_on(b) for b in ("eager", "compile", "triton")]

SMALL = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
METHODS = ["attnres", "mhar", "mhar_hw", "delta"]


def make(method: str, seed: int = 0, randomise: bool = True, **kw) -> MHARForCausalLM:
    torch.manual_seed(seed)
    model = MHARForCausalLM(MHARConfig(residual_method=method, **{**SMALL, **kw})).eval()
    if randomise:
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for site in model.sites:
                site.query.copy_(torch.randn(site.query.shape, generator=g))
                site.key_norm.weight.copy_(1 + 0.3 * torch.randn(site.key_norm.weight.shape, generator=g))
                if hasattr(site, "gate"):
                    site.gate.fill_(0.5)
    return model


def ids(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 97, (B, T), generator=torch.Generator().manual_seed(seed))


def reference_weights(sources: torch.Tensor, query: torch.Tensor, g: torch.Tensor, H: int, eps: float) -> torch.Tensor:
    """float64 eq. (mh): [N, B, T, d] -> [N, B, T, heads] (one full-width head per row of a 2-D query)."""
    x = sources.double()
    keys = g.double() * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if query.dim() == 2:
        return torch.stack([torch.einsum("e,nbte->nbt", q.double(), keys).softmax(0) for q in query], -1)
    N, B, T, d = x.shape
    logits = torch.einsum("he,nbthe->nbth", query.double().view(H, d // H), keys.view(N, B, T, H, d // H))
    return logits.softmax(0)


# ---------------------------------------------------------------------------------- hooks
def test_hook_names_documented_and_removed_on_exit():
    model = make("mhar")
    names = list(hook_points(model))
    S = model.config.num_sites
    assert names == [f"sites.{s}.{h}" for s in range(S) for h in ("hook_sources", "hook_weights", "hook_out")]
    x = ids(2, 7)
    with torch.no_grad():
        plain = model(x).logits
    seen = []
    with hooks(model, [("sites.*.hook_weights", lambda a, h: seen.append(h.name))]):
        with torch.no_grad():
            hooked = model(x).logits
    assert seen == [f"sites.{s}.hook_weights" for s in range(S)]
    assert torch.equal(plain, hooked)
    assert not any(p.active for p in hook_points(model).values())
    with pytest.raises(CaptureError, match="no hook point matches"):
        with hooks(model, [("sites.99.hook_weights", lambda a, h: None)]):
            pass


def test_no_hooks_means_no_sources_materialised():
    model = make("mhar")
    calls = []
    for name, point in hook_points(model).items():
        point.forward = (lambda x, name=name: calls.append(name) or x)  # count real calls
    with torch.no_grad():
        model(ids(1, 5))
    assert calls and all(n.endswith("hook_out") for n in calls)  # sources / weights never touched


def test_hook_out_replacement_changes_the_model():
    model = make("mhar")
    x = ids(1, 6)
    with torch.no_grad():
        base = model(x).logits
        with hooks(model, [("sites.4.hook_out", lambda a, h: torch.zeros_like(a))]):
            zeroed = model(x).logits
    assert not torch.allclose(base, zeroed)


# torch.compile costs tens of seconds per new (method, H) specialisation on two CPU cores, so
# the compile backend is checked on mhar (the same code path as every other method) only.
BACKEND_METHODS = [_on(b, m) for b in ("eager", "compile", "triton") for m in METHODS if b != "compile" or m == "mhar"]


@pytest.mark.parametrize("backend,method", BACKEND_METHODS)
def test_cached_weights_equal_float64_recomputation(method, backend):
    model = make(method)
    x = ids(2, 3 if backend == "triton" else 6)
    with routing_backend(model, backend):
        _, cache = run_with_cache(model, x, names_filter=["sites.*.hook_weights", "sites.*.hook_sources"])
    layout = layout_of(model)
    for s, site in enumerate(model.sites):
        w, src = cache[f"sites.{s}.hook_weights"], cache[f"sites.{s}.hook_sources"]
        assert w.shape[0] == src.shape[0] == layout.sites[s].num_sources
        assert w.shape[-1] == layout.sites[s].num_heads
        ref = reference_weights(src, site.query.detach(), site.key_norm.weight.detach(), site.num_heads, site.eps)
        torch.testing.assert_close(w.double(), ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(w.sum(0).double(), torch.ones_like(ref[0]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_capture_equals_cache_for_every_backend(backend):
    model = make("mhar")
    x = ids(2, 3 if backend == "triton" else 8, seed=3)
    _, cache = run_with_cache(model, x, names_filter="sites.*.hook_weights")
    ds = capture_routing(model, [x], backend=backend, progress=False, draws=2)
    vis = layout_of(model).visible()
    for s in range(model.config.num_sites):
        w = cache[f"sites.{s}.hook_weights"].double()  # [n, B, T, H]
        n = w.shape[0]
        np.testing.assert_allclose(ds.weight_mean.values[s, :n], w.mean((1, 2)).numpy(), rtol=1e-5, atol=1e-6)
    assert np.isnan(ds.weight_mean.values[~vis]).all() and not np.isnan(ds.weight_mean.values[vis]).any()
    np.testing.assert_allclose(ds.weight_mean.sum("source").values, 1.0, atol=1e-5)
    assert ds.attrs["recompute_max_abs_err"] < 1e-4
    assert ds.attrs["routing_backend"] == backend and routing_backend_of(model) == "eager"  # restored


# ---------------------------------------------------------------------------------- analytic
def test_zero_query_gives_uniform_weights_and_zero_kl():
    model = make("attnres", randomise=False)  # queries are zero at init
    ds = capture_routing(model, [ids(2, 8)], progress=False, draws=3)
    n = ds.site_num_sources.values
    np.testing.assert_allclose(ds.weight_mean.isel(head=0).values,
                               np.where(np.arange(len(ds.source))[None] < n[:, None], 1 / n[:, None], np.nan),
                               atol=1e-6)
    np.testing.assert_allclose(ds.slice_kl.values, 0.0, atol=1e-7)
    np.testing.assert_allclose(ds.null_slice_kl.values, 0.0, atol=1e-7)  # matched norm of zero is zero


def test_slice_kl_identical_distributions_is_zero():
    logits = torch.randn(5, 7, dtype=torch.float64)  # [n, tokens]
    same = logits[..., None].expand(-1, -1, 3) + torch.randn(1, 7, 3, dtype=torch.float64)  # shift-invariant
    torch.testing.assert_close(slice_kl(same, logits), torch.zeros(7, 3, dtype=torch.float64))


def _accumulate_one_site(sources: torch.Tensor, query: torch.Tensor, slices: int) -> RoutingAccumulator:
    """Run the accumulator's probe path for the final site of a d=len(query), H=1 model."""
    d = query.numel()
    model = make("attnres", hidden_size=d, num_attention_heads=1, num_key_value_heads=1, randomise=False)
    with torch.no_grad():
        model.sites[-1].query.copy_(query)
    acc = RoutingAccumulator(model, layout_of(model), ProbeSpec(slices=slices, draws=0), torch.device("cpu"))
    m = torch.ones(sources.shape[1] * sources.shape[2], dtype=torch.float64)
    acc.update_sources(len(model.sites) - 1, sources, m, None)
    return acc


def test_hand_computed_kl_on_three_sources():
    # keys are +-1 rows (RMS 1, so RMSNorm leaves them as they are up to eps)
    keys = torch.tensor([[1., 1., 1., 1.], [1., -1., 1., 1.], [-1., 1., 1., -1.]])
    q = torch.tensor([0.5, -1.0, 2.0, 0.25])
    acc = _accumulate_one_site(keys[:, None, None, :], q, slices=2)
    l1 = [0.5 * 1 - 1.0 * 1, 0.5 * 1 + 1.0 * 1, -0.5 - 1.0]  # slice 0: dims 0, 1
    l2 = [2.0 + 0.25, 2.0 + 0.25, 2.0 - 0.25]  # slice 1: dims 2, 3

    def softmax(v):
        e = [math.exp(x) for x in v]
        return [x / sum(e) for x in e]

    alpha = softmax([a + b for a, b in zip(l1, l2)])
    expected = [sum(p * math.log(p / r) for p, r in zip(softmax(l), alpha)) for l in (l1, l2)]
    got = acc.KL[0, 0, -1, 0].numpy()  # trained, contiguous, final site, head 0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # width 4, one attention head of 4 dims: interleaving falls back to dims 0, 2 | 1, 3
    l1i, l2i = [0.5 + 2.0, 0.5 + 2.0, -0.5 + 2.0], [-1.0 + 0.25, 1.0 + 0.25, -1.0 - 0.25]
    expected_i = [sum(p * math.log(p / r) for p, r in zip(softmax(l), alpha)) for l in (l1i, l2i)]
    np.testing.assert_allclose(acc.KL[0, 1, -1, 0].numpy(), expected_i, rtol=1e-5, atol=1e-6)


def test_collinear_and_orthogonal_sources():
    d = 8
    base = torch.randn(d, dtype=torch.float64)
    collinear = torch.stack([base, 2.5 * base, 0.1 * base])[:, None, None, :]  # [3, 1, 1, d]
    acc = _accumulate_one_site(collinear, torch.zeros(d), slices=2)
    np.testing.assert_allclose(acc.C[-1, :3, :3].numpy(), np.ones((3, 3)), atol=1e-12)
    ortho = torch.eye(d, dtype=torch.float64)[:3, None, None, :] * 3.0
    acc = _accumulate_one_site(ortho, torch.zeros(d), slices=2)
    np.testing.assert_allclose(acc.C[-1, :3, :3].numpy(), np.eye(3), atol=1e-12)


# ---------------------------------------------------------------------------------- streaming
@pytest.mark.parametrize("method", ["mhar", "delta"])
def test_streaming_equals_one_capture_over_concatenation(method):
    model = make(method)
    parts = [ids(2, 8, seed=i) for i in range(4)]
    many = capture_routing(model, parts, progress=False, draws=3)
    one = capture_routing(model, [torch.cat(parts)], progress=False, draws=3)
    for name in many.data_vars:
        np.testing.assert_allclose(many[name].values, one[name].values, rtol=1e-5, atol=1e-7, err_msg=name)
    assert many.attrs["tokens_seen"] == one.attrs["tokens_seen"] == 64
    np.testing.assert_array_equal(many.tokens_half.values, [32, 32])


def test_attention_mask_weights_tokens():
    model = make("mhar")
    x = ids(2, 8)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    ds = capture_routing(model, [{"input_ids": x, "attention_mask": mask}], progress=False, draws=1)
    assert ds.attrs["tokens_seen"] == 13
    np.testing.assert_allclose(ds.weight_mean.sum("source").values, 1.0, atol=1e-5)


# ---------------------------------------------------------------------------------- disk
def test_round_trip_is_identical(tmp_path):
    model = make("mhar_hw")
    ds = capture_routing(model, [ids(2, 8)], progress=False, draws=2, run_path=None)
    path = write_dataset(ds, tmp_path / "r.nc")
    back = open_routing_dataset(path)
    # measured variables round-trip bit for bit; the null's draws are stored in float32
    nulls = [name for name in ds.data_vars if name in NULL_DRAWS]
    assert len(nulls) == 3
    xr.testing.assert_identical(ds.drop_vars(nulls), back.drop_vars(nulls))
    for name in nulls:
        assert back[name].dtype == np.float32 and back[name].dims == ds[name].dims
        np.testing.assert_array_equal(back[name].values, ds[name].values.astype(np.float32))
    with h5py.File(path, "r") as f:  # every array is stored deflated
        assert {f[name].compression for name in ds.data_vars if ds[name].ndim} == {"gzip"}
    assert back.attrs["method"] == "mhar_hw" and back.attrs["tokens_seen"] == 16
    with pytest.raises(CaptureError, match="already exists"):
        write_dataset(ds, path)
    write_dataset(ds, path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.nc"]  # no temp files left behind


def test_per_token_weights_stream_to_disk(tmp_path):
    model = make("mhar")
    parts = [ids(2, 8, seed=i) for i in range(3)]
    ds = capture_routing(model, parts, per_token=True, out=tmp_path / "t.nc", progress=False, draws=1)
    assert ds.token_weights.shape == (6, 8, model.config.num_sites, model.config.num_sources, 2)
    np.testing.assert_allclose(ds.token_weights.mean(("sample", "position")).values, ds.weight_mean.values,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ds.token_ids.values, torch.cat(parts).numpy())
    ds.close()
    with pytest.raises(CaptureError, match="give an output file"):
        capture_routing(model, parts, per_token=True, progress=False)


def test_non_routing_files_give_clear_errors(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a dataset")
    with pytest.raises(CaptureError, match="not a netCDF4/HDF5 file"):
        open_routing_dataset(text)
    other = tmp_path / "other.nc"
    xr.Dataset({"x": ("a", np.arange(3))}).to_netcdf(other, engine="h5netcdf")
    with pytest.raises(CaptureError, match="not a routing dataset"):
        open_routing_dataset(other)
    with pytest.raises(CaptureError, match="does not exist"):
        open_routing_dataset(tmp_path / "missing.nc")
    with pytest.raises(CaptureError, match="no routing sites"):
        capture_routing(make("baseline", randomise=False), [ids(1, 4)], progress=False)
    with pytest.raises(CaptureError, match="no tokens"):
        capture_routing(make("mhar"), [], progress=False)


def test_halves_split_by_whole_documents(tmp_path):
    """Packed rows cut documents across rows; with each token's document given, every document
    falls in one half (document index mod 2), and each half's mean is the per-token mean over the
    tokens of its documents (an independent recount from the streamed per-token weights)."""
    from mhar_probe.capture.runs import row_batches
    from mhar_probe.data import document_index, pack_tokens

    model = make("mhar")
    eos = 0
    g = torch.Generator().manual_seed(5)
    docs = [torch.randint(1, 97, (int(n),), generator=g) for n in torch.randint(3, 12, (12,), generator=g)]
    stream = torch.cat([torch.cat([d, torch.tensor([eos])]) for d in docs]).numpy()
    packed = pack_tokens(stream, 7)  # rows of 8 tokens, documents cut across rows
    documents = document_index(packed, eos)
    assert documents[0, 0] == 0 and int(documents.max()) <= len(docs) - 1
    flat = packed.reshape(-1)
    assert all(int(documents.reshape(-1)[i]) == int((flat[:i] == eos).sum()) for i in range(flat.numel()))
    batches, _ = row_batches((packed, documents), None, 3)
    ds = capture_routing(model, batches, per_token=True, out=tmp_path / "t.nc", progress=False, draws=1)
    assert ds.attrs["halves"].startswith("documents")
    parity = (documents % 2).numpy()  # [M, T]
    for k in (0, 1):
        want = ds.token_weights.values[parity == k].mean(0)  # [site, source, head]
        np.testing.assert_allclose(ds.weight_mean_half.sel(half=k).values, want, rtol=1e-5, atol=1e-6)
        assert int(ds.documents_half.sel(half=k)) == len(np.unique(documents.numpy()[parity == k]))
    seen = [set(np.unique(documents.numpy()[parity == k])) for k in (0, 1)]
    assert not seen[0] & seen[1]  # no document in both halves
    ds.close()
    rows_only = capture_routing(model, [packed[:3]], progress=False, draws=1)
    assert rows_only.attrs["halves"].startswith("rows") and list(rows_only.documents_half.values) == [0, 0]
    with pytest.raises(CaptureError, match="must give its tokens' documents"):
        capture_routing(model, [batches[0], packed[:3]], progress=False, draws=1)


def test_replication_is_one_when_both_halves_hold_the_same_documents():
    """Known replication: every row is one whole document (ending in <eos>) and each document
    appears twice in a row, so the document split puts one copy of each in each half; the halves'
    deviations are then equal and the split-half r is 1. Distinct documents give r < 1."""
    from analysis.probes import per_head_deviation
    from mhar_probe.capture.runs import row_batches
    from mhar_probe.data import document_index

    model = make("mhar")
    g = torch.Generator().manual_seed(9)
    unique = torch.randint(1, 97, (6, 8), generator=g)
    unique[:, -1] = 0  # each row is one document closed by <eos> = 0
    for rows, same in ((unique.repeat_interleave(2, dim=0), True), (torch.cat([unique, unique.flip(1)]), False)):
        rows = rows.clone()
        rows[:, -1] = 0
        batches, _ = row_batches((rows, document_index(rows, 0)), None, 4)
        r = float(per_head_deviation(capture_routing(model, batches, progress=False, draws=2)).replication_r)
        assert (r == pytest.approx(1.0, abs=1e-9)) is same, r


def test_the_summary_says_when_the_split_held_fewer_tokens_than_asked():
    """Issue 54: `mhar capture --tokens 65536` on the demo's runs read the whole 56,192-token split without a word."""
    import numpy as np
    import xarray as xr

    from mhar_probe.capture.of_run import capture_summary

    def ds(asked: int, seen: int) -> xr.Dataset:
        return xr.Dataset({"w": (("site", "source", "head"), np.zeros((9, 9, 2)))},
                          attrs=dict(tokens_seen=seen, tokens_requested=asked, split="val", method="mhar",
                                     capture_seconds=1.0))

    line = capture_summary(ds(65536, 56192), "r.nc")
    assert "56192 tokens (all the val split holds; --tokens asked for 65536)" in line
    assert "asked" not in capture_summary(ds(16384, 16384), "r.nc")
