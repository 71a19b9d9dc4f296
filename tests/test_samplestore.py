"""Harness samples files stored compactly (mhar_probe.samplestore): reading the compact form gives
back the harness's records exactly, prompts are kept once per prompt set and never merged, and
McNemar from compact files equals McNemar from the harness's own files (scipy as the reference)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from analysis.stats.compare import compare_eval_dirs
from analysis.stats.errors import StatsError
from analysis.stats.lm_eval_io import read_samples
from mhar_probe.samplestore import (COMPACT_SUFFIX, SampleStoreError, compact, convert_folder, expand,
                                    find_shard, read_compact, read_shard, share_shards)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "lm_eval"
STUDY_EVALS = ROOT / "results" / "study100m" / "runs" / "evals"
LADDER_EVALS = ROOT / "results" / "ladder" / "runs" / "evals"
DATE = "2026-11-26T01-02-03.123456"
#: SHA-256 of the uncompressed harness files as committed before the conversion (git show 39a5e3a:PATH.jsonl.gz)
ORIGINAL_SHA256 = {
    STUDY_EVALS / "100m-baseline-kv4-lr5e-4-s0-n3815" / "100m-baseline-kv4-lr5e-4-s0-n3815"
    / f"samples_mhar_lastword_2026-11-26T01-23-58.457563{COMPACT_SUFFIX}":
        "7914567b05ab4b4ac680b776590adcb64a95ed3d890f36655441386d98e14972",
    LADDER_EVALS / "tiny-mhar-h8-kv4-lr2e-3-s0-n480" / "tiny-mhar-h8-kv4-lr2e-3-s0-n480"
    / f"samples_mhar_nextline_2026-11-25T04-02-44.143591{COMPACT_SUFFIX}":
        "53c90655c376a3843877c7c0b4f37c6a388e3ad7c651c37846367e71940c005e",
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _harness_text(records: list[dict]) -> str:
    """The harness's own layout (lm_eval's save_results_samples: json.dumps(..., ensure_ascii=False))."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _item(doc_id, question, answer, flt="none", acc=1, **extra):
    """A harness line with the hashes the harness computes (sha256 of the doc's JSON, of the first
    request's context, of str(target))."""
    doc = {"question": question, "answer": answer}
    args = {"gen_args_0": {"arg_0": question, "arg_1": answer}}
    return {"doc_id": doc_id, "doc": doc, "target": answer, "arguments": args,
            "resps": [[[str(-1.5 - acc), str(bool(acc))]]], "filtered_resps": [[str(-1.5 - acc), str(bool(acc))]],
            "filter": flt, "metrics": ["acc"],
            "doc_hash": _sha(json.dumps(doc, indent=2, ensure_ascii=False)), "prompt_hash": _sha(question),
            "target_hash": _sha(answer), "acc": acc, **extra}


#: the analytic case: three documents, the second under two filters (one prompt, two lines), non-ASCII text
TINY = [_item(0, "Ein Stück Käse —", " ja", acc=1), _item(1, "two\nlines", " b", acc=0),
        _item(1, "two\nlines", " b", flt="strict", acc=1), _item(2, "x", " c", acc=0)]


