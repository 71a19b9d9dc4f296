"""`capture_routing`: stream batches through a routed model and reduce the routing on the fly.

Per batch the hooks collect every site's weights [n_s, B, T, h_s] and the sources (only the
final site's [N, B, T, d] for replacement forms, since site s reads their prefix [0, s+1);
for the delta form, whose sources change from site to site, each site's sources are folded
into the probe sums as soon as its weights arrive and dropped, so at most one site's
[n_s, B, T, d] is held at a time -- at the 8B shape, 65 sites' sources would otherwise stay on
the device until the batch ends); `RoutingAccumulator` folds them into fixed-size sums; the
batch is then dropped. The result
is an `xarray.Dataset` (schema in `schema.py`), NaN where a site cannot see a source.

Variables (means over the tokens seen, mask-weighted):
  weight_mean [site, source, head]        E_p w_{s,h}(n|p)              (from hook_weights)
  weight_std  [site, source, head]        token standard deviation of the same
  weight_mean_half [half, site, source, head] the same on the two halves: whole documents
      alternate (document index mod 2) where the batches name their tokens' documents, as the
      held-out rows of `capture.runs` do; else rows alternate. attrs["halves"] says which.
  documents_half [half] documents in each half (0 when split by rows)
  tokens_half [half]
with probes (default):
  slice_kl [slicing, site, head, slice]   E_p KL(a_{s,h,j} || alpha_{s,h}), trained query
  null_slice_kl [draw, slicing, site, head, slice]   the same with matched-norm random queries
  null_weight_mean [draw, site, source, head]        E_p alpha under those random queries
  null_weight_mean_half [draw, half, site, source, head]  the same on each half (the null's split-half r)
  source_cosine [site, source, source_b]   E_p cos(x_n, x_n') of the sources site s reads
  source_rms [site, source]                E_p ||x_n|| / sqrt(d)
  query_norm [site, head], interleave_unit [site, head], interleave_distinct [site, head]
  (1 where the head-interleaved slicing differs from the contiguous one; 0: an empty control)
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch
import xarray as xr
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..atomic import temp_file
from ..model.routing import routing_backend
from .errors import CaptureError
from .heads import SLICINGS
from .hooks import hooks
from .io import check_output, open_routing_dataset, write_dataset
from .reducers import ProbeSpec, RoutingAccumulator
from .schema import Layout, layout_of, provenance
from .tokens import TokenWriter

Batch = Tensor | Mapping[str, Tensor]


def _unpack(batch: Batch) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(ids [B, T], attention mask [B, T] or None, document index per token [B, T] or None)."""
    if isinstance(batch, Tensor):
        return batch, None, None
    if isinstance(batch, Mapping) and "input_ids" in batch:
        return batch["input_ids"], batch.get("attention_mask"), batch.get("document")
    raise CaptureError(f"a batch must be a LongTensor [B, T] or a mapping with 'input_ids'; got {type(batch).__name__}")


def capture_routing(
    model: nn.Module,
    batches: Iterable[Batch],
    *,
    probes: bool = True,
    slices: int = 4,
    draws: int = 8,
    seed: int = 0,
    per_token: bool = False,
    out: str | os.PathLike | None = None,
    overwrite: bool = False,
    backend: str | None = None,
    split: str = "val",
    run_path: str | os.PathLike | None = None,
    attrs: dict[str, Any] | None = None,
    progress: bool = True,
    total: int | None = None,
) -> xr.Dataset:
    """Capture routing statistics of `model` over `batches` ([B, T] ids or dicts with a mask).

    probes: also accumulate the source-based probe sums (slice-KL with `slices` slices, `draws`
        matched-norm random queries seeded by `seed`, collinearity); off = token means only.
    per_token: stream every token's weights into `out` (required then) as they are produced.
    out: write the dataset there atomically (refusing to overwrite unless `overwrite`).
    backend: route with it during the capture (None: as the model is set; see model.routing).
    Returns the dataset (opened from `out` when per-token weights were written).
    """
    if per_token and out is None:
        raise CaptureError("per-token capture streams to disk: give an output file (--out)")
    if slices < 1 or draws < 0:
        raise CaptureError(f"--slices must be >= 1 and --draws >= 0 (got {slices}, {draws})")
    if out is not None:
        out = check_output(out, overwrite)
    layout = layout_of(model)
    device = next(model.parameters()).device
    spec = ProbeSpec(slices, draws, seed) if probes else None
    was_training = model.training
    model.eval()
    try:
        with routing_backend(model, backend) as used:
            acc = RoutingAccumulator(model, layout, spec, device)
            collector = _Collector(layout, sources=probes)
            tmp = temp_file(out) if per_token else None
            writer = None
            try:
                t0 = time.perf_counter()
                with hooks(model, collector.fwd_hooks()):
                    for batch in tqdm(batches, disable=not progress, desc="capture", unit="batch", total=total):
                        ids, mask, documents = _unpack(batch)
                        if writer is None and per_token:
                            writer = TokenWriter(tmp, layout, ids.shape[1])
                        _capture_batch(model, layout, acc, collector, ids.to(device), mask, documents, writer)
                elapsed = time.perf_counter() - t0
            finally:
                if writer is not None:
                    writer.close()
            if acc.samples == 0 or float(acc.tokens.sum()) == 0:
                if tmp is not None and tmp.exists():
                    tmp.unlink()
                raise CaptureError("no tokens were captured: the batch iterable was empty or fully masked")
            meta = {"slices": slices, "null_draws": draws, "null_seed": seed,
                    "probes": int(probes), "per_token": int(per_token),
                    "halves": HALVES_TEXT[acc.halves_by],
                    "capture_seconds": round(elapsed, 3), **(attrs or {})}
            ds = _finalize(acc, layout, provenance(
                model, run_path=run_path, split=split, tokens=int(acc.tokens.sum()), samples=acc.samples,
                backend=used, extra=meta))
    finally:
        model.train(was_training)
    if out is None:
        return ds
    write_dataset(ds, out, overwrite=overwrite, append_to=tmp)
    return open_routing_dataset(out, load=True)


