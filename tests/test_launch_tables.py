"""Launch tables keyed by card (`devices` in launch_tables.json / a --launch-table file): a card
with rows of its own gets them laid over the default rows, any other card (and the CPU) the
default rows alone; a config's file is laid over the built-in rows for the same card."""

from __future__ import annotations

import json

import pytest
import torch

from mhar_probe.errors import UserError
from mhar_probe.kernels import KernelConfig
from mhar_probe.kernels import launch_tables as lt
from mhar_probe.kernels.launch_tables import BUILTIN, KINDS, LaunchTables, card_name, load_tables, tables_for

from script_checks import load_script  # noqa: E402

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"
#: each card's fold rows as its sweep chose them (benchmarks/kernels/<card>_fold_sweep.json `summary`),
#: keyed (d, H, HM, bytes): 1B, 350M, 100M at the training microbatches under autocast
H200_FOLD = {(1280, 8, 8, 4): (1, 2, 1, 0, 1, 2), (1024, 8, 8, 4): (1, 1, 0, 0, 1, 1),
             (512, 8, 8, 4): (1, 1, 2, 0, 1, 1)}
#: the H100's: the held kernel's rows (sources 0), 350M's and 100M's with the source loop pipelined (prefetch 2),
#: from the sweep that timed the pipelined and dot folds (h100_fold_pipe_dot_sweep_62336e5.json; before
#: 2026-12-07 the held sweep h100_fold_held_sweep_cedd221.json, before 2026-12-06 the reader loop's h100_fold_sweep.json)
H100_FOLD = {(1280, 8, 8, 4): (1, 8, 1, 0, 0, 0), (1024, 8, 8, 4): (1, 8, 2, 128, 0, 0),
             (512, 8, 8, 4): (1, 4, 2, 0, 0, 0)}
#: the H200's gather and forward rows where its sweep beat the default rows by more than 2%
#: (benchmarks/kernels/h200_launch_sweep_8cce591.json through adopt_rows.py): 1B's gather and
#: forward, 350M's forward; the other shapes keep the default rows
H200_GATHER = {(1280, 8, 8, 4): (1, 1, 0, 0, 0)}
H200_FWD = {(1280, 8, 4): (1, 1, 0, 5), (1024, 8, 4): (2, 1, 0, 3)}
#: the H100's 350M forward row: a register cap of 128, adopted from the stored norms' A/B (its variant arm,
#: benchmarks/kernels/h100_fwd_rstored_ab_rstored_1.json), where it beat the card's row by 9%
H100_FWD = {(1024, 8, 4): (1, 2, 128, 4)}
#: the H100's 100M pair_e row: two heads a program, adopted from h100_pair_e_two_sweep_62336e5.json (0.393 ms
#: against the heuristic's 0.417); 350M and 1B keep the heuristic's one head
H100_PAIR_E = {(512, 8): (16, 16, 4, 2)}
ADOPTED = {H200: (("h200_launch_sweep_8cce591.json",), dict(gather=H200_GATHER, fwd=H200_FWD)),
           H100: (("h100_fwd_rstored_ab_rstored_1.json", "h100_pair_e_two_sweep_62336e5.json"),
                  dict(fwd=H100_FWD, pair_e=H100_PAIR_E))}
#: each card's fold rows for 16-bit douts (bf16 chains at the kernel-table shapes, H = 1 and 8), each
#: adopted from a fold sweep where it beat the gather's row by more than 2% (<card>_fold_sweep_bf16_h*_*.json)
H200_FOLD_BF16 = {(1280, 1, 1, 2): (1, 1, 2, 0, 1, 1), (1024, 1, 1, 2): (1, 1, 0, 0, 0, 2),
                  (512, 1, 1, 2): (1, 1, 1, 0, 0, 2), (1280, 8, 8, 2): (1, 2, 1, 0, 1, 2),
                  (1024, 8, 8, 2): (1, 1, 1, 0, 1, 1), (512, 8, 8, 2): (1, 1, 2, 0, 0, 1)}
H100_FOLD_BF16 = {(1280, 1, 1, 2): (1, 1, 1, 0, 0, 1), (1024, 1, 1, 2): (1, 1, 0, 0, 0, 2),
                  (512, 1, 1, 2): (1, 1, 1, 0, 0, 2), (1280, 8, 8, 2): (1, 2, 1, 0, 1, 2),
                  (1024, 8, 8, 2): (1, 1, 1, 0, 1, 1), (512, 8, 8, 2): (1, 1, 2, 0, 0, 1)}
FOLD_BF16 = {H200: (H200_FOLD_BF16, ("h200_fold_sweep_bf16_h1_cf05508.json", "h200_fold_sweep_bf16_h8_cf05508.json")),
             H100: (H100_FOLD_BF16, ("h100_fold_sweep_bf16_h1_623e4c7.json", "h100_fold_sweep_bf16_h8_623e4c7.json"))}