def _write(path: Path, records: list[dict], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _harness_text(records).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _samples(folder: Path, run: str, records: list[dict], task: str = "toy", gz: bool = False) -> Path:
    return _write(folder / run / run / f"samples_{task}_{DATE}.jsonl{'.gz' if gz else ''}", records, gz)


# ----------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("gz", [False, True])
def test_tiny_file_round_trips_exactly(tmp_path, gz):
    src = _samples(tmp_path / "evals", "r", TINY, gz=gz)
    original = (gzip.decompress if gz else bytes)(src.read_bytes())
    done = compact(src, tmp_path / "evals" / "prompts")
    assert done.path.name == f"samples_toy_{DATE}{COMPACT_SUFFIX}" and src.exists()
    assert (done.lines, done.items) == (4, 3)  # doc 1's two filter lines share one prompt
    assert [rec for _, rec in read_compact(done.path)] == TINY
    assert [list(rec) for _, rec in read_compact(done.path)] == [list(r) for r in TINY]  # key order too
    assert expand(done.path) == original
    # the compact lines hold no prompt text; the shard holds each prompt once
    compact_text = gzip.decompress(done.path.read_bytes()).decode()
    assert "Käse" not in compact_text and "two\\nlines" not in compact_text and TINY[0]["doc_hash"] not in compact_text
    shard = read_shard(done.shard)
    assert [i["doc_id"] for i in shard.items] == [0, 1, 2]
    assert shard.items[0]["doc"] == TINY[0]["doc"] and shard.items[0]["prompt_hash"] == _sha("Ein Stück Käse —")


def test_reader_gives_the_harness_files_samples(tmp_path):
    """lm_eval_io reads the compact form as the harness's file: the same doc ids, filters, scores,
    hashes and item keys (the keys come from the prompts, re-joined)."""
    src = _samples(tmp_path / "evals", "r", TINY)
    done = compact(src, tmp_path / "evals" / "prompts")
    a, b = read_samples(src), read_samples(done.path)
    assert b.task == a.task == "toy" and b.filters == a.filters == ["none", "strict"] and b.metrics == a.metrics
    assert [(s.doc_id, s.filter, s.scores, s.hashes, s.item_key) for s in b.samples] \
        == [(s.doc_id, s.filter, s.scores, s.hashes, s.item_key) for s in a.samples]


@pytest.mark.parametrize("path", list(ORIGINAL_SHA256), ids=lambda p: p.parent.name)
def test_committed_compact_files_restore_the_originals(path, tmp_path):
    """A committed compact file expands to the harness's file as committed before the conversion
    (its SHA-256), every re-joined record carries the hashes the harness computes from its own doc,
    first request and target, and compacting the expansion again gives the committed bytes back."""
    data = expand(path)
    assert hashlib.sha256(data).hexdigest() == ORIGINAL_SHA256[path]
    for line in data.decode("utf-8").splitlines():
        rec = json.loads(line)
        assert rec["target_hash"] == _sha(str(rec["target"]))  # the line's target met its own prompt
        assert rec["doc_hash"] == _sha(json.dumps(rec["doc"], indent=2, ensure_ascii=False))
        assert rec["prompt_hash"] == _sha(rec["arguments"]["gen_args_0"]["arg_0"])
    again = tmp_path / "evals" / "r" / path.name.replace(COMPACT_SUFFIX, ".jsonl")
    again.parent.mkdir(parents=True)
    again.write_bytes(data)
    done = compact(again, tmp_path / "evals" / "prompts")
    committed_shard = find_shard(path, done.shard.name)  # the same prompt set, so the same name
    assert gzip.decompress(done.shard.read_bytes()) == gzip.decompress(committed_shard.read_bytes())
    assert gzip.decompress(done.path.read_bytes()) == gzip.decompress(path.read_bytes())


# ----------------------------------------------------------------------------- folders
def test_runs_share_a_shard_and_a_differing_prompt_is_kept_beside_it(tmp_path):
    evals = tmp_path / "evals"
    _samples(evals, "a", TINY)
    _samples(evals, "b", [dict(r, acc=1 - r["acc"]) for r in TINY], gz=True)
    changed = [dict(r, doc=dict(r["doc"], question="other")) if r["doc_id"] == 2 else r for r in TINY]
    _samples(evals, "c", changed)
    report = convert_folder(evals)
    assert len(report.converted) == 3
    shards = sorted((evals / "prompts").iterdir())
    assert len(shards) == 2  # a and b share one; c's differs at doc 2, so it has its own
    assert report.differing == {"toy": [2]}
    assert any("2 prompt sets kept side by side" in line and "1 doc_id(s) differ: 2" in line
               for line in report.lines())
    for run, records in (("a", TINY), ("c", changed)):
        (path,) = (evals / run / run).iterdir()
        assert [rec for _, rec in read_compact(path)] == records
    assert not list(evals.rglob("*.jsonl")) and len(list(evals.rglob("*.jsonl.gz"))) == 5


def test_sibling_studies_share_one_copy_of_their_prompts(tmp_path):
    """Two exported study folders under one root (a rate, a scale) each hold the same shard; after
    share_shards the root holds it once, each folder's readers still restore every record, and a
    shard only one folder has moves up too."""
    changed = [dict(r, doc=dict(r["doc"], question="other")) if r["doc_id"] == 2 else r for r in TINY]
    for study, records in (("main", TINY), ("scale", TINY), ("rate", changed)):
        _samples(tmp_path / study / "runs" / "evals", "r", records)
        convert_folder(tmp_path / study / "runs" / "evals")
    before = {p.name for p in tmp_path.rglob("prompts/*.jsonl.gz")}
    assert len(list(tmp_path.rglob("prompts/*.jsonl.gz"))) == 3 and len(before) == 2
    removed = share_shards(tmp_path)
    assert [p.relative_to(tmp_path).parts[0] for p in removed] == ["scale"]  # main's copy moved up first
    assert {p.name for p in (tmp_path / "prompts").iterdir()} == before
    assert not [p for p in tmp_path.rglob("prompts") if p != tmp_path / "prompts"]
    for study, records in (("main", TINY), ("scale", TINY), ("rate", changed)):
        (path,) = (tmp_path / study / "runs" / "evals" / "r" / "r").iterdir()
        assert [rec for _, rec in read_compact(path)] == records
    assert share_shards(tmp_path) == []  # nothing left to share


def test_sharing_refuses_a_damaged_copy_and_keeps_it(tmp_path):
    for study in ("a", "b"):
        _samples(tmp_path / study / "runs" / "evals", "r", TINY)
        convert_folder(tmp_path / study / "runs" / "evals")
    (damaged,) = (tmp_path / "b" / "runs" / "evals" / "prompts").iterdir()
    damaged.write_bytes(gzip.compress(b"not a shard\n"))
    with pytest.raises(SampleStoreError, match="not a prompt shard|damaged"):
        share_shards(tmp_path)
    assert damaged.exists()


def test_conversion_is_idempotent(tmp_path):
    evals = tmp_path / "evals"
    _samples(evals, "a", TINY)
    _samples(evals, "b", TINY, gz=True)
    (evals / "a" / "a" / f"results_{DATE}.json").write_text("{}")
    convert_folder(evals)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in evals.rglob("*") if p.is_file()}
    again = convert_folder(evals)
    assert not again.converted and len(again.checked) == 2
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in evals.rglob("*") if p.is_file()} == before


