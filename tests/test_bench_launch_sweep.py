"""benchmarks/kernels/launch_sweep.py: the candidate rows, the choice, and one sweep on the interpreter."""

from __future__ import annotations

import json

import pytest

from script_checks import load_script
from kernel_checks import spy_launcher


def _load():
    return load_script("benchmarks/kernels/launch_sweep.py")


def test_candidates_start_at_the_builtin_row_without_repeats_and_refuse_short_rows():
    ls = _load()
    rows = ls.candidates("gather", (1, 2, 0, 0, 1), None)
    assert rows[0] == (1, 2, 0, 0, 1) and len(rows) == len(set(rows))
    assert set(rows) == {(1, 2, 0, 0, 1), *ls.GATHER_ORDER}
    first = sum(1 for r in rows if r[4])
    assert all(r[4] == 1 for r in rows[:first])  # loads-first rows first
    assert ls.candidates("fwd", (1, 1, 0, 3), "[[1, 1, 0, 3], [2, 1, 0, 4]]") == [(1, 1, 0, 3), (2, 1, 0, 4)]
    with pytest.raises(SystemExit, match="expected"):
        ls.candidates("gather", (1, 1, 0, 0, 1), "[[1, 1, 0]]")


def test_builtin_row_is_the_launch_tables_row():
    """At 1B-train (d 1280, H 8, fp32 douts) the built-in gather row is (1, 2, 0, 0, 1) and the
    forward's (1, 1, 0, 3) (mhar_probe/kernels/launch_tables.json)."""
    ls = _load()
    assert ls.builtin_row("gather", 1280, 8, 4) == (1, 2, 0, 0, 1)
    assert ls.builtin_row("fwd", 1280, 8, 4) == (1, 1, 0, 3)
    assert ls.table_key("gather", 1280, 8, 4) == (1280, 8, 8, 4) and ls.table_key("fwd", 512, 8, 2) == (512, 8, 2)


def test_builtin_row_is_the_cards_row():
    """On the H200 and the H100 the sweep starts from the card's own rows (launch_tables.json's `devices`:
    fold rows on both, gather and forward rows on the H200), elsewhere from the default rows (the fold
    from the gather's row with one source per iteration)."""
    ls = _load()
    assert ls.builtin_row("fold", 1280, 8, 4, "NVIDIA H200") == (1, 2, 1, 0, 1, 2)
    assert ls.builtin_row("fold", 1280, 8, 4, "NVIDIA H100 80GB HBM3") == (1, 8, 1, 0, 0, 0)  # the held kernel
    assert ls.builtin_row("fold", 1280, 8, 4) == ls.builtin_row("fold", 1280, 8, 4, "NVIDIA A100-SXM4-80GB") \
        == (1, 2, 0, 0, 1, 1)
    assert ls.builtin_row("gather", 1280, 8, 4, "NVIDIA H200") == (1, 1, 0, 0, 0)  # the H200's own row
    assert ls.builtin_row("gather", 1280, 8, 4, "NVIDIA H100 80GB HBM3") == (1, 2, 0, 0, 1)  # the default row
    assert ls.builtin_row("fwd", 1024, 8, 4, "NVIDIA H200") == (2, 1, 0, 3)


def test_choose_takes_the_fastest_row_with_the_reference_gradients():
    ls = _load()
    rows = [dict(cfg=[1], judged_ms=3.0, grad_rel_err=0.0), dict(cfg=[2], judged_ms=1.0, grad_rel_err=0.5),
            dict(cfg=[3], judged_ms=2.0, grad_rel_err=1e-3)]
    assert ls.choose(rows, 2e-2)["cfg"] == [3]  # the 1.0 ms row gives wrong gradients
    assert ls.choose(rows[1:2], 2e-2) is None
    assert ls.parse_shape("1B-train") == (1280, 36, 2, 1024) and ls.parse_shape("16x1x1x4") == (16, 1, 1, 4)
    with pytest.raises(SystemExit, match="DxLxBxT"):
        ls.parse_shape("big")


