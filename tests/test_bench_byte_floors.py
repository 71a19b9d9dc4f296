"""benchmarks/kernels/byte_floors.py (the routing's floors against a profiled step) and
benchmarks/kernels/pair_e_dot.py's plans and its refusal without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mhar_probe.kernels.route.bwd_fold import model_layout
from mhar_probe.kernels.route.floors import built_bytes, four_byte_floor, stack_floor
from mhar_probe.model.config import PRESETS
from script_checks import load_script

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "benchmarks/train_throughput/h100_step_1b.json"


def test_floors_are_the_floors_modules_bytes_over_the_bandwidth():
    bf = load_script("benchmarks/kernels/byte_floors.py")
    fl = bf.floors("350m", 4, 1024, 8, 8, 2000.0)
    layout, heads, P = model_layout(49), [8] * 49, 4096
    assert fl.f4 == pytest.approx(four_byte_floor(layout, 1024, P) / 2000e6)
    assert fl.stack == pytest.approx(stack_floor(layout, 1024, heads, P) / 2000e6)
    built = built_bytes(layout, 1024, heads, P, 8, 16)
    assert fl.built_total == pytest.approx(built.total / 2000e6)
    assert set(fl.built) == {"fwd", "bwd", "pair_e"}
    for group in fl.built:
        assert fl.built[group] == pytest.approx(getattr(built, group) / 2000e6)


def test_step_rows_count_the_stored_norms_of_records_that_ran_them():
    """A record that carries `routing_stored_norms` (train_throughput.py since the stored row norms)
    gets the forward's bytes with each row's 4-byte r (read per row from the buffer, written per
    appended row and for row 0 once); one without it (every record before) the bytes without."""
    bf = load_script("benchmarks/kernels/byte_floors.py")
    doc = json.loads(STEP.read_text())
    (old,) = bf.step_rows(doc, 2933.0)
    for r in doc["results"]:
        r["routing_stored_norms"] = True
    (new,) = bf.step_rows(doc, 2933.0)
    mhar = next(r for r in doc["results"] if r["method"] == "mhar")
    assert "routing_forward" not in mhar  # a record of the plain forward: every call reads all its rows
    calls, P = 2 * PRESETS["1b"]["num_hidden_layers"] + 1, mhar["batch"] * mhar["seq"]
    # calls 2.. read n - 2 rows from the buffer, calls 1.. write the appended row's r, call 0 row 0's
    r_bytes = 4 * P * (sum(n - 2 for n in range(3, calls + 1)) + (calls - 1) + 1)
    assert new["groups"]["fwd"]["built_ms"] - old["groups"]["fwd"]["built_ms"] == pytest.approx(r_bytes / 2933e6)
    assert new["groups"]["bwd"]["built_ms"] == old["groups"]["bwd"]["built_ms"]


def test_step_rows_read_the_profiled_routing_kernels():
    """The committed 1B step record: one MHAR row, its routing category and per-group kernel times
    from the profile, each group's share of copy bandwidth = its built ms / its measured ms."""
    bf = load_script("benchmarks/kernels/byte_floors.py")
    doc = json.loads(STEP.read_text())
    (row,) = bf.step_rows(doc, 2933.0)
    mhar = next(r for r in doc["results"] if r["method"] == "mhar")
    assert row["routing_ms"] == mhar["profile"]["categories_ms"]["routing"]
    groups = row["groups"]
    assert 0 < sum(g["ms"] for g in groups.values()) <= row["routing_ms"] * 1.001
    for g in groups.values():
        assert g["of_copy"] == pytest.approx(g["built_ms"] / g["ms"])
    assert row["routing_x_f4"] == pytest.approx(row["routing_ms"] / row["f4_ms"])
    assert row["routing_x_stack"] == pytest.approx(row["routing_ms"] / row["stack_ms"])
    assert row["target_x_built"] == pytest.approx(1.3 * row["f4_ms"] / row["built_ms"])