def test_a_conflicting_shard_is_refused_and_nothing_is_lost(tmp_path):
    """A shard under the name of this prompt set but with other content (an edited or damaged file)
    is one line of error; the harness file stays and no compact file is written."""
    evals = tmp_path / "evals"
    first = convert_folder(_samples(tmp_path / "x", "r", TINY).parents[2])
    shard = first.converted[0].shard
    tampered = evals / "prompts" / shard.name
    tampered.parent.mkdir(parents=True)
    text = gzip.decompress(shard.read_bytes()).decode().replace("Käse", "Brot")
    tampered.write_bytes(gzip.compress(text.encode()))
    src = _samples(evals, "r", TINY)
    with pytest.raises(SampleStoreError, match="prompt conflict") as err:
        convert_folder(evals)
    assert "\n" not in str(err.value) and str(tampered) in str(err.value)
    assert src.exists() and not list(evals.rglob(f"*{COMPACT_SUFFIX}"))
    assert gzip.decompress(tampered.read_bytes()).decode() == text  # not overwritten either


def test_an_edited_shard_or_a_missing_one_is_one_line_for_the_reader(tmp_path):
    evals = tmp_path / "evals"
    done = compact(_samples(evals, "r", TINY), evals / "prompts")
    text = gzip.decompress(done.shard.read_bytes()).decode().replace("Käse", "Brot")
    done.shard.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(StatsError, match="does not match its name") as err:
        read_samples(done.path)
    assert "\n" not in str(err.value)
    done.shard.unlink()
    with pytest.raises(StatsError, match="in no prompts/ folder above it"):
        read_samples(done.path)


