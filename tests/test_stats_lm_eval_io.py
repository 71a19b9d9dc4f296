"""Reader of LM Evaluation Harness --log_samples output (fixtures from a real offline run)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.stats.compare import compare_eval_dirs
from analysis.stats.errors import StatsError
from analysis.stats.lm_eval_io import load_eval_run, read_samples
from analysis.stats.report import format_table, to_csv, to_json, to_latex, write_outputs

DATA = Path(__file__).parent / "data" / "lm_eval"


def _lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def _samples_file(root, task):
    (p,) = Path(root).rglob(f"samples_{task}_*.jsonl")
    return p


def _recount(root_a, root_b, task, flt, metric):
    """Independent recount straight from the JSON lines (new format)."""
    a = {r["doc_id"]: r[metric] for r in _lines(_samples_file(root_a, task)) if r["filter"] == flt}
    b = {r["doc_id"]: r[metric] for r in _lines(_samples_file(root_b, task)) if r["filter"] == flt}
    ids = sorted(set(a) & set(b))
    return (len(ids), sum(a[i] == 1 and b[i] == 0 for i in ids), sum(a[i] == 0 and b[i] == 1 for i in ids),
            np.mean([a[i] for i in ids]), np.mean([b[i] for i in ids]))


@pytest.mark.parametrize("fmt", ["new", "old"])
def test_both_formats_give_the_direct_recount(fmt):
    cmp = compare_eval_dirs(DATA / fmt / "arm_a", DATA / fmt / "arm_b", n_boot=500)
    rows = {(r.task, r.filter): r for r in cmp.rows}
    assert set(rows) == {("toy_mc", "none"), ("toy_gen", "strict-match"), ("toy_gen", "flexible-extract")}
    assert rows[("toy_mc", "none")].metric == "acc_norm"  # multiple-choice default
    assert rows[("toy_gen", "strict-match")].metric == "exact_match"
    for (task, flt), r in rows.items():
        n, b, c, acc_a, acc_b = _recount(DATA / "new" / "arm_a", DATA / "new" / "arm_b", task, flt, r.metric)
        assert (r.n, r.b, r.c) == (n, b, c)
        assert r.acc_a == pytest.approx(acc_a) and r.acc_b == pytest.approx(acc_b)
        assert r.only_a == r.only_b == r.duplicated_a == r.duplicated_b == r.hash_mismatch == r.hash_unchecked == 0


def test_formats_detected_and_agree_with_results_json():
    new = load_eval_run(DATA / "new" / "arm_a")
    old = load_eval_run(DATA / "old" / "arm_a")
    assert not new.tasks["toy_gen"].legacy and old.tasks["toy_gen"].legacy
    assert old.tasks["toy_gen"].filters == ["strict-match", "flexible-extract"]
    for run in (new, old):
        for task, ts in run.tasks.items():
            for flt in ts.filters:
                for metric in ts.metrics:
                    vals = [s.scores[metric] for s in ts.samples if s.filter == flt]
                    assert np.mean(vals) == pytest.approx(run.results["results"][task][f"{metric},{flt}"])


def test_metric_and_filter_selection():
    cmp = compare_eval_dirs(DATA / "new" / "arm_a", DATA / "new" / "arm_b", tasks=["toy_*"],
                            filters=["strict-match", "none"], metric=None, n_boot=200)
    assert {(r.task, r.filter) for r in cmp.rows} == {("toy_gen", "strict-match"), ("toy_mc", "none")}
    cmp = compare_eval_dirs(DATA / "new" / "arm_a", DATA / "new" / "arm_b", tasks=["toy_mc"], metric="acc",
                            n_boot=200)
    assert cmp.rows[0].metric == "acc"
    with pytest.raises(StatsError, match="no metric 'f1'"):
        compare_eval_dirs(DATA / "new" / "arm_a", DATA / "new" / "arm_b", tasks=["toy_mc"], metric="f1")
    with pytest.raises(StatsError, match="not found"):
        compare_eval_dirs(DATA / "new" / "arm_a", DATA / "new" / "arm_b", tasks=["mmlu"])


def _copy_arm(tmp_path, fmt="new", arm="arm_b"):
    dst = tmp_path / f"{fmt}_{arm}"
    shutil.copytree(DATA / fmt / arm, dst)
    return dst


def _rewrite(path, fn):
    recs = _lines(path)
    recs = fn(recs)
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_unmatched_duplicated_and_mismatched_items_are_counted(tmp_path):
    b = _copy_arm(tmp_path)
    f = _samples_file(b, "toy_mc")

    def edit(recs):
        recs = [r for r in recs if r["doc_id"] not in (0, 1, 2)]  # 3 only in A
        recs[0]["doc_hash"] = "0" * 64  # 1 mismatched document
        recs[1]["prompt_hash"] = "f" * 64  # 1 mismatched prompt
        recs.append(dict(recs[5]))  # 1 duplicated in B
        extra = dict(recs[6]); extra["doc_id"] = 999  # 1 only in B
        return recs + [extra]
    _rewrite(f, edit)
    # 6 of 60 items (10%) do not pair: refused unless unpaired items are allowed
    with pytest.raises(StatsError, match=r"only 54 of 60 items pair .*--allow-unpaired"):
        compare_eval_dirs(DATA / "new" / "arm_a", b, tasks=["toy_mc"], n_boot=200)
    cmp = compare_eval_dirs(DATA / "new" / "arm_a", b, tasks=["toy_mc"], n_boot=200, max_unpaired=1.0)
    (r,) = cmp.rows
    assert (r.only_a, r.only_b, r.duplicated_b, r.hash_mismatch) == (3, 1, 1, 2)
    assert r.n == 60 - 3 - 1 - 2
    assert r.n_a == 60 and r.n_b == 60 - 3 + 2
    text = format_table(cmp)
    assert "hash mismatch 2" in text and "doc_hash differ" in text and "prompt_hash differ" in text


def test_all_mismatched_is_an_error(tmp_path):
    b = _copy_arm(tmp_path)
    _rewrite(_samples_file(b, "toy_mc"), lambda recs: [dict(r, target_hash="x") for r in recs])
    with pytest.raises(StatsError, match="no item could be paired"):
        compare_eval_dirs(DATA / "new" / "arm_a", b, tasks=["toy_mc"], n_boot=100)


def test_duplicated_doc_in_legacy_file(tmp_path):
    b = _copy_arm(tmp_path, "old")
    _rewrite(_samples_file(b, "toy_mc"), lambda recs: recs + [recs[4]])
    cmp = compare_eval_dirs(DATA / "old" / "arm_a", b, tasks=["toy_mc"], n_boot=100)
    assert cmp.rows[0].duplicated_b == 1 and cmp.rows[0].n == 59


@pytest.mark.parametrize("bad,match", [
    ("{not json\n", "not valid JSON"),
    ("[1, 2]\n", "expected a JSON object"),
    ('{"filter": "none", "metrics": ["acc"], "acc": 1}\n', "missing field 'doc_id'"),
    ('{"doc_id": 1, "filter": "none", "metrics": ["acc"]}\n', "listed in 'metrics' but absent"),
    ('{"doc_id": 1, "filter": 3, "metrics": ["acc"], "acc": 1}\n', "'filter' must be a string"),
    ('{"doc_id": 1, "acc": 1}\n', "mixes lines"),
    # no 'metrics' list and a key that may or may not be a metric: ambiguous, refused
    ('{"doc_id": 1, "filter": "none", "acc": 1, "note": "hand-made"}\n', "key\\(s\\) note are neither"),
    ('{"doc_id": 1, "filter": "none", "metrics": "acc", "acc": 1}\n', "'metrics' must be a list"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad, match):
    b = _copy_arm(tmp_path)
    f = _samples_file(b, "toy_mc")
    lines = f.read_text().splitlines(keepends=True)
    lines.insert(3, bad)
    f.write_text("".join(lines))
    with pytest.raises(StatsError, match=match) as e:
        read_samples(f)
    assert f"{f}:4:" in str(e.value)


def test_lines_without_a_metrics_list_are_read_when_unambiguous(tmp_path):
    """Samples written without the `metrics` list (other writers) give the same test as the
    harness's own lines, because every remaining key is a metric value."""
    b = _copy_arm(tmp_path)
    f = _samples_file(b, "toy_mc")
    _rewrite(f, lambda recs: [{k: v for k, v in r.items() if k != "metrics"} for r in recs])
    stripped = read_samples(f)
    original = read_samples(_samples_file(DATA / "new" / "arm_b", "toy_mc"))
    assert stripped.metrics == original.metrics
    assert [s.scores for s in stripped.samples] == [s.scores for s in original.samples]
    want = compare_eval_dirs(DATA / "new" / "arm_a", DATA / "new" / "arm_b", tasks=["toy_mc"], n_boot=200).rows
    got = compare_eval_dirs(DATA / "new" / "arm_a", b, tasks=["toy_mc"], n_boot=200).rows
    assert [(r.metric, r.n, r.b, r.c, r.p_value) for r in got] == [(r.metric, r.n, r.b, r.c, r.p_value) for r in want]


