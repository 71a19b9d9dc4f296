"""Data layer: corpus split and composition, user files, tokenizer cache, packing.

Checks are recomputed independently of the implementation where possible (stdlib walk,
SHA-1 split rule, token stream). Everything runs on small ``max_bytes`` corpora and a
temporary cache directory; the full corpus with the 4096 tokenizer is marked slow.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import sysconfig
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from mhar_probe.data import (
    EOS_TOKEN,
    PROSE_SOURCES,
    DataError,
    Document,
    get_tokenizer,
    load_corpus,
    load_packed,
    load_tokenizer,
    pack_tokens,
    tokenize_split,
    tokenizer_fingerprint,
)
from mhar_probe.data import packing as packing_mod
from mhar_probe.data import tokenizer as tokenizer_mod

SMALL_BYTES = 300_000
SMALL_VOCAB = 1024


# ------------------------------------------------------------------ fixtures
@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def full_corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def small_corpus():
    return load_corpus(max_bytes=SMALL_BYTES)


@pytest.fixture(scope="module")
def small_tok(small_corpus, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHAR_CACHE_DIR", str(tmp_path_factory.mktemp("tokcache")))
        return get_tokenizer(small_corpus, vocab_size=SMALL_VOCAB)


def _u(doc_id: str) -> float:
    return int(hashlib.sha1(doc_id.encode()).hexdigest()[:15], 16) / 16**15


def _expected_stdlib_ids() -> set[str]:
    """Independent walk of the stdlib with the documented exclusion rules."""
    root = Path(sysconfig.get_paths()["stdlib"])
    ids = set()
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        dirs = rel.split("/")[:-1]
        if any(
            d.startswith(("test", "config-", "."))
            or d in {"__pycache__", "site-packages", "dist-packages", "lib-dynload", "idle_test"}
            for d in dirs
        ):
            continue
        name = path.name
        is_code = name.endswith(".py") and not name.startswith("_sysconfigdata_") and rel != "pydoc_data/topics.py"
        is_text = (name.endswith(".txt") or name.startswith("README")) and "Grammar" not in name
        if (is_code or is_text) and path.read_bytes().strip():
            ids.add(f"stdlib/{rel}")
    from pydoc_data.topics import topics

    ids |= {f"pydoc-topics/{k}" for k, v in topics.items() if v.strip()}
    return ids


# ------------------------------------------------------------------ embedded corpus, split
def test_embedded_split_is_deterministic_disjoint_and_covering(full_corpus):
    again = load_corpus()
    assert [d.id for d in again.train] == [d.id for d in full_corpus.train]
    assert [d.id for d in again.val] == [d.id for d in full_corpus.val]
    assert again.fingerprint == full_corpus.fingerprint

    train_ids = {d.id for d in full_corpus.train}
    val_ids = {d.id for d in full_corpus.val}
    assert not train_ids & val_ids
    assert train_ids | val_ids == _expected_stdlib_ids()
    assert not any(re.search(r"/(test[^/]*|idle_test|site-packages|__pycache__)/", i) for i in train_ids | val_ids)

    # the SHA-1 rule: u < 0.05 -> val; the only exceptions are forced per-source minimums
    every = full_corpus.train + full_corpus.val
    assert all(d.id in val_ids for d in every if _u(d.id) < 0.05)
    forced = [d for d in full_corpus.val if _u(d.id) >= 0.05]
    assert len({d.source for d in forced}) == len(forced)
    assert 0.02 < len(val_ids) / len(every) < 0.1
    val_sources = {d.source for d in full_corpus.val}
    assert "stdlib-code" in val_sources and val_sources & PROSE_SOURCES
    # listed in hash order, not filesystem order
    assert [d.id for d in full_corpus.train] == sorted(train_ids, key=lambda i: (_u(i), i))


def test_composition_matches_documents(full_corpus):
    comp = full_corpus.composition
    rows = comp.to_rows()
    for split, docs in (("train", full_corpus.train), ("val", full_corpus.val)):
        mine = [r for r in rows if r["split"] == split]
        assert sum(r["share"] for r in mine) == pytest.approx(1.0)
        for r in mine:
            of_source = [d for d in docs if d.source == r["source"]]
            assert r["documents"] == len(of_source)
            assert r["bytes"] == sum(len(d.text.encode("utf-8")) for d in of_source)
        assert {r["source"] for r in mine} == {d.source for d in docs}
    assert {r["source"] for r in rows} == {"stdlib-code", "stdlib-text", "pydoc-topics"}
    assert comp.meta["python_version"] == platform.python_version()
    md = comp.to_markdown()
    assert "`pydoc-topics`" in md and "**total**" in md and platform.python_version() in md


def test_max_bytes_caps_deterministically(full_corpus, small_corpus):
    again = load_corpus(max_bytes=SMALL_BYTES)
    assert again.fingerprint == small_corpus.fingerprint != full_corpus.fingerprint
    total = sum(d.n_bytes for d in small_corpus.train + small_corpus.val)
    assert 0.8 * SMALL_BYTES < total <= SMALL_BYTES
    # a subset of the uncapped split: capping never moves a document across splits
    assert {d.id for d in small_corpus.train} <= {d.id for d in full_corpus.train}
    assert {d.id for d in small_corpus.val} <= {d.id for d in full_corpus.val}
    val_sources = {d.source for d in small_corpus.val}
    assert "stdlib-code" in val_sources and val_sources & PROSE_SOURCES
    assert small_corpus.composition.meta["max_bytes"] == SMALL_BYTES
    with pytest.raises(DataError, match=r"embedded: max_bytes=2000 leaves the val split 100 bytes"):
        load_corpus(max_bytes=2000)


# ------------------------------------------------------------------ user files
def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_user_files_load(tmp_path):
    d = tmp_path / "data"
    (d / "web").mkdir(parents=True)
    (d / "code").mkdir()
    (d / "web" / "a.txt").write_text("First essay.\n\nWith a second paragraph.\n")
    (d / "web" / "b.txt").write_text("Story one.<|endoftext|>Story two, ünïcode.\n")
    _write_jsonl(d / "code" / "x.jsonl", [{"content": "def f():\n    return 1\n"}, {"content": "x = 2\n"}])
    pq.write_table(
        pa.table({"text": ["row zero", None, "row two"], "source": ["books", "books", "news"]}),
        d / "p.parquet",
    )
    (d / "notes.csv").write_text("ignored,file\n")

    # a single jsonl file with a custom field
    c = load_corpus(str(d / "code" / "x.jsonl"), text_field="content")
    assert sorted(doc.id for doc in c.train + c.val) == ["x.jsonl:1", "x.jsonl:2"]
    assert c.name == str(d / "code" / "x.jsonl") and len(c.train) == len(c.val) == 1

    # a single parquet file: nulls skipped, source column used
    c = load_corpus(str(d / "p.parquet"))
    docs = {doc.id: doc for doc in c.train + c.val}
    assert set(docs) == {"p.parquet:0", "p.parquet:2"}
    assert docs["p.parquet:2"].source == "news" and docs["p.parquet:0"].text == "row zero"

    # the directory: recursive, sorted, txt whole unless split on <|endoftext|>
    with pytest.raises(DataError, match=r"code/x\.jsonl:1: record has no field 'text' \(fields: content"):
        load_corpus(str(d))
    (d / "code" / "x.jsonl").unlink()
    _write_jsonl(d / "code" / "x.jsonl", [{"text": "def f():\n    return 1\n"}, {"text": "x = 2\n"}])
    c = load_corpus(str(d), val_fraction=0.3)
    docs = {doc.id: doc for doc in c.train + c.val}
    assert set(docs) == {
        "code/x.jsonl:1", "code/x.jsonl:2", "p.parquet:0", "p.parquet:2",
        "web/a.txt", "web/b.txt#0", "web/b.txt#1",
    }
    assert docs["web/a.txt"].text == "First essay.\n\nWith a second paragraph.\n"
    assert docs["web/b.txt#1"].text == "Story two, ünïcode."
    assert docs["code/x.jsonl:1"].source == "code" and docs["web/a.txt"].source == "web"
    assert docs["p.parquet:0"].source == "books"
    assert not {doc.id for doc in c.train} & {doc.id for doc in c.val}
    rows = c.composition.to_rows()
    assert sum(r["bytes"] for r in rows) == sum(doc.n_bytes for doc in docs.values())


@pytest.mark.parametrize(
    "case, expect",
    [
        ("missing", "no such file"),
        ("empty_txt", "no text"),
        ("blank_txt", "no text"),
        ("jsonl_no_field", "no field 'text'"),
        ("jsonl_bad_json", "not valid JSON"),
        ("parquet_no_column", "no column 'text'"),
        ("dir_no_usable", "no usable files"),
        ("empty_dir", "no usable files"),
        ("dir_with_empty_file", "no text"),
        ("one_document", "at least two"),
        ("bad_suffix", "unsupported file type"),
    ],
)
def test_bad_inputs_raise_data_error_naming_path(tmp_path, case, expect):
    p = tmp_path / case
    named = p
    if case == "missing":
        pass
    elif case == "empty_txt":
        p = named = tmp_path / "empty.txt"
        p.write_text("")
    elif case == "blank_txt":
        p = named = tmp_path / "blank.txt"
        p.write_text("\n  \n\t\n")
    elif case == "jsonl_no_field":
        p = named = tmp_path / "x.jsonl"
        _write_jsonl(p, [{"body": "hello"}])
    elif case == "jsonl_bad_json":
        p = named = tmp_path / "x.jsonl"
        p.write_text('{"text": "ok"}\n{"text": \n')
    elif case == "parquet_no_column":
        p = named = tmp_path / "x.parquet"
        pq.write_table(pa.table({"body": ["a", "b"]}), p)
    elif case == "dir_no_usable":
        p.mkdir()
        (p / "a.csv").write_text("a,b\n")
        (p / "sub").mkdir()
        (p / "sub" / "b.md").write_text("# hi\n")
    elif case == "empty_dir":
        p.mkdir()
    elif case == "dir_with_empty_file":
        p.mkdir()
        (p / "good.txt").write_text("some text")
        named = p / "zz_empty.txt"
        named.write_text("")
    elif case == "one_document":
        p = named = tmp_path / "one.txt"
        p.write_text("just one document")
    elif case == "bad_suffix":
        p = named = tmp_path / "x.csv"
        p.write_text("a,b\n")
        with pytest.raises(DataError, match=re.escape(str(named))) as info:
            from mhar_probe.data.files import read_file

            read_file(p, p.name, "x")
        assert expect in str(info.value)
        return
    with pytest.raises(DataError, match=re.escape(str(named))) as info:
        load_corpus(str(p))
    assert expect in str(info.value)
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------ tokenizer
TEXTS = [
    "def f(x: int) -> int:\n    \"\"\"Double.\"\"\"\n\treturn 2 * x  # trailing   \n\n",
    "The quick brown fox jumps over the lazy dog. It's 3:15pm -- isn't it?",
    "Ünïcödé: naïve café, 日本語のテキスト, 🎉🐍, e\u0301, Ω≈ç√∫, \r\n windows line\r\n",
    "  leading spaces and   runs\u00a0nbsp \x00 control \x7f",
]


def test_tokenizer_round_trips_and_special_tokens(small_tok):
    tok = small_tok
    assert len(tok) == SMALL_VOCAB
    assert tok.eos_token == EOS_TOKEN and tok.eos_token_id == 0
    assert tok.convert_tokens_to_ids(EOS_TOKEN) == 0
    assert tok.pad_token_id == 0 and tok.bos_token is None
    for text in TEXTS:
        ids = tok.encode(text)
        assert 0 not in ids  # no special tokens added
        assert tok.decode(ids) == text
        assert max(ids) < SMALL_VOCAB
    assert tok.encode("a" + EOS_TOKEN + "b") == tok.encode("a") + [0] + tok.encode("b")


def test_tokenizer_cache_hit_does_not_retrain(small_corpus, monkeypatch, tmp_path):
    calls = []
    real = tokenizer_mod._train_bpe
    monkeypatch.setattr(tokenizer_mod, "_train_bpe", lambda docs, v: calls.append(v) or real(docs, v))
    first = get_tokenizer(small_corpus, vocab_size=512)
    assert calls == [512]
    where = tokenizer_mod.tokenizer_dir(small_corpus, 512)
    assert where.parent == tmp_path / "cache" / "tokenizers"
    assert where.name == f"{small_corpus.fingerprint}-512"
    mtime = (where / "tokenizer.json").stat().st_mtime_ns
    meta = json.loads((where / tokenizer_mod.META_FILE).read_text())
    assert meta["vocab_size"] == 512 and meta["corpus_fingerprint"] == small_corpus.fingerprint

    second = get_tokenizer(small_corpus, vocab_size=512)
    assert calls == [512]
    assert (where / "tokenizer.json").stat().st_mtime_ns == mtime
    assert tokenizer_fingerprint(second) == tokenizer_fingerprint(first)
    assert second.get_vocab() == first.get_vocab()
    # no temporary directories left behind
    assert [p.name for p in where.parent.iterdir()] == [where.name]


def test_load_tokenizer_from_disk_and_errors(small_tok, tmp_path):
    saved = tmp_path / "saved"
    small_tok.save_pretrained(str(saved))
    loaded = load_tokenizer(saved)
    assert tokenizer_fingerprint(loaded) == tokenizer_fingerprint(small_tok)
    assert loaded.eos_token_id == 0 and loaded.pad_token_id == 0
    from_file = load_tokenizer(saved / "tokenizer.json")
    assert from_file.encode(TEXTS[2]) == small_tok.encode(TEXTS[2])

    missing = tmp_path / "missing"
    with pytest.raises(DataError, match=re.escape(str(missing))):
        load_tokenizer(missing)
    not_tok = tmp_path / "not_a_tokenizer"
    not_tok.mkdir()
    (not_tok / "readme.txt").write_text("hello")
    with pytest.raises(DataError, match=re.escape(str(not_tok)) + ".*not a Hugging Face tokenizer"):
        get_tokenizer(None, path=str(not_tok))  # type: ignore[arg-type]


# ------------------------------------------------------------------ packing
def test_tokenize_and_pack_match_independent_stream(small_corpus, small_tok):
    docs = small_corpus.val
    ids = tokenize_split(docs, small_tok)
    expected: list[int] = []
    for doc in docs:
        expected += small_tok(doc.text, add_special_tokens=False)["input_ids"] + [small_tok.eos_token_id]
    assert ids.dtype == np.uint16 and ids.tolist() == expected
    assert int((ids == 0).sum()) == len(docs)  # eos only at document ends: no padding

    seq_len = 63
    rows = pack_tokens(ids, seq_len)
    assert rows.dtype == torch.long and rows.shape == (len(expected) // (seq_len + 1), seq_len + 1)
    for m in range(rows.shape[0]):
        assert rows[m].tolist() == expected[m * (seq_len + 1) : (m + 1) * (seq_len + 1)]
    # the dropped tail is shorter than one row
    assert len(expected) - rows.numel() < seq_len + 1
    # eos boundaries inside the rows sit exactly where documents end
    ends = np.cumsum([len(small_tok.encode(d.text)) + 1 for d in docs]) - 1
    flat = rows.flatten().numpy()
    assert set(np.flatnonzero(flat == 0)) == {e for e in ends if e < flat.size}


def test_load_packed_caches_token_array(small_corpus, small_tok, monkeypatch, tmp_path):
    rows = load_packed(small_corpus, small_tok, 127, "train")  # [M, 128]
    direct = pack_tokens(tokenize_split(small_corpus.train, small_tok), 127)
    assert torch.equal(rows, direct)
    cached = list((tmp_path / "cache" / "tokens").glob("*-train.npy"))
    assert len(cached) == 1 and cached[0].name.startswith(small_corpus.fingerprint[:24])

    def boom(*_):
        raise AssertionError("re-tokenized despite cache")

    monkeypatch.setattr(packing_mod, "_plain_backend", boom)
    assert torch.equal(load_packed(small_corpus, small_tok, 127, "train"), rows)
    assert load_packed(small_corpus, small_tok, 255, "train").shape[1] == 256  # same array, new seq_len


def test_too_few_tokens_for_one_row(tmp_path, small_tok):
    path = tmp_path / "tiny.jsonl"
    _write_jsonl(path, [{"text": "hello world"}, {"text": "goodbye"}])
    corpus = load_corpus(str(path))
    n = len(tokenize_split(corpus.val, small_tok))
    with pytest.raises(DataError, match=re.escape(str(path))) as info:
        load_packed(corpus, small_tok, 1024, "val")
    msg = str(info.value)
    assert f"only {n} tokens" in msg and "1025" in msg and "val split" in msg
    with pytest.raises(DataError, match="only 3 tokens"):
        pack_tokens(np.array([1, 2, 0], dtype=np.uint16), 3)
    assert pack_tokens(np.arange(9), 3).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_document_bytes():
    assert Document("a", "s", "héllo").n_bytes == 6


# ------------------------------------------------------------------ full scale
@pytest.mark.slow
def test_full_embedded_corpus_and_4096_tokenizer(full_corpus):
    start = time.perf_counter()
    tok = get_tokenizer(full_corpus, vocab_size=4096)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    ids = tokenize_split(full_corpus.train, tok)
    tok_s = time.perf_counter() - start
    n_bytes = full_corpus.composition.totals("train")[1]
    print(
        f"\nembedded train: {len(full_corpus.train)} docs, {n_bytes:,} bytes; "
        f"BPE 4096 trained in {train_s:.2f}s; {len(ids):,} tokens "
        f"({len(ids) / n_bytes:.3f} tokens/byte) in {tok_s:.2f}s"
    )
    assert len(tok) == 4096 and tok.eos_token_id == 0
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
    assert 0.15 < len(ids) / n_bytes < 0.5