def test_a_file_that_would_not_restore_exactly_is_left_as_it_is(tmp_path):
    """Not the harness's layout (here: ASCII-escaped, as json.dumps writes by default): refused, kept."""
    src = tmp_path / "evals" / "r" / f"samples_toy_{DATE}.jsonl"
    src.parent.mkdir(parents=True)
    src.write_text("".join(json.dumps(r) + "\n" for r in TINY))
    with pytest.raises(SampleStoreError, match="byte for byte"):
        convert_folder(tmp_path / "evals")
    assert src.exists() and not list(src.parent.glob(f"*{COMPACT_SUFFIX}"))


# ----------------------------------------------------------------------------- McNemar
def _rows(cmp) -> list[dict]:
    """The comparison's rows, NaN written as a string so that equal tables compare equal."""
    return [{k: "nan" if isinstance(v, float) and v != v else v for k, v in r.as_dict().items()} for r in cmp.rows]


def _copy_fixture_arms(tmp_path: Path) -> Path:
    root = tmp_path / "evals"
    for arm in ("arm_a", "arm_b"):
        shutil.copytree(DATA / "new" / arm, root / arm)
    return root


def test_mcnemar_from_compact_files_equals_the_originals_and_scipy(tmp_path):
    """The harness fixtures (two arms, a multiple-choice and a two-filter generation task): every
    row of the comparison is the same from the compact form, and b, c and p are scipy's exact
    binomial test on a recount from the harness's lines."""
    root = _copy_fixture_arms(tmp_path)
    original = compare_eval_dirs(root / "arm_a", root / "arm_b", n_boot=200)
    report = convert_folder(root)
    assert len(report.converted) == 4 and not list(root.rglob("samples_*.jsonl"))
    packed = compare_eval_dirs(root / "arm_a", root / "arm_b", n_boot=200)
    assert _rows(packed) == _rows(original) and len(packed.rows) == 3
    for row in packed.rows:
        recs = {}
        for arm in ("arm_a", "arm_b"):
            (f,) = (DATA / "new" / arm).rglob(f"samples_{row.task}_*.jsonl")
            recs[arm] = {r["doc_id"]: r[row.metric] for r in map(json.loads, f.read_text().splitlines())
                         if r["filter"] == row.filter}
        ids = sorted(recs["arm_a"])
        b = sum(recs["arm_a"][i] == 1 and recs["arm_b"][i] == 0 for i in ids)
        c = sum(recs["arm_a"][i] == 0 and recs["arm_b"][i] == 1 for i in ids)
        assert (row.n, row.b, row.c) == (len(ids), b, c)
        assert row.p_value == pytest.approx(binomtest(b, b + c, 0.5).pvalue if b + c else 1.0)