class _Collector:
    """Hook functions that keep one forward's weights (every site) and sources (see module doc)."""

    def __init__(self, layout: Layout, sources: bool) -> None:
        self.S = layout.num_sites
        self.per_site_sources = layout.per_site_sources
        self.want_sources = sources
        self.weights: list[Tensor | None] = [None] * self.S
        self.sources: dict[int, Tensor] = {}
        #: per-site sources: called with (site, sources, weights) when the site's weights arrive
        self.on_site: Callable[[int, Tensor, Tensor], None] | None = None

    def fwd_hooks(self) -> list:
        fwd = [("sites.*.hook_weights", self._keep_weights)]
        if self.want_sources:
            fwd.append(("sites.*.hook_sources" if self.per_site_sources else f"sites.{self.S - 1}.hook_sources",
                        self._keep_sources))
        return fwd

    def _keep_weights(self, act: Tensor, hook) -> None:
        s = int(hook.name.split(".")[1])
        self.weights[s] = act.detach()
        if self.per_site_sources and self.on_site is not None and s in self.sources:
            self.on_site(s, self.sources.pop(s), self.weights[s])  # the site reads its sources before it weighs

    def _keep_sources(self, act: Tensor, hook) -> None:
        self.sources[int(hook.name.split(".")[1])] = act.detach()

    def take(self) -> tuple[list[Tensor | None], dict[int, Tensor]]:
        out = self.weights, self.sources
        self.weights, self.sources = [None] * self.S, {}
        return out


#: attrs["halves"] of a dataset, by how its halves were split
HALVES_TEXT = {"documents": "documents (document index mod 2: disjoint text)",
               "rows": "rows (sample index mod 2: the same documents in both halves)"}


def _halves(acc: RoutingAccumulator, documents: Tensor | None, B: int, T: int) -> Tensor:
    """The half of every token [B, T]: its document's index mod 2 when documents are given (whole
    documents to one half: disjoint text), else its row's sample index mod 2 (rows alternate)."""
    by = "documents" if documents is not None else "rows"
    if acc.halves_by not in (None, by):
        raise CaptureError("every batch of one capture must give its tokens' documents, or none may")
    acc.halves_by = by
    if documents is None:
        return (torch.arange(acc.samples, acc.samples + B) % 2)[:, None].expand(B, T)
    if documents.shape != (B, T):
        raise CaptureError(f"a batch's 'document' must have the shape of its input_ids {(B, T)}, "
                           f"got {tuple(documents.shape)}")
    return documents.cpu() % 2


def _capture_batch(model: nn.Module, layout: Layout, acc: RoutingAccumulator, collector: _Collector, ids: Tensor,
                   mask: Tensor | None, documents: Tensor | None, writer: TokenWriter | None) -> None:
    B, T = ids.shape
    S = layout.num_sites
    masked = mask is not None and not bool(mask.all())
    m_in = mask.to(ids.device, torch.float32) if mask is not None else torch.ones(B, T, device=ids.device)
    half = _halves(acc, documents, B, T)  # [B, T]
    if documents is not None:
        for k in (0, 1):
            acc.documents[k].update(documents[(half == k) & (m_in.cpu() > 0)].unique().tolist())
    kwargs = {"use_cache": False}
    if masked:
        kwargs["attention_mask"] = mask.to(ids.device)
    m, half_one = acc.update_tokens(m_in, half)
    half1 = half.reshape(-1).to(m.device, torch.float32) if acc.probes is not None else None  # [P]
    if acc.probes is not None and collector.per_site_sources:  # fold each site's sources as they come
        collector.on_site = lambda s, src, w: acc.update_sources(s, src, m, w, geometry=True, half1=half1)
    try:
        with torch.no_grad():
            model(ids, **kwargs)
    finally:
        collector.on_site = None
    weights, sources = collector.take()
    for s in range(S):
        w = weights[s]
        if w is None:
            raise CaptureError(f"routing site {s} produced no weights (is the model's forward hooked?)")
        acc.update_weights(s, w, m_in if masked else None, half_one)
        if acc.probes is not None and not collector.per_site_sources:
            n = w.shape[0]
            acc.update_sources(s, sources[S - 1][:n], m, w, geometry=s == S - 1, half1=half1)
    if writer is not None:
        writer.append(weights, ids, m_in)