def test_empty_and_missing_inputs(tmp_path):
    b = _copy_arm(tmp_path)
    _samples_file(b, "toy_mc").write_text("")
    with pytest.raises(StatsError, match="empty file"):
        load_eval_run(b)
    with pytest.raises(StatsError, match="does not exist"):
        load_eval_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StatsError, match="--log_samples"):
        load_eval_run(tmp_path / "empty")


def test_non_binary_metric_is_an_error(tmp_path):
    b = _copy_arm(tmp_path)
    _rewrite(_samples_file(b, "toy_mc"), lambda recs: [dict(r, acc_norm=0.5) for r in recs])
    with pytest.raises(StatsError, match="not 0/1"):
        compare_eval_dirs(DATA / "new" / "arm_a", b, tasks=["toy_mc"], n_boot=100)


def test_outputs_written_atomically_and_not_overwritten(tmp_path):
    cmp = compare_eval_dirs(DATA / "new" / "arm_a", DATA / "new" / "arm_b", n_boot=200)
    paths = write_outputs(cmp, tmp_path / "out")
    assert sorted(p.suffix for p in paths) == [".csv", ".json", ".tex"]
    doc = json.loads((tmp_path / "out" / "mcnemar.json").read_text())
    assert len(doc["rows"]) == 3
    assert to_csv(cmp).count("\n") == 4
    assert r"\toprule" in to_latex(cmp) and "toy\\_gen" in to_latex(cmp)
    assert json.loads(to_json(cmp))["rows"][0]["task"] == cmp.rows[0].task
    before = (tmp_path / "out" / "mcnemar.csv").read_text()
    with pytest.raises(StatsError, match="--overwrite"):
        write_outputs(cmp, tmp_path / "out")
    assert (tmp_path / "out" / "mcnemar.csv").read_text() == before
    write_outputs(cmp, tmp_path / "out", overwrite=True)
    assert not list((tmp_path / "out").glob(".*tmp"))