def test_the_held_kernel_counts_as_the_backward():
    """The H100 step with the held fold kernel (h100_step_held_1b.json): its fold is in the `bwd` group."""
    bf = load_script("benchmarks/kernels/byte_floors.py")
    doc = json.loads((ROOT / "benchmarks/train_throughput/h100_step_held_1b.json").read_text())
    (row,) = bf.step_rows(doc, 2933.0)
    mhar = next(r for r in doc["results"] if r["method"] == "mhar")
    held = sum(ms for ms, _, name in mhar["profile"]["top_kernels"] if name == "stack_fold_held_kernel")
    gather = sum(ms for ms, _, name in mhar["profile"]["top_kernels"] if name == "stack_gather_kernel")
    assert held > 0 and row["groups"]["bwd"]["ms"] == pytest.approx(held + gather)


def test_byte_floors_refuses_bad_input_in_one_line(tmp_path, capsys):
    bf = load_script("benchmarks/kernels/byte_floors.py")
    with pytest.raises(SystemExit, match="positive"):
        bf.main(["--copy-gbps", "0"])
    with pytest.raises(SystemExit, match="--issue55 sets the target against profiled steps"):
        bf.main(["--copy-gbps", "2933", "--issue55"])
    with pytest.raises(SystemExit, match="--time-table renders profiled steps"):
        bf.main(["--copy-gbps", "2933", "--time-table"])
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="bad.json: not a train_throughput.py result"):
        bf.main(["--copy-gbps", "2933", str(bad)])
    out = tmp_path / "rows.json"
    bf.main(["--copy-gbps", "2933", str(STEP), "--out", str(out)])
    assert [r["preset"] for r in json.loads(out.read_text())] == ["1b"]
    assert "1b" in capsys.readouterr().out
    bf.main(["--copy-gbps", "2933", str(STEP), "--issue55"])
    assert "| 1B |" in capsys.readouterr().out.split("share of copy now |")[1]
    bf.main(["--copy-gbps", "2933", str(STEP), "--time-table"])
    assert "| 1B (" in capsys.readouterr().out.split("x the built bytes at copy speed |")[1]


def test_pair_e_dot_plans_and_its_refusal_without_a_gpu(monkeypatch):
    """Its IEEE plan turns the split dot off where the default takes it (unrounded keys over 16-bit
    rows); on a machine without CUDA it stops with one line."""
    import torch

    pd = load_script("benchmarks/kernels/pair_e_dot.py")
    args = (512, 8, frozenset({0}), True)
    split = pd.PLANS["split"](*args, narrow_rows=True)[1]
    ieee = pd.PLANS["ieee"](*args, narrow_rows=True)[1]
    assert split["SPLIT_DOT"] and split["R_IN_DL"]
    assert not ieee["SPLIT_DOT"] and not ieee["R_IN_DL"]
    assert {k: v for k, v in ieee.items() if k not in ("SPLIT_DOT", "R_IN_DL")} == \
        {k: v for k, v in split.items() if k not in ("SPLIT_DOT", "R_IN_DL")}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no GPU"):
        pd.main([])