def _nan_where(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    return np.where(keep, x, np.nan)


def _finalize(acc: RoutingAccumulator, layout: Layout, attrs: dict[str, Any]) -> xr.Dataset:
    vis = layout.visible()  # [S, N, H]
    tok_half = acc.tokens.cpu().numpy()
    tok = tok_half.sum()
    W = acc.W.cpu().numpy()
    mean = W.sum(0) / tok
    var = np.clip(acc.W2.cpu().numpy() / tok - mean ** 2, 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        half_mean = W / tok_half[:, None, None, None]
    data: dict[str, Any] = {
        "weight_mean": (("site", "source", "head"), _nan_where(mean, vis)),
        "weight_std": (("site", "source", "head"), _nan_where(np.sqrt(var), vis)),
        "weight_mean_half": (("half", "site", "source", "head"), _nan_where(half_mean, vis[None])),
        "tokens_half": (("half",), tok_half),
        "documents_half": (("half",), np.array([len(d) for d in acc.documents]) if acc.halves_by == "documents"
                           else np.zeros(2, dtype=int)),
    }
    coords = layout.coords()
    coords["half"] = np.arange(2)
    if acc.probes is not None:
        S, N = layout.num_sites, layout.num_sources
        ns = np.array([s.num_sources for s in layout.sites])
        hs = np.array([s.num_heads for s in layout.sites])
        head_ok = np.arange(layout.max_heads)[None, :] < hs[:, None]  # [S, H]
        C, R = acc.C.cpu().numpy() / tok, acc.R.cpu().numpy() / tok
        if not layout.per_site_sources:  # every site reads a prefix of the final site's sources
            C, R = np.broadcast_to(C[-1], C.shape).copy(), np.broadcast_to(R[-1], R.shape).copy()
        src_ok = np.arange(N)[None, :] < ns[:, None]  # [S, N]
        pair_ok = src_ok[:, :, None] & src_ok[:, None, :]
        KL = acc.KL.cpu().numpy() / tok  # [V, 2, S, H, Sl]
        A = acc.A.cpu().numpy() / tok  # [V, S, N, H]
        A1 = acc.A1.cpu().numpy()  # [V, S, N, H], half 1's sum
        with np.errstate(invalid="ignore", divide="ignore"):
            A_half = np.stack([(acc.A.cpu().numpy() - A1) / tok_half[0], A1 / tok_half[1]], 1)  # [V, 2, S, N, H]
        kl_ok = head_ok[None, None, :, :, None]
        data.update({
            "slice_kl": (("slicing", "site", "head", "slice"), _nan_where(KL[0], kl_ok[0])),
            "null_slice_kl": (("draw", "slicing", "site", "head", "slice"), _nan_where(KL[1:], kl_ok)),
            "null_weight_mean": (("draw", "site", "source", "head"), _nan_where(A[1:], vis[None])),
            "null_weight_mean_half": (("draw", "half", "site", "source", "head"),
                                      _nan_where(A_half[1:], vis[None, None])),
            "source_cosine": (("site", "source", "source_b"), _nan_where(C, pair_ok)),
            "source_rms": (("site", "source"), _nan_where(R, src_ok)),
            "query_norm": (("site", "head"), acc.query_norm.numpy()),
            "interleave_unit": (("site", "head"), np.where(head_ok, acc.units.numpy(), 0)),
            "interleave_distinct": (("site", "head"), np.where(head_ok, acc.interleave_distinct.numpy(), 0)),
        })
        coords.update(slicing=np.array(SLICINGS, dtype=object), slice=np.arange(acc.probes.slices),
                      draw=np.arange(acc.probes.draws), source_b=np.arange(N),
                      source_b_label=("source_b", np.array(layout.source_label, dtype=object)))
        attrs = {**attrs, "recompute_max_abs_err": float(acc.max_recompute_err)}
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    ds["weight_mean"].attrs["long_name"] = "token-mean routing weight of head h at site s on source n"
    return ds