@pytest.mark.slow
def test_sweep_on_the_interpreter_writes_a_launch_table_the_kernels_take(tmp_path):
    """A tiny chain (d 16, 3 calls, 4 positions, H 2) on the CPU interpreter: the probes run, each
    kind tries the built-in row and the given one, the chosen rows are the fastest with the
    reference gradients, and the table file loads and drives the kernels to the same gradients."""
    import torch

    from mhar_probe.kernels import KernelConfig
    from mhar_probe.kernels.launch_tables import load_tables

    ls = _load()
    out, table = tmp_path / "sweep.json", tmp_path / "table.json"
    ls.main(["--device", "cpu", "--shapes", "16x1x1x4", "--heads", "2", "--repeat", "1", "--dtype", "float32",
             "--rows-gather", "[[2, 1, 1, 0, 0]]", "--rows-fwd", "[[2, 1, 0, 3]]", "--out", str(out),
             "--table-out", str(table)])
    doc = json.loads(out.read_text())
    assert doc["meta"]["dtype"] == "float32" and doc["meta"]["copy_gbps"] is None
    assert doc["meta"]["provenance"]["hardware"]["device"].startswith("cpu")
    what = [r["what"] for r in doc["rows"]]
    assert what == ["probe:fold", "probe:fold-storage-douts", "probe:gather-backward", *["sweep:gather"] * 2,
                    *["sweep:fwd"] * 2]
    probes = {r["what"]: r for r in doc["rows"] if r["what"].startswith("probe")}
    assert probes["probe:fold"]["grad_rel_err"] == 0.0  # the reference itself
    assert probes["probe:gather-backward"]["grad_rel_err"] < 1e-5  # fp32: the same sums in another order
    tables = load_tables(table)
    for kind, key in (("gather", (16, 2, 2, 4)), ("fwd", (16, 2, 4))):
        tried = [r for r in doc["rows"] if r["what"] == f"sweep:{kind}"]
        assert all(r["grad_rel_err"] < 1e-5 for r in tried)
        assert list(getattr(tables, kind)[key]) == min(tried, key=lambda r: r["judged_ms"])["cfg"]
    runner = ls.Runner((16, 1, 1, 4), 2, "float32", "cpu", 1)
    ref = runner.grads()
    runner.backend = ls.get_backend("triton", KernelConfig(launch_table=str(table)))
    got = runner.grads()
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, ref))


def test_fold_candidates_start_at_the_builtin_row_then_its_two_source_and_prefetch_variants():
    """The fold kind's built-in row is the gather's with one source per iteration (no fold rows
    in the built-in table); its candidates try two sources and prefetch 2 on that row first."""
    ls = _load()
    assert ls.builtin_row("fold", 1280, 8, 4) == (*ls.builtin_row("gather", 1280, 8, 4), 1)
    assert ls.table_key("fold", 1280, 8, 4) == (1280, 8, 8, 4)
    rows = ls.candidates("fold", (1, 2, 0, 0, 1, 1), None)
    assert rows[:4] == [(1, 2, 0, 0, 1, 1), (1, 2, 0, 0, 1, 2), (1, 2, 2, 0, 1, 1), (1, 2, 2, 0, 1, 2)]
    assert len(rows) == len(set(rows)) and set(ls.FOLD_ORDER) <= set(rows)
    one_warp = ls.candidates("fold", (1, 1, 0, 0, 1, 1), None)  # two sources at two warps second (no spill)
    assert one_warp[:4] == [(1, 1, 0, 0, 1, 1), (1, 1, 0, 0, 1, 2), (1, 2, 0, 0, 1, 2), (1, 1, 2, 0, 1, 1)]
    assert all(r[5] in (1, 2) and r[2] in (0, 1, 2) for r in rows)
    with pytest.raises(SystemExit, match="sources"):
        ls.candidates("fold", (1, 2, 0, 0, 1, 1), "[[1, 2, 0, 0, 1]]")


