"""No silent caps (issue 51, item 3): the default cap applies to the embedded corpus only; a cap
that drops text says how much in one line and summary.json records it; a run planned past
`MANY_EPOCHS` epochs says so when it starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mhar_probe.data import load_corpus, resolve_cap
from mhar_probe.data.load import EMBEDDED_DEFAULT_CAP
from mhar_probe.runoptions import TrainConfig
from mhar_probe.train import MANY_EPOCHS, train

TINY = dict(preset="tiny", seq_len=32, batch_size=4, eval_every=1, eval_batches=1, vocab_size=300,
            progress=False, extra=dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mhar-cache"))
    torch.set_num_threads(1)


@pytest.fixture
def text_dir(tmp_path) -> Path:
    """A corpus of the user's files: 100 documents of about 1 KB."""
    folder = tmp_path / "texts"
    folder.mkdir()
    for k in range(100):
        (folder / f"doc{k:02d}.txt").write_text(" ".join(f"w{k}x{j}" for j in range(150)) + "\n")
    return folder


def test_resolve_cap_defaults_only_the_embedded_corpus():
    assert resolve_cap(None, None) == resolve_cap("embedded", None) == EMBEDDED_DEFAULT_CAP
    assert resolve_cap("installed", None) == 0 and resolve_cap("corpus", None) == 0
    assert resolve_cap("embedded", 0) == 0 and resolve_cap("corpus", 12345) == 12345


def test_a_cap_records_what_it_kept_and_dropped(text_dir):
    full = load_corpus(str(text_dir))
    total = sum(d.n_bytes for d in (*full.train, *full.val))
    capped = load_corpus(str(text_dir), max_bytes=40_000)
    cap = capped.composition.meta["cap"]
    kept = sum(d.n_bytes for d in (*capped.train, *capped.val))
    assert cap == dict(max_bytes=40_000, bytes_before=total, bytes_kept=kept, bytes_dropped=total - kept)
    assert kept <= 40_000 and "cap" not in full.composition.meta
    assert load_corpus(str(text_dir), max_bytes=0).fingerprint == full.fingerprint  # 0: no cap


def test_the_users_corpus_is_not_capped_by_default(tmp_path, text_dir, capsys):
    summary = train(TrainConfig(out=str(tmp_path / "run"), corpus=str(text_dir), steps=2, **TINY))
    saved = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert saved["corpus_max_bytes"] == 0 and summary["corpus_cap"] is None
    full = load_corpus(str(text_dir))
    assert json.loads((tmp_path / "run" / "corpus.json").read_text())["fingerprint"] == full.fingerprint
    assert "drops" not in capsys.readouterr().err


def test_a_cap_that_drops_text_says_so_and_is_recorded(tmp_path, text_dir, capsys):
    summary = train(TrainConfig(out=str(tmp_path / "run"), corpus=str(text_dir), corpus_max_bytes=40_000,
                                steps=2, **TINY))
    err = [line for line in capsys.readouterr().err.splitlines() if "drops" in line]
    cap = summary["corpus_cap"]
    assert cap["max_bytes"] == 40_000 and 0 < cap["bytes_dropped"] == cap["bytes_before"] - cap["bytes_kept"]
    assert len(err) == 1 and "--corpus-max-bytes 40,000" in err[0] and "--corpus-max-bytes 0" in err[0]
    assert f"drops {cap['bytes_dropped'] / 1e6:,.1f} MB" in err[0]


def test_the_embedded_default_cap_is_said_and_recorded(tmp_path, capsys):
    summary = train(TrainConfig(out=str(tmp_path / "run"), steps=1, **TINY))
    assert summary["corpus_cap"]["max_bytes"] == EMBEDDED_DEFAULT_CAP and summary["corpus_cap"]["bytes_dropped"] > 0
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["corpus_max_bytes"] == EMBEDDED_DEFAULT_CAP
    assert sum("drops" in line for line in capsys.readouterr().err.splitlines()) == 1


def test_a_run_planned_past_many_epochs_says_so_at_the_start(tmp_path, text_dir, capsys):
    corpus = load_corpus(str(text_dir))
    from mhar_probe.data import get_tokenizer, load_packed

    rows = load_packed(corpus, get_tokenizer(corpus, vocab_size=300), 32, "train")
    per_epoch = len(rows) * 32  # training tokens of one epoch: rows x T
    few = per_epoch * MANY_EPOCHS // (4 * 32)  # steps of 4 x 32 tokens: just under the line
    cfg = dict(corpus=str(text_dir), **TINY)
    train(TrainConfig(out=str(tmp_path / "few"), steps=few, stop_after=1, **cfg))
    assert "epochs" not in capsys.readouterr().err
    train(TrainConfig(out=str(tmp_path / "many"), steps=few + 2, stop_after=1, **cfg))
    err = [line for line in capsys.readouterr().err.splitlines() if "epochs" in line]
    assert len(err) == 1 and f"{per_epoch:,} training tokens" in err[0]
    assert f"{(few + 2) * 4 * 32 / per_epoch:,.1f} epochs" in err[0]


def test_train_help_states_the_cap_default(capsys):
    from mhar_probe.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "4,000,000 for the embedded corpus, no cap for any other" in out
