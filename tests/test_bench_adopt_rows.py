"""benchmarks/kernels/adopt_rows.py: which swept rows become a card's built-in rows, and the file it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mhar_probe.kernels.launch_tables import BUILTIN, KINDS, load_tables

from script_checks import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"


def _load():
    return load_script("benchmarks/kernels/adopt_rows.py")


def _sweep(rows, device="NVIDIA H200", dtype="mixed", tol=0.02):
    """A launch_sweep.py --out document: meta, then (shape, kind, cfg, ms, err) rows."""
    return dict(meta=dict(device=device, dtype=dtype, heads=8, tol=tol),
                rows=[dict(shape="1B-train", what="probe:fold", kind=None, cfg=None, judged_ms=1.0, grad_rel_err=0.0)]
                + [dict(shape=s, what=f"sweep:{k}", kind=k, cfg=list(c), judged_ms=ms, grad_rel_err=err)
                   for s, k, c, ms, err in rows])


def test_layout_of_the_builtin_table_is_kept_byte_for_byte():
    ar = _load()
    text = BUILTIN.read_text()
    assert ar.format_table(json.loads(text)) == text


def test_only_rows_beating_the_cards_row_by_the_margin_are_adopted():
    ar = _load()
    sweep = _sweep([
        ("1B-train", "gather", (1, 2, 0, 0, 1), 10.0, 0.0),   # the card's row (tried first)
        ("1B-train", "gather", (1, 1, 0, 0, 1), 9.85, 0.0),   # 1.5% faster: inside the margin
        ("1B-train", "fwd", (1, 1, 0, 3), 6.0, 0.0),
        ("1B-train", "fwd", (1, 1, 0, 4), 5.0, 0.5),          # fastest, but its gradients failed
        ("1B-train", "fwd", (1, 2, 0, 3), 5.7, 0.0),          # 5% faster: adopted
        ("100M-train", "gather", (1, 1, 0, 0, 1), 4.0, 0.0),  # nothing beats it
        ("100M-train", "gather", (1, 2, 0, 0, 1), 4.2, 0.0),
    ])
    got = {(d["shape"], d["kind"]): d for d in ar.decisions(sweep, margin=0.02)}
    assert not got["1B-train", "gather"]["adopt"] and got["1B-train", "gather"]["best"] == [1, 1, 0, 0, 1]
    assert got["1B-train", "fwd"]["adopt"] and got["1B-train", "fwd"]["best"] == [1, 2, 0, 3]
    assert got["1B-train", "fwd"]["key"] == [1280, 8, 4]   # d, H, bytes (fp32 outputs under autocast)
    assert got["1B-train", "gather"]["key"] == [1280, 8, 8, 4]
    assert not got["100M-train", "gather"]["adopt"]
    assert ar.decisions(sweep, margin=0.01)[0]["adopt"]  # 1.5% passes a 1% margin


def test_the_committed_h100_sweep_keeps_its_1b_row_at_the_default_margin():
    """The 8df3f8c sweep found a 1.9% faster 1B-train gather row: not enough to change a default."""
    ar = _load()
    sweep = json.loads((ROOT / "benchmarks/kernels/h100_launch_sweep_8df3f8c.json").read_text())
    assert not any(d["adopt"] for d in ar.decisions(sweep, 0.02))
    assert [d["shape"] for d in ar.decisions(sweep, 0.01) if d["adopt"]] == ["1B-train"]


def test_adopted_rows_go_under_the_card_only(tmp_path):
    ar = _load()
    table = tmp_path / "launch_tables.json"
    table.write_text(BUILTIN.read_text())
    before = load_tables(table)
    sweep = _sweep([("1B-train", "fold", (1, 2, 1, 0, 1, 2), 10.0, 0.0),
                    ("1B-train", "fold", (1, 1, 2, 0, 1, 2), 9.0, 0.0),   # replaces the card's row in place
                    ("350M-train", "gather", (1, 1, 0, 0, 1), 8.0, 0.0),
                    ("350M-train", "gather", (1, 2, 1, 0, 1), 7.0, 0.0)])  # a new row for the card
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    ar.main([str(path), "--table", str(table)])
    after = load_tables(table)
    h200, h100 = after.for_device("NVIDIA H200"), after.for_device(H100)
    assert h200.fold[(1280, 8, 8, 4)] == (1, 1, 2, 0, 1, 2)
    assert h200.gather[(1024, 8, 8, 4)] == (1, 2, 1, 0, 1)
    assert h100.gather == before.for_device(H100).gather and h100.fold == before.for_device(H100).fold
    assert after.for_device(None).gather == before.for_device(None).gather  # the default rows: untouched
    old = json.loads(BUILTIN.read_text())["devices"]["NVIDIA H200"]["fold"]
    new = json.loads(table.read_text())["devices"]["NVIDIA H200"]
    assert [r[:4] for r in new["fold"]] == [r[:4] for r in old]  # same rows, same order
    assert list(new) == [k for k in KINDS if k in new] and "gather" in new  # kinds in KINDS' order


def test_a_sweep_with_no_winner_leaves_the_file_alone(tmp_path, capsys):
    ar = _load()
    table = tmp_path / "t.json"
    table.write_text(BUILTIN.read_text())
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_sweep([("1B-train", "gather", (1, 2, 0, 0, 1), 10.0, 0.0)])))
    ar.main([str(path), "--table", str(table)])
    assert table.read_text() == BUILTIN.read_text()
    assert "keep" in capsys.readouterr().out


def test_a_cpu_sweep_is_refused(tmp_path):
    ar = _load()
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_sweep([], device="cpu (Triton interpreter)")))
    with pytest.raises(SystemExit, match="only a card's rows"):
        ar.main([str(path), "--dry-run"])


@pytest.mark.parametrize("text, why", [(None, "cannot read"), ("not json", "cannot read"),
                                       ("{}", "not a launch_sweep.py --out record"),
                                       ('{"meta": {"device": "X"}, "rows": []}', "not a launch_sweep.py --out record")])
def test_a_file_that_is_no_sweep_record_gets_one_line(tmp_path, text, why):
    ar = _load()
    path = tmp_path / "sweep.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit, match=why) as err:
        ar.main([str(path), "--dry-run"])
    assert "\n" not in str(err.value.code)


def _winning_sweep_and_table(tmp_path, table_text: str):
    """(a sweep record whose 1B-train gather row wins by 20%, a table file holding table_text)."""
    table = tmp_path / "t.json"
    table.write_text(table_text)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(_sweep([("1B-train", "gather", (1, 2, 0, 0, 1), 10.0, 0.0),
                                       ("1B-train", "gather", (1, 1, 0, 0, 1), 8.0, 0.0)])))
    return path, table


def test_a_bad_table_is_refused_before_anything_is_written(tmp_path):
    ar = _load()
    path, table = _winning_sweep_and_table(tmp_path, '{"fold": [[1, 2]]}')
    with pytest.raises(SystemExit, match="t.json"):
        ar.main([str(path), "--table", str(table)])
    assert table.read_text() == '{"fold": [[1, 2]]}'


def test_copy_card_runs_one_cards_rows_on_another():
    """device_run.sh cardtests: the H100's rows laid over the H200's entry make the H200 look up
    the H100's rows; the same card is a no-op; a card with no rows is refused with the names."""
    ar = _load()
    doc = json.loads(BUILTIN.read_text())
    copied = ar.copy_card(doc, H100, "NVIDIA H200")
    assert copied["devices"]["NVIDIA H200"] == doc["devices"][H100] == copied["devices"][H100]
    assert doc["devices"]["NVIDIA H200"] != doc["devices"][H100]  # the input is not changed
    assert ar.copy_card(doc, H100, H100) == doc
    with pytest.raises(SystemExit, match="NVIDIA A100.*" + H100):
        ar.copy_card(doc, "NVIDIA A100-SXM4-80GB", H100)


def test_a_table_without_schema_or_columns_takes_the_rows(tmp_path):
    """A hand-written table (rows only, as `--launch-table` files may be) gets the card's rows and
    keeps to what it had; a margin outside [0, 1) is refused."""
    ar = _load()
    path, table = _winning_sweep_and_table(tmp_path, '{"fold": [[512, 8, 8, 4, 1, 1, 2, 0, 0, 2]]}')
    ar.main([str(path), "--table", str(table)])
    doc = json.loads(table.read_text())
    assert set(doc) == {"fold", "devices"} and doc["devices"] == {"NVIDIA H200": {"gather": [[1280, 8, 8, 4, 1, 1, 0, 0, 1]]}}
    assert load_tables(table).for_device("NVIDIA H200").gather_config(1280, 8, 8, 4) == (1, 1, False, None, True)
    with pytest.raises(SystemExit):
        ar.main([str(path), "--margin", "1.5", "--dry-run"])