def test_mcnemar_on_the_committed_study_equals_statsmodels():
    """Seed 0's baseline against MHAR H=8 from the committed compact files: the table's b, c and p
    are statsmodels' exact McNemar on a 2x2 table counted from the expanded harness lines."""
    base = STUDY_EVALS / "100m-baseline-kv4-lr5e-4-s0-n3815"
    mhar = STUDY_EVALS / "100m-mhar-h8-kv4-lr5e-4-s0-n3815"
    cmp = compare_eval_dirs(base, mhar, n_boot=200)
    for row in cmp.rows:
        score = {}
        for name, d in (("a", base), ("b", mhar)):
            (f,) = d.rglob(f"samples_{row.task}_*{COMPACT_SUFFIX}")
            score[name] = {r["doc_id"]: r[row.metric] for r in map(json.loads, expand(f).decode().splitlines())}
        ids = sorted(score["a"])
        table = [[sum(score["a"][i] == x and score["b"][i] == y for i in ids) for y in (1, 0)] for x in (1, 0)]
        ref = sm_mcnemar(table, exact=True)
        assert (row.n, row.b, row.c) == (len(ids), table[0][1], table[1][0])
        assert row.p_value == pytest.approx(ref.pvalue)


# ----------------------------------------------------------------------------- export
def test_export_writes_the_compact_form_and_adds_prompt_sets_beside_committed_ones(tmp_path):
    """export_study compacts a call's harness files into the results folder; a later call asked other
    prompts adds its set beside the committed one (which it never changes), re-exporting an export
    copies its sets checked, and a committed set damaged under the same name is refused."""
    from mhar_probe.demo.export import export_study

    dest = tmp_path / "results"
    first, second = tmp_path / "call1", tmp_path / "call2"
    _samples(first / "runs" / "evals", "r1", TINY)
    changed = [dict(r, doc=dict(r["doc"], question="other")) if r["doc_id"] == 0 else r for r in TINY]
    _samples(second / "runs" / "evals", "r2", changed)
    written = export_study(first, dest)
    (shard1,) = (dest / "runs" / "evals" / "prompts").iterdir()
    packed1 = dest / "runs" / "evals" / "r1" / "r1" / f"samples_toy_{DATE}{COMPACT_SUFFIX}"
    assert set(written) == {packed1, shard1}
    committed = shard1.read_bytes()
    export_study(second, dest)
    export_study(first, dest)  # the same call again: the same set, nothing changes
    assert len(list((dest / "runs" / "evals" / "prompts").iterdir())) == 2 and shard1.read_bytes() == committed
    packed2 = dest / "runs" / "evals" / "r2" / "r2" / packed1.name
    assert [r for _, r in read_compact(packed1)] == TINY and [r for _, r in read_compact(packed2)] == changed
    again = tmp_path / "again"
    export_study(dest, again)
    assert [r for _, r in read_compact(again / packed2.relative_to(dest))] == changed
    text = gzip.decompress(committed).decode().replace("Käse", "Brot")
    shard1.write_bytes(gzip.compress(text.encode()))
    with pytest.raises(SampleStoreError, match="prompt conflict"):
        export_study(first, dest)
    assert gzip.decompress(shard1.read_bytes()).decode() == text and packed1.is_file()  # nothing lost


def test_an_export_of_a_folder_whose_prompts_are_shared_carries_them(tmp_path):
    """After share_shards a folder's prompt sets live above its runs; exporting it (exporting an
    export) still writes every set its compact files name into the copy's runs/evals/prompts."""
    from mhar_probe.demo.export import export_study

    dest = tmp_path / "study"
    changed = [dict(r, doc=dict(r["doc"], question="other")) if r["doc_id"] == 0 else r for r in TINY]
    _samples(tmp_path / "call1" / "runs" / "evals", "r1", TINY)
    _samples(tmp_path / "call2" / "runs" / "evals", "r2", changed)
    export_study(tmp_path / "call1", dest)
    export_study(tmp_path / "call2", dest)
    share_shards(tmp_path)
    assert not (dest / "runs" / "evals" / "prompts").exists() and len(list((tmp_path / "prompts").iterdir())) == 2
    copy = tmp_path / "copy"
    export_study(dest, copy)
    assert len(list((copy / "runs" / "evals" / "prompts").iterdir())) == 2
    for run, records in (("r1", TINY), ("r2", changed)):
        (path,) = (copy / "runs" / "evals" / run / run).iterdir()
        assert [r for _, r in read_compact(path)] == records