def test_summary_sets_the_tuned_fold_against_today_and_the_gather_backward(capsys):
    """The closing table sums stack_gather + stack_fold per run, takes the fastest fold row whose
    gradients match, and prints one TABLE line per shape."""
    ls = _load()

    def row(what, gather, fold, cfg=None, err=0.0, shape="1B-train"):
        k = {"stack_gather_kernel": gather, "route_fwd_kernel": 9.0}
        if fold is not None:
            k["stack_fold_kernel"] = fold
        return dict(shape=shape, what=what, cfg=cfg, kernels_ms=k, grad_rel_err=err,
                    judged_ms=ls.judged("fold", k) if what.startswith("sweep") else 0.0)

    rows = [row("probe:fold", 2.0, 9.0), row("probe:gather-backward", 12.0, None),
            row("sweep:fold", 2.0, 9.0, [1, 2, 0, 0, 1, 1]), row("sweep:fold", 2.0, 5.0, [1, 2, 0, 0, 1, 2]),
            row("sweep:fold", 2.0, 1.0, [1, 1, 2, 0, 1, 2], err=0.5), row("probe:fold", 1.0, 1.0, shape="100M-train")]
    table = ls.summary(rows, 2e-2)
    assert [t["shape"] for t in table] == ["1B-train", "100M-train"]
    t = table[0]
    assert (t["gather_backward_ms"], t["fold_today_ms"], t["fold_tuned_ms"]) == (12.0, 11.0, 7.0)
    assert t["fold_row"] == [1, 2, 0, 0, 1, 2] and t["fold_rows_tried"] == 3  # the 1.0 ms row is wrong
    assert t["fold_tuned_over_fold_today"] == pytest.approx(7 / 11) and t["fold_kernel_tuned_ms"] == 5.0
    assert table[1]["fold_tuned_ms"] is None and table[1]["gather_backward_ms"] is None
    ls.print_summary(table, True)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("TABLE")]
    assert len(lines) == 4 and "[1, 2, 0, 0, 1, 2] (3)" in lines[2] and "0.636" in lines[2]


@pytest.mark.slow
def test_fold_sweep_on_the_interpreter_writes_fold_rows_the_kernels_take(tmp_path, monkeypatch, capsys):
    """The device call's sweep at a tiny chain (d 16, 3 calls, blocks of 2 so a fold happens):
    the two probes, the fold kind's built-in row and the given two-source row, the fastest with the
    reference gradients written as a fold row, and that row drives the fold kernel (SOURCES 2)."""
    import torch

    import mhar_probe.kernels.route.autograd as kad
    from mhar_probe.kernels import KernelConfig
    from mhar_probe.kernels.launch_tables import load_tables

    ls = _load()
    out, table = tmp_path / "sweep.json", tmp_path / "table.json"
    ls.main(["--device", "cpu", "--shapes", "16x1x1x4", "--heads", "2", "--repeat", "1", "--dtype", "float32",
             "--kinds", "fold", "--probes", "fold,gather-backward", "--fold-calls", "2", "--deadline-s", "1e6",
             "--rows-fold", "[[2, 1, 2, 0, 0, 2]]", "--out", str(out), "--table-out", str(table)])
    doc = json.loads(out.read_text())
    assert [r["what"] for r in doc["rows"]] == ["probe:fold", "probe:gather-backward", "sweep:fold", "sweep:fold"]
    assert all(r["config"]["fold_calls"] == 2 and r["grad_rel_err"] < 1e-5 for r in doc["rows"])
    tried = doc["rows"][2:]
    assert tried[0]["cfg"] == list(ls.builtin_row("fold", 16, 2, 4)) and tried[1]["cfg"] == [2, 1, 2, 0, 0, 2]
    assert list(load_tables(table).fold[(16, 2, 2, 4)]) == min(tried, key=lambda r: r["judged_ms"])["cfg"]
    assert doc["summary"][0]["fold_rows_tried"] == 2
    assert sum(x.startswith("TABLE") for x in capsys.readouterr().out.splitlines()) == 3
    (tmp_path / "two.json").write_text(json.dumps({"fold": [[16, 2, 2, 4, 2, 1, 2, 0, 0, 2]]}))
    seen = spy_launcher(monkeypatch, kad, "STACK_FOLD", lambda args, consts: consts["SOURCES"])
    runner = ls.Runner((16, 1, 1, 4), 2, "float32", "cpu", 1)
    runner.backend = ls.get_backend("triton", KernelConfig(fold_calls=2))
    ref = runner.grads()
    runner.backend = ls.get_backend("triton", KernelConfig(fold_calls=2, launch_table=str(tmp_path / "two.json")))
    got = runner.grads()
    assert seen == [1, 2]
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, ref))


