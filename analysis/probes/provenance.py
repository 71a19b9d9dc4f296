"""Carrying the capture's provenance onto probe results."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Sequence

import xarray as xr

from mhar_probe.capture.errors import CaptureError
from mhar_probe.model import methods
from mhar_probe.model.methods import routing_heads_of

KEYS = ("method", "routing_heads", "H", "G", "d", "L", "preset", "run_path", "checkpoint_sha256", "split", "tokens_seen",
        "package_version", "created", "routing_backend", "slices", "null_draws", "null_seed")


def source_attrs(ds: xr.Dataset, prefix: str = "") -> dict[str, Any]:
    return {f"{prefix}{k}": ds.attrs[k] for k in KEYS if k in ds.attrs}


def with_provenance(out: xr.Dataset, probe: str, inputs: Sequence[xr.Dataset]) -> xr.Dataset:
    """Attach `probe`, its creation time and each input's provenance (prefixed when several)."""
    attrs: dict[str, Any] = {"probe": probe,
                             "probe_created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if len(inputs) == 1:
        attrs.update(source_attrs(inputs[0]))
    else:
        for i, ds in enumerate(inputs):
            attrs.update(source_attrs(ds, prefix=f"input{i}_"))
    out.attrs.update(attrs)
    return out


def run_label(ds: xr.Dataset) -> str:
    """A short column label: preset (or d/L), then the method and its head count ('tiny mhar H4',
    `run_label`'s compact form)."""
    a = ds.attrs
    size = a.get("preset") or f"d{a.get('d')}L{a.get('L')}"
    heads = routing_heads_of(a.get("method"), a)  # `routing_heads`, or `H` in datasets written before
    return f"{size} {methods.run_label(str(a.get('method')), heads, 'compact')}"


def require_probes(ds: xr.Dataset, what: str) -> None:
    if "slice_kl" not in ds:
        raise CaptureError(f"{what} needs the probe sums; this dataset was captured with --no-probes "
                           f"(run `mhar capture RUN` again without it)")