def _adopted(record: str) -> dict:
    """kind -> {key: row} of what adopt_rows adopts from a committed sweep record (2% margin)."""
    launch = json.loads((BUILTIN.parent.parents[1] / "benchmarks/kernels" / record).read_text())
    out: dict = {}
    for dec in load_script("benchmarks/kernels/adopt_rows.py").decisions(launch, margin=0.02):
        if dec["adopt"]:
            out.setdefault(dec["kind"], {})[tuple(dec["key"])] = tuple(dec["best"])
    return out


def _rows(t: LaunchTables) -> dict:
    return {k: getattr(t, k) for k in KINDS}


@pytest.mark.parametrize("card, record, rows", [(H200, "h200_fold_sweep.json", H200_FOLD),
                                               (H100, "h100_fold_pipe_dot_sweep_62336e5.json", H100_FOLD)])
def test_builtin_card_rows_are_the_sweeps_choice(card, record, rows):
    """The built-in file's entry for a card holds the fold rows its fold sweep chose and the gather
    and forward rows its launch sweep had adopted (the committed records), and nothing else."""
    records = BUILTIN.parent.parents[1] / "benchmarks/kernels"
    sweep = json.loads((records / record).read_text())
    assert sweep["meta"]["device"] == card
    dims = {"1B-train": 1280, "350M-train": 1024, "100M-train": 512}
    chosen = {(dims[r["shape"]], 8, 8, 4): tuple(r["fold_row"]) for r in sweep["summary"]}
    assert chosen == rows
    entry = load_tables(BUILTIN).devices[card]
    launch_records, adopted = ADOPTED[card]
    from_records: dict = {}
    for launch_record in launch_records:
        assert json.loads((records / launch_record).read_text())["meta"]["device"] == card
        for kind, got in _adopted(launch_record).items():
            from_records.setdefault(kind, {}).update(got)
    assert from_records == adopted
    bf16, (expected, bf16_records) = {}, FOLD_BF16[card]
    for record in bf16_records:
        assert json.loads((records / record).read_text())["meta"]["device"] == card
        bf16.update(_adopted(record)["fold"])
    assert bf16 == expected
    assert entry.fold == {**rows, **bf16}
    assert {k: getattr(entry, k) for k in KINDS if k != "fold" and getattr(entry, k)} == adopted


@pytest.mark.parametrize("name", [None, "NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe", "NVIDIA H200 NVL",
                                  "nvidia h200"])
def test_unknown_card_falls_back_to_the_default_rows(name):
    """A card with no entry (names match exactly) and the CPU look up the top-level rows: the
    fold then runs under the gather's row with one source per iteration, as before the H200 rows."""
    builtin = load_tables(BUILTIN)
    got = tables_for(KernelConfig(), name)
    assert _rows(got) == {k: getattr(builtin, k) for k in KINDS} and got.devices == {}
    for (d, h, hm, width) in H200_FOLD:
        bp, warps, pre, cap, first = got.gather_config(d, h, hm, width)
        assert got.fold_config(d, h, hm, width) == (bp, warps, int(pre), cap, first, 1)


def test_h200_lookup_picks_the_h200_rows():
    """On the H200 the fold rows are the card's (for fp32 and 16-bit douts), and so are its adopted
    gather and forward rows; every other row is the default one."""
    default, h200 = tables_for(KernelConfig()), tables_for(KernelConfig(), H200)
    for key, row in H200_FOLD.items():
        bp, warps, pre, cap, first, sources = row
        assert h200.fold_config(*key) == (bp, warps, pre, cap or None, bool(first), sources)
        bp2, warps2, pre2, cap2, first2, sources2 = H200_FOLD_BF16[(*key[:3], 2)]  # 16-bit douts: rows of their own
        assert h200.fold_config(*key[:3], 2) == (bp2, warps2, pre2, cap2 or None, bool(first2), sources2)
        assert h200.fold_config(*key[:3], 2) != default.fold_config(*key[:3], 2)
        assert h200.gather_config(*key[:3], 2) == default.gather_config(*key[:3], 2)
        assert h200.fwd_config(key[0], key[1], 2) == default.fwd_config(key[0], key[1], 2)
        if key not in H200_GATHER:
            assert h200.gather_config(*key) == default.gather_config(*key)
        if key[:2] + (4,) not in H200_FWD:
            assert h200.fwd_config(key[0], key[1], 4) == default.fwd_config(key[0], key[1], 4)
    assert h200.gather_config(1280, 8, 8, 4) == (1, 1, False, None, False)
    assert h200.fwd_config(1024, 8, 4)[1:] == (2, 1, None, 3)
    assert h200.fold_config(1280, 8, 8, 4) != default.fold_config(1280, 8, 8, 4)