def test_the_douts_timing_table_is_the_committed_record():
    """benchmarks/kernels/results.md's in-place douts table holds the H200 record's graph and kernel ms."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "benchmarks" / "kernels" / "results.md").read_text()
    block = text.split("<!-- douts:begin -->\n", 1)[1].split("<!-- douts:end -->", 1)[0]
    record = json.loads((root / "benchmarks" / "kernels" / "h200_douts_cb1162d.json").read_text())
    rows = {(r["shape"], r["backend"]): r for r in record["rows"]}
    shapes = [m.group(1) for m in re.finditer(r"^\| (\S+-train) \|", block, flags=re.M)]
    assert shapes == ["100M-train", "350M-train", "1B-train"]
    for shape in shapes:
        a, b = rows[(shape, "triton")], rows[(shape, "triton-douts-in-place")]
        k = lambda r, n: r["kernels_ms"][n]  # noqa: E731
        line = (f"| {shape} | {a['graph_fwdbwd_ms']:.3f} | {b['graph_fwdbwd_ms']:.3f} | "
                f"{b['graph_fwdbwd_ms'] / a['graph_fwdbwd_ms']:.2f} | "
                f"{k(a, 'stack_gather_kernel'):.3f} / {k(b, 'stack_gather_kernel'):.3f} | "
                f"{k(a, 'stack_fold_kernel'):.3f} / {k(b, 'stack_fold_kernel'):.3f} |")
        assert line in block, line
    # the text under the table reads its ratios and the fold's times from the same record
    ms = lambda shape, backend, kernel: rows[(shape, backend)]["kernels_ms"][kernel]  # noqa: E731
    graph = {s: rows[(s, "triton-douts-in-place")]["graph_fwdbwd_ms"] / rows[(s, "triton")]["graph_fwdbwd_ms"]
             for s in shapes}
    said = " ".join(text.split("<!-- douts:end -->", 1)[1].split("\n\n", 2)[1].split())
    gather, fold = (ms("100M-train", "triton-douts-in-place", k) / ms("100M-train", "triton", k)
                    for k in ("stack_gather_kernel", "stack_fold_kernel"))
    saved = sorted(round(100 * (1 - graph[s])) for s in ("350M-train", "1B-train"))
    folds_1b = sorted(ms("1B-train", b, "stack_fold_kernel") for b in ("triton", "triton-douts-in-place"))
    for phrase in (f"saves {saved[0]}-{saved[1]}% of the routing", f"costs {round(100 * (graph['100M-train'] - 1))}%",
                   f"the gather {gather:.2f}x, the fold {fold:.2f}x",
                   f"({ms('350M-train', 'triton', 'stack_fold_kernel'):.1f} and {folds_1b[0]:.1f}-{folds_1b[1]:.1f} ms"):
        assert phrase in said, phrase


def test_issue55_table_is_the_held_steps_against_their_floors():
    """kernels/results.md's table of what issue 55's 1.35x of the stack floor asks: byte_floors'
    rows of the held kernel's profiled H100 steps, the target over the built floor equal to
    1.35 x stack / built, and the prose's shares of copy (asked and now) the table's."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks" / "kernels"))
    import byte_floors as bfm

    rows = [r for p in ("100m", "350m", "1b")
            for r in bfm.step_rows(json.loads((ROOT / "benchmarks" / "train_throughput" / f"h100_step_held_{p}.json")
                                              .read_text()), 2933.0)]
    assert [r["preset"] for r in rows] == ["100m", "350m", "1b"]
    for r in rows:
        assert r["target55_x_built"] == pytest.approx(1.35 * r["stack_ms"] / r["built_ms"])
    page = (ROOT / "benchmarks" / "kernels" / "results.md").read_text()
    assert bfm.issue55_table(rows) in page
    text = " ".join(page.replace("**", "").split())
    small, mid, big = rows
    assert small["target55_x_built"] < 1 and mid["target55_x_built"] > 1 and big["target55_x_built"] > 1
    assert (f"below what the kernels' own bytes take at copy speed ({small['target55_x_built']:.2f})") in text
    assert f"The kernels there already average {small['built_ms'] / small['routing_ms']:.0%} of copy" in text
    assert (f"average {1 / mid['target55_x_built']:.0%} / {1 / big['target55_x_built']:.0%} of copy over their bytes, "
            f"against {mid['built_ms'] / mid['routing_ms']:.0%} / {big['built_ms'] / big['routing_ms']:.0%} in the step") in text
    of_copy = {r["preset"]: {g: v["of_copy"] for g, v in r["groups"].items()} for r in rows}
    assert (f"the backward ({of_copy['350m']['bwd']:.0%} / {of_copy['1b']['bwd']:.0%}) and, at 350M, the forward "
            f"({of_copy['350m']['fwd']:.0%})") in text
