"""`mhar info --preset P`: a preset is counted with the vocabulary the paper's tables use
(151,936 at 100m-1b) unless told otherwise, and the output says which vocabulary it counted."""

from __future__ import annotations

import pytest

from mhar_probe.errors import UserError
from mhar_probe.info import describe
from mhar_probe.model.config import PRESETS


@pytest.mark.parametrize("preset", ["100m", "350m", "1b"])
def test_a_paper_preset_counts_the_papers_tied_vocabulary(preset):
    d = PRESETS[preset]["hidden_size"]
    info = describe(None, preset=preset, method="baseline")
    assert info["vocab_size"] == 151_936
    assert info["parameters"]["embedding"] == 151_936 * d  # tied: one V x d matrix
    local = describe(None, preset=preset, method="baseline", vocab_size=4096)
    assert local["parameters"]["embedding"] == 4096 * d
    assert (info["parameters"]["total"] - local["parameters"]["total"]) == (151_936 - 4096) * d


def test_the_text_names_the_vocabulary_it_counted():
    text = describe(None, preset="1b", method="mhar", as_text=True)
    assert "vocabulary 151,936 (the paper's" in text
    assert "vocabulary 4,096" in describe(None, preset="tiny", as_text=True)
    d, L, ffn = 1280, 36, 5120  # 1b: q, k, v, o (16/8 heads of 80) + SwiGLU, the paper's ~1.08B
    attention = d * d + 2 * d * (8 * 80) + d * d
    assert describe(None, preset="1b", method="baseline")["parameters"]["attention"] == L * attention
    assert describe(None, preset="1b", method="baseline")["parameters"]["mlp"] == L * 3 * d * ffn


def test_vocab_size_is_refused_for_a_run(tmp_path):
    with pytest.raises(UserError, match="--vocab-size is for a preset"):
        describe(str(tmp_path), vocab_size=100)


def test_a_killed_run_points_to_resume_in_info_capture_and_eval(tmp_path):
    """A run stopped before its first checkpoint, or killed between a checkpoint's renames, has
    neither a final model nor checkpoint/: info, capture and eval name the --resume that finishes it."""
    import json

    from mhar_probe.capture.runs import require_run
    from mhar_probe.errors import UserError
    from mhar_probe.evaluate.harness import check_run
    from mhar_probe.rundir import require_run_dir

    before = tmp_path / "before"
    before.mkdir()
    (before / "train_config.json").write_text(json.dumps({"steps": 10}))
    during = tmp_path / "during"
    (during / ".checkpoint.tmp-x1").mkdir(parents=True)
    (during / "train_config.json").write_text(json.dumps({"steps": 10}))
    (during / ".checkpoint.tmp-x1" / "state.json").write_text(json.dumps({"step": 5}))
    for run, why in ((before, "before its first checkpoint"), (during, "while writing a checkpoint")):
        for check in (require_run_dir, require_run, check_run):
            with pytest.raises(UserError) as err:
                check(run)
            assert why in str(err.value) and f"mhar train --out {run} --resume" in str(err.value), check
    (tmp_path / "other").mkdir()
    with pytest.raises(UserError, match="is not a run directory"):
        require_run_dir(tmp_path / "other")