def test_config_file_rows_win_over_the_builtin_card_rows(tmp_path):
    """built-in < built-in for the card < the file's rows < the file's rows for the card."""
    key = (1280, 8, 8, 4)
    file_row, file_card_row = (1, 1, 0, 0, 0, 1), (1, 2, 2, 0, 0, 2)
    path = tmp_path / "t.json"
    LaunchTables(fold={key: file_row}).dump(path)
    assert tables_for(KernelConfig(launch_table=str(path)), H200).fold[key] == file_row
    path2 = tmp_path / "t2.json"
    LaunchTables(fold={key: file_row}, devices={H200: LaunchTables(fold={key: file_card_row})}).dump(path2)
    cfg = KernelConfig(launch_table=str(path2))
    assert tables_for(cfg, H200).fold[key] == file_card_row
    assert tables_for(cfg, "NVIDIA H100 80GB HBM3").fold[key] == file_row
    assert tables_for(cfg, H200).fold[(512, 8, 8, 4)] == H200_FOLD[(512, 8, 8, 4)]  # the built-in card row stays


def test_device_rows_round_trip_and_bad_entries_are_refused(tmp_path):
    tables = LaunchTables(gather={(64, 2, 2, 4): (1, 1, 1, 0, 1)},
                          devices={"CARD A": LaunchTables(fold={(64, 2, 2, 4): (1, 2, 2, 0, 1, 2)}),
                                   "CARD B": LaunchTables(fwd={(64, 2, 0): (1, 1, 0, 3)})})
    path = tmp_path / "t.json"
    tables.dump(path)
    assert load_tables(path) == tables
    assert load_tables(path).for_device("CARD A").fold_config(64, 2, 2, 4) == (1, 2, 2, None, True, 2)
    assert load_tables(path).for_device("CARD B").fold_config(64, 2, 2, 4) == (1, 1, 1, None, True, 1)
    for bad, what in (({"devices": []}, "devices"),
                      ({"devices": {"CARD": {"devices": {}}}}, "CARD"),
                      ({"devices": {"CARD": {"fold": [[64, 2, 2, 4, 1, 1, 3, 0, 0, 1]]}}}, "CARD"),
                      ({"devices": {"CARD": {"gather": [[64, 2, 2, 4, 1]]}}}, "CARD")):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(UserError, match=f"bad.json.*{what}|{what}.*bad.json"):
            load_tables(tmp_path / "bad.json")


def test_pair_e_rows_written_before_the_heads_column_take_one_head(tmp_path):
    """A tuned file's pair_e row of five integers (d, HM, block_c, block_p, num_warps: the format before
    2026-12-07) loads with one column block a program; a row of four or seven is refused in one line."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"pair_e": [[1280, 8, 32, 16, 8]], "devices": {H100: {"pair_e": [[512, 8, 16, 32, 4]]}}}))
    old = load_tables(path)
    assert old.pair_e == {(1280, 8): (32, 16, 8, 1)} and old.devices[H100].pair_e == {(512, 8): (16, 32, 4, 1)}
    assert tables_for(KernelConfig(launch_table=str(path)), H100).pair_e_config(512, 8) == (16, 32, 4, 1)
    for row in ([1280, 8, 32, 16], [1280, 8, 32, 16, 8, 2, 1]):
        path.write_text(json.dumps({"pair_e": [row]}))
        with pytest.raises(UserError, match="old.json: a pair_e row .*heads"):
            load_tables(path)

def test_card_name(monkeypatch):
    """A CUDA device's name as torch reports it (asked once per device index); None elsewhere."""
    assert card_name(torch.device("cpu")) is None
    asked = []

    def name(index):
        asked.append(index)
        return f"CARD {index}"

    monkeypatch.setattr(lt, "_CARDS", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    assert card_name(torch.device("cuda", 1)) == "CARD 1"
    assert card_name(torch.device("cuda", 1)) == "CARD 1" and asked == [1]


def test_h100_pair_e_sweeps_adopt_two_heads_at_100m_only():
    """The H100's pair_e sweep after its split TF32 dot under autocast (h100_pair_e_sweep_dbe53aa.json,
    every one-head candidate at every training microbatch): the heuristic's (16, 16, 4) was fastest at
    each. Two heads a program (h100_pair_e_two_sweep_62336e5.json) beat it at 100M alone, so the card's
    one pair_e row is 100M's and 350M and 1B keep the heuristic."""
    records = BUILTIN.parent.parents[1] / "benchmarks/kernels"
    for record, adopted in [("h100_pair_e_sweep_dbe53aa.json", {}),
                            ("h100_pair_e_two_sweep_62336e5.json", {"pair_e": H100_PAIR_E})]:
        sweep = json.loads((records / record).read_text())
        assert sweep["meta"]["device"] == H100
        assert {r["kind"] for r in sweep["rows"]} == {"pair_e"}
        assert _adopted(record) == adopted
    assert load_tables(BUILTIN).devices[H100].pair_e == H100_PAIR_E
    got = tables_for(KernelConfig(), H100)
    assert got.pair_e_config(1280, 8) == (16, 16, 4, 1) and got.pair_e_config(1024, 8) == (16, 16, 4, 1)
    assert got.pair_e_config(512, 8) == (16, 16, 4, 2)
