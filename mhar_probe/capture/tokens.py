"""Per-token routing weights streamed to disk as they are produced (h5netcdf, unlimited `sample`).

Variables appended batch by batch to the capture's temporary file:
    token_weights [sample, position, site, source, head] float32 (NaN where a site cannot see
                  a source or lacks a head)
    token_ids     [sample, position] int64
    token_mask    [sample, position] int8  (1 = a real token)
The reduced dataset is later added to the same file (xarray, mode "a") and the file renamed into
place, so one `xr.open_dataset` shows both; per-token arrays are read lazily.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .schema import Layout


class TokenWriter:
    """Appends [B, T, S, N, H] weight blocks to an open netCDF file; memory is one batch."""

    def __init__(self, path: Path, layout: Layout, seq_len: int) -> None:
        import h5netcdf  # only per-token capture writes through it directly

        self.layout, self.seq_len, self.n = layout, seq_len, 0
        S, N, H = layout.num_sites, layout.num_sources, layout.max_heads
        self.file = h5netcdf.File(path, "w")
        self.file.dimensions = {"sample": None, "position": seq_len, "site": S, "source": N, "head": H}
        self.weights = self.file.create_variable(
            "token_weights", ("sample", "position", "site", "source", "head"), "f4",
            chunks=(1, seq_len, S, N, H), fillvalue=np.float32(np.nan))
        self.weights.attrs["long_name"] = "per-token routing weight w_{s,h}(n | sample, position)"
        self.ids = self.file.create_variable("token_ids", ("sample", "position"), "i8", chunks=(64, seq_len),
                                          fillvalue=np.int64(-1))
        self.mask = self.file.create_variable("token_mask", ("sample", "position"), "i1", chunks=(64, seq_len),
                                           fillvalue=np.int8(0))

    def append(self, weights: list[Tensor], input_ids: Tensor, mask: Tensor) -> None:
        """weights[s] [n_s, B, T, h_s] for every site, input_ids / mask [B, T]."""
        B, T = input_ids.shape
        S, N, H = self.layout.num_sites, self.layout.num_sources, self.layout.max_heads
        block = torch.full((B, T, S, N, H), float("nan"), dtype=torch.float32)
        for s, w in enumerate(weights):
            n, _, _, h = w.shape
            block[:, :, s, :n, :h] = w.detach().float().permute(1, 2, 0, 3).cpu()
        lo = self.n
        self.file.resize_dimension("sample", lo + B)
        self.weights[lo:lo + B, :T] = block.numpy()
        self.ids[lo:lo + B, :T] = input_ids.cpu().numpy()
        self.mask[lo:lo + B, :T] = mask.cpu().numpy().astype(np.int8)
        self.n += B

    def close(self) -> None:
        self.file.close()