def test_pair_e_sweep_on_the_interpreter_writes_pair_e_rows_the_kernels_take(tmp_path, monkeypatch):
    """pair_e as a sweep kind: its built-in row (the heuristic's) then the given one, judged (on a
    GPU) by pair_e_kernel alone, the fastest with the reference gradients written as a pair_e row, and
    that row sets pair_e's readers per program (its work items' step) and column blocks per program
    in the kernels."""
    import torch

    import mhar_probe.kernels.route.bwd_collect as rbc
    from mhar_probe.kernels import KernelConfig
    from mhar_probe.kernels.launch_tables import load_tables

    ls = _load()
    assert ls.builtin_row("pair_e", 16, 2, 4) == (16, 16, 4, 1)
    out, table = tmp_path / "sweep.json", tmp_path / "table.json"
    ls.main(["--device", "cpu", "--shapes", "16x1x1x4", "--heads", "2", "--repeat", "1", "--dtype", "mixed",
             "--kinds", "pair_e", "--no-probes", "--rows-pair-e", "[[2, 2, 1, 2]]", "--out", str(out),
             "--table-out", str(table)])
    doc = json.loads(out.read_text())
    tried = [r for r in doc["rows"] if r["what"] == "sweep:pair_e"]
    assert [r["cfg"] for r in tried] == [[16, 16, 4, 1], [2, 2, 1, 2]]
    assert all(r["grad_rel_err"] < 1e-5 for r in tried)  # (the CPU judges by the chain's wall time)
    assert ls.judged("pair_e", {"pair_e_kernel": 1.5, "stack_fold_kernel": 9.0}) == 1.5
    assert list(load_tables(table).pair_e[(16, 2)]) == min(tried, key=lambda r: r["judged_ms"])["cfg"]
    (tmp_path / "two.json").write_text(json.dumps({"pair_e": [[16, 2, 2, 2, 1, 2]]}))
    seen = spy_launcher(monkeypatch, rbc, "PAIR_E", lambda args, consts: (consts["BLOCK_C"], consts["HB"]))
    runner = ls.Runner((16, 1, 1, 4), 2, "mixed", "cpu", 1)
    ref = runner.grads()
    runner.backend = ls.get_backend("triton", KernelConfig(launch_table=str(tmp_path / "two.json")))
    got = runner.grads()
    half = len(seen) // 2
    assert seen[:half] == [(16, 1)] * half and seen[half:] == [(2, 2)] * half
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, ref))


def test_a_swept_row_that_raises_is_kept_with_its_error_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """A candidate row the card cannot run (here a pair_e row whose run raises, as Triton's
    OutOfResources does on a GPU) becomes a `failed:pair_e` row with its error, never chosen; the
    rows after it are still tried; the built-in row raising stops the sweep with its error."""
    ls = _load()
    real = ls.Runner.run

    def run(self, config):
        if config.get("launch_table", "").endswith("_pair_e_1.json"):  # the second candidate's trial table
            raise RuntimeError("out of resources: shared memory, Required: 300000, Hardware limit: 232448")
        return real(self, config)

    monkeypatch.setattr(ls.Runner, "run", run)
    out, table = tmp_path / "sweep.json", tmp_path / "table.json"
    ls.main(["--device", "cpu", "--shapes", "16x1x1x4", "--heads", "2", "--repeat", "1", "--dtype", "mixed",
             "--kinds", "pair_e", "--no-probes", "--rows-pair-e", "[[4, 4, 1, 1], [2, 2, 1, 2]]", "--out", str(out),
             "--table-out", str(table)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["what"], r["cfg"]) for r in rows] == [("sweep:pair_e", [16, 16, 4, 1]), ("failed:pair_e", [4, 4, 1, 1]),
                                                     ("sweep:pair_e", [2, 2, 1, 2])]
    assert rows[1]["error"].startswith("RuntimeError: out of resources: shared memory") and "judged_ms" not in rows[1]
    assert ls.choose([r for r in rows if r["what"] == "sweep:pair_e"], 0.02)["cfg"] in ([16, 16, 4, 1], [2, 2, 1, 2])
    monkeypatch.setattr(ls.Runner, "run", lambda self, config: (_ for _ in ()).throw(RuntimeError("no card")))
    with pytest.raises(RuntimeError, match="no card"):
        ls.main(["--device", "cpu", "--shapes", "16x1x1x4", "--heads", "2", "--repeat", "1", "--dtype", "mixed",
                 "--kinds", "pair_e", "--no-probes", "--out", str(out), "--table-out", str(table)])
