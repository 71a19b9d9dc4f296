"""The forward's loop at two sources an iteration (`route_fwd_kernel`, SOURCES 2: `_fwd_step2`),
in the interpreter against float64: odd and even source counts, the appended row, the delta form,
partial position blocks, each logit form (fp32, a rounded fp16 key, autocast's fold over a 16-bit
buffer), and running maxima that grow on every row, on none after the first, or at random.
Outputs and weights are NaN-poisoned before the kernel writes them."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from mhar_probe.kernels.launch_tables import LaunchTables, load_tables  # noqa: E402
from mhar_probe.kernels.route import fwd as route_fwd  # noqa: E402
from mhar_probe.kernels.route.naive import route_reference_f64  # noqa: E402

from kernel_checks import DEV, EPS, rel, spy_launcher  # noqa: E402

LAYOUTS = ("fp32", "fp16", "mixed")  # buffer dtype / row 0 / output: fp32; fp16; fp32 row 0 over fp16


def sources(N: int, T: int, D: int, H: int, order: str, seed: int) -> tuple[torch.Tensor, ...]:
    """[N, T, D] rows whose per-head logits against q * w rise with the row (rising), fall after
    the first (falling) or take a random order, with noise per position; q, w."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(D, generator=g) * 0.5
    w = 1 + 0.3 * torch.randn(D, generator=g)
    step = {"rising": torch.arange(N), "falling": torch.arange(N).flip(0),
            "random": torch.randperm(N, generator=g)}[order].float()
    u = (q * w).view(H, -1)
    o = torch.randn(H, D // H, generator=g)
    o = o - (o * u).sum(-1, keepdim=True) / u.pow(2).sum(-1, keepdim=True) * u
    theta = torch.pi * (1 - step / max(N - 1, 1))  # [N]
    rows = torch.cos(theta)[:, None] * (u / u.norm()).reshape(D) + torch.sin(theta)[:, None] * (o / o.norm()).reshape(D)
    scale = 1 + torch.rand(N, 1, 1, generator=g)
    return (rows[:, None, :] + 0.3 * torch.randn(N, T, D, generator=g)) * scale, q, w


def launch(src, q, w, H, layout, tables, append=False, delta=False):
    """One forward launch over `src` [N, T, D] in `layout` under `tables`; (out, W, the float64
    truth's out and W). append: row N-1 is read from its own tensor and stored into the buffer."""
    N, T, D = src.shape
    buf = src.to(DEV, torch.float32 if layout == "fp32" else torch.float16)  # [N, T, D]
    v0 = src[0].to(DEV) if layout == "mixed" else buf[0]
    out_dtype = torch.float16 if layout == "fp16" else torch.float32
    g = torch.Generator().manual_seed(7)
    partial = torch.randn(T, D, generator=g).to(DEV, out_dtype) if delta else None
    gate = torch.tensor(0.7, device=DEV) if delta else None
    out = torch.full((T, D), float("nan"), dtype=out_dtype, device=DEV)
    W = torch.full((N, T, H), float("nan"), device=DEV)
    qq, ww = q.to(DEV), w.to(DEV)
    kw = dict(v0=v0, partial=partial, gate=gate, tables=tables)
    if append:  # the buffer's row N-1 is poisoned: the kernel must store it from x
        x = buf[N - 1].clone()
        buf = buf.clone()
        buf[N - 1] = float("nan")
        kw["append"] = (x, buf[N - 1])
    route_fwd.launch_route_fwd(buf, N, T, qq, ww, H, EPS, out, W, **kw)
    if append:
        assert torch.equal(buf[N - 1], x)
    truth = torch.cat([v0[None].float(), buf[1:].float()])[:, None]  # [N, 1, T, D]: the promoted rows
    ref_out, ref_W = route_reference_f64(truth, qq, ww, H, EPS, round_to=torch.float16 if layout == "fp16" else None,
                                         partial=None if partial is None else partial[None],
                                         gate=gate)
    return out, W, ref_out[0], ref_W[:, 0]


def rows_table(D: int, H: int, block_p: int, sources_: int) -> LaunchTables:
    return LaunchTables(fwd={(D, H, 0): (block_p, 1, 0, 2, sources_)})


@pytest.mark.parametrize("N", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("order", ["rising", "falling", "random"])
def test_two_sources_an_iteration_match_float64(monkeypatch, N, order):
    """Every source count from a lone row 0 to an even 8 (pairs, and the odd row left), with and
    without the appended row, each layout; the launch ran SOURCES 2 (the one-tile kernel)."""
    D, H, T = 16, 4, 5
    src, q, w = sources(N, T, D, H, order, seed=N)
    plans = spy_launcher(monkeypatch, route_fwd, "_FWD", lambda args, consts: consts["SOURCES"])
    for layout in LAYOUTS:
        for append in ((False, True) if N >= 2 else (False,)):
            out, W, ref_out, ref_W = launch(src, q, w, H, layout, rows_table(D, H, 2, 2), append=append)
            tol = 2e-3 if layout == "fp16" else 1e-6
            assert rel(W, ref_W) < tol * 10 and rel(out, ref_out) < tol, (layout, append)
    assert plans and set(plans) == {2}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_sources_delta_form_and_repeats(layout):
    """The delta form (partial + gate * routed) at two sources an iteration: float64's, bitwise
    the same on a second launch, and within rounding of one source an iteration."""
    D, H, T, N = 32, 4, 9, 6  # one tile: 8 columns a head; 9 positions in blocks of 4
    src, q, w = sources(N, T, D, H, "random", seed=3)
    one = launch(src, q, w, H, layout, rows_table(D, H, 4, 1), delta=True)
    two = launch(src, q, w, H, layout, rows_table(D, H, 4, 2), delta=True)
    again = launch(src, q, w, H, layout, rows_table(D, H, 4, 2), delta=True)
    tol = 2e-3 if layout == "fp16" else 1e-6
    assert rel(two[0], two[2]) < tol and rel(two[1], two[3]) < tol * 10
    assert torch.equal(two[0], again[0]) and torch.equal(two[1], again[1])
    assert rel(two[0], one[0]) < tol and rel(two[1], one[1]) < tol * 10


def test_two_tile_heads_take_one_source_an_iteration(monkeypatch):
    """A sources-2 row at a head width that splits (6 = 4 + 2) runs the two-tile kernel, which
    has no two-source loop, and is still float64's."""
    D, H, T, N = 12, 2, 3, 5
    src, q, w = sources(N, T, D, H, "random", seed=2)
    split = spy_launcher(monkeypatch, route_fwd, "_FWD_SPLIT", lambda args, consts: "SOURCES" in consts)
    out, W, ref_out, ref_W = launch(src, q, w, H, "fp32", rows_table(D, H, 1, 2))
    assert split == [False] and rel(out, ref_out) < 1e-6 and rel(W, ref_W) < 1e-5


@pytest.mark.slow
def test_two_sources_at_129_rows_and_32_heads():
    """Issue 55's odd shape for one-tile heads: 129 sources (64 pairs after row 0, none left), H = 32
    heads of 4 columns, autocast's layout, with the appended row."""
    D, H, T, N = 128, 32, 3, 129
    src, q, w = sources(N, T, D, H, "random", seed=9)
    out, W, ref_out, ref_W = launch(src, q, w, H, "mixed", rows_table(D, H, 1, 2), append=True)
    assert rel(W, ref_W) < 1e-5 and rel(out, ref_out) < 1e-6


def test_forward_rows_without_sources_still_load(tmp_path):
    """Tables written before the column (7 integers a forward row) load as one source an
    iteration; a row naming 3 sources, or 1 stage, is refused with the file's name."""
    old = tmp_path / "old.json"
    old.write_text('{"fwd": [[16, 4, 0, 1, 2, 0, 3]]}')
    assert load_tables(old).fwd_config(16, 4) == (4, 1, 2, None, 3, 1)
    new = tmp_path / "new.json"
    new.write_text('{"fwd": [[16, 4, 0, 1, 2, 0, 3, 2]]}')
    assert load_tables(new).fwd_config(16, 4) == (4, 1, 2, None, 3, 2)
    from mhar_probe.errors import UserError
    for body in ('{"fwd": [[16, 4, 0, 1, 2, 0, 3, 3]]}', '{"fwd": [[16, 4, 0, 1, 2, 0, 1, 2]]}'):
        bad = tmp_path / "bad.json"
        bad.write_text(body)
        with pytest.raises(UserError, match="bad.json.*sources"):
            load_tables(bad)
