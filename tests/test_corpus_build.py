"""The study corpus builder (issue 33): extraction of each package format, paragraph dedup across
sources, the document-level held-out split, the composition counts, and loading the built folder
(its own split and tokenizer) -- all on small fake packages, no network."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from mhar_probe.data import extract
from mhar_probe.data.build import MANIFEST, build_corpus
from mhar_probe.data.corpus import hash_unit
from mhar_probe.data.load import load_corpus
from mhar_probe.data.dedup import dedup_paragraphs, looks_like_code, normalise
from mhar_probe.data.document import Document
from mhar_probe.data.errors import DataError
from mhar_probe.data.sources import Source, read_source
from mhar_probe.data.tokenizer import get_tokenizer, load_tokenizer, tokenizer_fingerprint

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- extraction

def test_html_to_text_drops_chrome_and_keeps_pre_lines():
    html = ("<html><head><title>T</title><style>p{}</style></head><body><nav>Prev Next</nav>"
            "<h1>Intro</h1><p>One  <b>bold</b>\n word &amp; more.</p><script>var x=1;</script>"
            "<pre>line 1\n  line 2</pre><ul><li>item a</li><li>item b</li></ul></body></html>")
    assert extract.html_to_text(html) == "Intro\n\nOne bold word & more.\n\nline 1\n  line 2\n\nitem a\n\nitem b"


def test_pod_to_text():
    pod = ("=head1 NAME\n\nperlfoo - B<bold> and C<code> with L<perlsyn/Loops> X<index>\n\n"
           "  verbatim $x = 1;\n\n=begin html\n\n<p>skip</p>\n\n=end html\n\n=cut\n\nsub hidden {}\n\n"
           "=pod\n\nBack E<lt>here E<gt>.\n")
    assert extract.pod_to_text(pod) == "NAME\n\nperlfoo - bold and code with Loops\n\n  verbatim $x = 1;\n\nBack <here >."


def _b64(n: int) -> str:
    digits = ""
    while True:
        digits = extract._B64[n % 64] + digits
        n //= 64
        if n == 0:
            return digits


def _dict_files(entries: list[str]) -> tuple[str, bytes]:
    data, index, pos = b"", [f"00-database-info\t{_b64(0)}\t{_b64(5)}"], 0
    data += b"info\n"
    pos = len(data)
    for k, entry in enumerate(entries):
        raw = entry.encode() + b"\n"
        index.append(f"word{k}\t{_b64(pos)}\t{_b64(len(raw))}")
        index.append(f"alias{k}\t{_b64(pos)}\t{_b64(len(raw))}")  # a second headword, same entry
        data += raw
        pos += len(raw)
    return "\n".join(index) + "\n", data


def test_dict_entries_one_per_span_without_header():
    index, data = _dict_files(["apple\n   A fruit.", "bear\n   An animal."])
    assert extract.dict_entries(index, data) == ["apple\n   A fruit.", "bear\n   An animal."]
    assert extract.dict_b64("BA") == 64


def test_small_formats():
    assert extract.brown_to_text("\n\n\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n\tIt/pps ran/vbd ./.\n") \
        == 'The jury said "no".\n\nIt ran.'
    osis = ('<div type="book" sID="b1"/><title type="main">Genesis</title><div sID="p1" type="x-p"/>'
            '<w lemma="s:1">In</w> the <w>beginning</w><note placement="foot">a note</note>.<div sID="p2" type="x-p"/>Next.')
    assert extract.osis_to_text(osis) == "Genesis\n\nIn the beginning.\n\nNext."
    wn = "  1 This software and database is licensed\n00001740 03 n 02 entity 0 thing(a) 0 000 | that which is  \n"
    assert extract.wordnet_glosses(wn) == ["entity, thing: that which is"]
    assert extract.fortune_entries("One.\n%\nTwo\n  -- me\n%\n") == ["One.", "Two\n  -- me"]
    pg = "header\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\nBody.\n\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nlicence"
    assert extract.strip_gutenberg(pg) == "Body."


def _r_strsxp(strings: list[str | None]) -> bytes:
    """An R serialization (XDR, version 2) of a character vector, as R writes it."""
    out = b"X\n" + struct.pack(">iii", 2, 0x040200, 0x020300) + struct.pack(">ii", 16, len(strings))
    for s in strings:
        if s is None:
            out += struct.pack(">ii", 9, -1)
        else:
            raw = s.encode()
            out += struct.pack(">ii", 0x40009, len(raw)) + raw
    return out


def test_r_lazyload_vectors():
    blobs = [_r_strsxp(["EMMA", None, "By Jane Austen"]), b"X\n" + struct.pack(">iii", 2, 0, 0) + struct.pack(">i", 14),
             _r_strsxp(["second"])]
    rdb = b"".join(struct.pack(">i", len(b)) + zlib.compress(b) for b in blobs)
    assert extract.r_lazyload_vectors(rdb) == [["EMMA", "", "By Jane Austen"], ["second"]]  # the REALSXP skipped


# ----------------------------------------------------------------------------- dedup

def test_dedup_removes_repeats_across_sources_keeps_short_ones():
    long_a = "The quick brown fox jumps over the lazy dog, twice over."
    docs = [Document("a/1", "a", f"Title\n\n{long_a}\n\nOwn text of a, long enough to count."),
            Document("b/1", "b", f"Title\n\n{long_a.upper()}  \n\nOwn text of b, long enough to count."),
            Document("b/2", "b", f"  {long_a}")]
    out, stats = dedup_paragraphs(docs)
    assert [d.text for d in out] == [docs[0].text, "Title\n\nOwn text of b, long enough to count."]
    assert stats.paragraphs_removed == {"b": 2} and stats.documents_emptied == {"b": 1}
    assert stats.bytes_removed["b"] == len(long_a.upper() + "  ") + len("  " + long_a)
    assert normalise("  A\tb \n C ") == "a b c"


def test_code_heuristic():
    assert looks_like_code("for (i = 0; i < n; i++) { a[i] = b[i] * 2; }")
    assert looks_like_code("$ git status\n$ git add -p")
    assert not looks_like_code("It was the best of times, it was the worst of times.")


# ----------------------------------------------------------------------------- the builder

BOOK = ("*** START OF THE PROJECT GUTENBERG EBOOK B ***\n\nChapter {k}\n\n{shared}\n\n"
        "Paragraph {k} of the book, with its own words about the number {k} and more.\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK B ***\n")
SHARED = "A paragraph that both the books and the manual carry, word for word, to be removed once."


def _tgz(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


FAKE_SOURCES = (
    Source("books", "npm", "fake-books", "CC0", "prose", "gutenberg", ("package/texts/*.txt",)),
    Source("manual", "pypi", "fake-manual", "MIT", "docs", "html", ("*/html/*.html",)),
    Source("words", "npm", "fake-dict", "public domain", "prose", "dict", ("package/*.dict.dz",)),
)


@pytest.fixture()
def fake_work(tmp_path, monkeypatch):
    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    dl = tmp_path / "work" / "downloads"
    dl.mkdir(parents=True)
    _tgz(dl / "fake-books-1.2.0.tgz", {f"package/texts/b{k:02d}.txt": BOOK.format(k=k, shared=SHARED).encode()
                                        for k in range(40)})
    pages = {f"fake-manual-2.0/html/p{k:02d}.html":
             (f"<html><body><nav>Prev Up Next</nav><h1>Page {k}</h1><p>{SHARED}</p><p>Manual page {k} "
              f"explains <code>f({k})</code> at length, in words of its own.</p>"
              f"<pre>x = f({k});\ny = [x] * {k};</pre></body></html>").encode() for k in range(30)}
    _tgz(dl / "fake-manual-2.0.tar.gz", pages)
    index, data = _dict_files([f"word{k}\n   Meaning number {k} of the fake dictionary." for k in range(20)])
    _tgz(dl / "fake-dict-0.9.tgz", {"package/fake.index": index.encode(), "package/fake.dict.dz": gzip.compress(data)})
    return tmp_path


def test_build_dedups_splits_by_document_and_counts(fake_work):
    out = fake_work / "corpus"
    manifest = build_corpus(out, FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25, vocab_size=300,
                            log=lambda m: None)
    rows = {r["source"]: r for r in json.loads((out / "composition.json").read_text())}
    assert {k: (r["package"], r["version"], r["licence"]) for k, r in rows.items()} == {
        "books": ("fake-books", "1.2.0", "CC0"), "manual": ("fake-manual", "2.0", "MIT"),
        "words": ("fake-dict", "0.9", "public domain")}
    # the shared paragraph stays in the first book (path order) and leaves the other 39 books and 30 pages
    assert rows["books"]["paragraphs_removed"] == 39 and rows["manual"]["paragraphs_removed"] == 30
    assert rows["words"]["paragraphs_removed"] == 0
    shards = {split: [json.loads(line) for f in sorted((out / split).glob("*.jsonl"))
                      for line in f.read_text().splitlines()] for split in ("train", "val")}
    texts = [r["text"] for split in shards.values() for r in split]
    assert sum(t.count(SHARED) for t in texts) == 1  # once in the whole corpus
    assert "Prev Up Next" not in "".join(texts) and "y = [x] * 3;" in "".join(texts)
    ids = {split: {r["id"] for r in recs} for split, recs in shards.items()}
    assert not ids["train"] & ids["val"] and len(ids["train"] | ids["val"]) == 40 + 30 + 1
    for rec in shards["val"]:  # held out by the hash of its id (stratified: only forced moves differ)
        if rec["source"] != "words":
            assert hash_unit(rec["id"]) < 0.25 or rec["id"] == min(
                (r["id"] for r in shards["val"] if r["source"] == rec["source"]), key=hash_unit)
    for split in ("train", "val"):
        recs = shards[split]
        assert manifest["documents"][split] == len(recs)
        assert manifest["bytes"][split] == sum(len(r["text"].encode()) for r in recs)
        for name, row in rows.items():
            mine = [r for r in recs if r["source"] == name]
            assert row[f"{split}_documents"] == len(mine)
            assert row[f"{split}_bytes"] == sum(len(r["text"].encode()) for r in mine)
    tok = load_tokenizer(out / "tokenizer")
    assert manifest["train_tokens"] == sum(len(tok(r["text"])["input_ids"]) + 1 for r in shards["train"])
    assert rows["manual"]["code_bytes"] > 0 and rows["books"]["code_bytes"] == 0
    md = (out / "composition.md").read_text()
    assert "| books | npm | `fake-books` | 1.2.0 | CC0 | prose |" in md and "look like code" in md
    with pytest.raises(DataError, match="already exists"):
        build_corpus(out, FAKE_SOURCES, fake_work / "work", fetch=False, vocab_size=300)


def test_built_folder_loads_with_its_split_and_tokenizer(fake_work):
    out = fake_work / "corpus"
    build_corpus(out, FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25, vocab_size=300,
                 log=lambda m: None)
    corpus = load_corpus(str(out))
    val_ids = {json.loads(line)["id"] for f in (out / "val").glob("*.jsonl") for line in f.read_text().splitlines()}
    assert {d.id for d in corpus.val} == val_ids
    shipped = load_tokenizer(out / "tokenizer")
    assert tokenizer_fingerprint(get_tokenizer(corpus, vocab_size=300)) == tokenizer_fingerprint(shipped)
    assert corpus.fingerprint == json.loads((out / MANIFEST).read_text())["fingerprint"]
    shard = next((out / "train").glob("*.jsonl"))
    shard.write_text(shard.read_text().replace("Paragraph", "Paragraf"))
    with pytest.raises(DataError, match="do not match the fingerprint"):
        load_corpus(str(out))


def test_read_source_groups_dictionary_entries(fake_work, monkeypatch):
    import mhar_probe.data.sources as sources_mod

    monkeypatch.setattr(sources_mod, "ENTRY_DOC_BYTES", 200)
    root = fake_work / "dict"
    with tarfile.open(fake_work / "work" / "downloads" / "fake-dict-0.9.tgz") as tar:
        tar.extractall(root, filter="data")
    docs = read_source(FAKE_SOURCES[2], root)
    assert len(docs) > 1 and all(d.id.startswith("words/package/fake.dict.dz#") for d in docs)
    assert sum(d.text.count("Meaning number") for d in docs) == 20


def test_cli_refuses_missing_archive_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mhar_probe.cli", "corpus", "build", "--out", str(tmp_path / "c"),
                           "--work", str(tmp_path / "w"), "--no-fetch", "--sources", "devil"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no archive dict-devil_" in proc.stderr
    assert not (tmp_path / "c").exists()


def test_a_run_records_its_corpus_tokenizer_and_epochs(fake_work):
    from mhar_probe.train import TrainConfig, train

    out = fake_work / "corpus"
    manifest = build_corpus(out, FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25, vocab_size=300,
                            log=lambda m: None)
    run = fake_work / "run"
    summary = train(TrainConfig(out=str(run), preset="tiny", method="baseline", steps=3, batch_size=2, seq_len=32,
                                eval_every=3, eval_batches=1, corpus=str(out), corpus_max_bytes=None, vocab_size=300,
                                progress=False, device="cpu"))
    corpus = json.loads((run / "corpus.json").read_text())
    assert corpus["fingerprint"] == manifest["fingerprint"] == summary["corpus_fingerprint"]
    assert corpus["tokenizer_fingerprint"] == tokenizer_fingerprint(load_tokenizer(out / "tokenizer"))
    rows = manifest["train_tokens"] // 33  # packed rows of T + 1 = 33 tokens, each giving 32 positions
    assert corpus["train_tokens"] == summary["train_tokens"] == rows * 32
    assert summary["epochs"] == pytest.approx(3 * 2 * 32 / (rows * 32))


# ----------------------------------------------------------------------------- the corpus lock

#: A stand-in for the three registry clients (installed as `npm`, `pip` and `apt-get` on PATH):
#: it parses their real command lines and serves archives from $FAKE_REGISTRY, failing as the
#: clients do when the version asked for is not there.
FAKE_CLIENT = r'''
import os, shutil, sys
from pathlib import Path
tool, args = Path(sys.argv[0]).name, sys.argv[1:]
registry = Path(os.environ["FAKE_REGISTRY"])
if tool == "npm":
    assert args[0] == "pack" and args[2] == "--pack-destination"
    name, _, version = args[1].partition("@"); dest = Path(args[3]); pattern = "{}-{}.tgz"
elif tool == "pip":
    assert args[:5] == ["download", "--no-deps", "--no-binary", ":all:", "-d"]
    name, _, version = args[6].partition("=="); dest = Path(args[5]); pattern = "{}-{}.tar.gz"
else:
    assert args[0] == "download"
    name, _, version = args[1].partition("="); dest = Path.cwd(); pattern = "{}_{}_all.deb"
    version = version.replace(":", "%3a")
found = sorted(registry.glob(pattern.format(name, version or "[0-9]*")))
if not found:
    print(f"ERR! 404 No matching version found for {name}@{version}", file=sys.stderr)
    sys.exit(1)
shutil.copy(found[-1], dest / found[-1].name)
'''


@pytest.fixture()
def fake_registry(tmp_path, monkeypatch):
    """A folder of archives served by fake `npm` / `pip` / `apt-get` clients first on PATH."""
    registry, bin_dir = tmp_path / "registry", tmp_path / "bin"
    registry.mkdir()
    bin_dir.mkdir()
    for tool in ("npm", "pip", "apt-get"):
        exe = bin_dir / tool
        exe.write_text(f"#!{sys.executable}\n{FAKE_CLIENT}")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_REGISTRY", str(registry))
    return registry


def _lock_fake(fake_work) -> tuple[Path, dict]:
    """Lock the fake sources from the archives in the work folder (an --update-lock without fetching)."""
    lock = fake_work / "lock.json"
    manifest = build_corpus(fake_work / "locked", FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25,
                            vocab_size=300, lock=lock, update_lock=True, log=lambda m: None)
    return lock, manifest


def test_update_lock_pins_each_archive_and_the_fingerprints_it_gave(fake_work):
    lock, manifest = _lock_fake(fake_work)
    raw = json.loads(lock.read_text())
    dl = fake_work / "work" / "downloads"
    assert raw["sources"]["books"] == dict(registry="npm", package="fake-books", version="1.2.0",
                                           archive="fake-books-1.2.0.tgz",
                                           sha256=hashlib.sha256((dl / "fake-books-1.2.0.tgz").read_bytes()).hexdigest())
    assert raw["sources"]["manual"]["version"] == "2.0" and raw["sources"]["words"]["archive"] == "fake-dict-0.9.tgz"
    assert raw["corpus"]["fingerprint"] == manifest["fingerprint"] and manifest["lock"] == "updated"
    assert raw["corpus"]["tokenizer_fingerprint"] == tokenizer_fingerprint(load_tokenizer(fake_work / "locked" / "tokenizer"))
    assert raw["corpus"]["sources"] == ["books", "manual", "words"] and raw["corpus"]["val_fraction"] == 0.25
    # the locked build takes exactly those archives and reproduces the fingerprints
    again = build_corpus(fake_work / "again", FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25,
                         vocab_size=300, lock=lock, log=lambda m: None)
    assert again["lock"] == "verified" and again["fingerprint"] == manifest["fingerprint"]
    # other settings: archives still verified, the corpus not compared
    other = build_corpus(fake_work / "other", FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.3,
                         vocab_size=300, lock=lock, log=lambda m: None)
    assert other["lock"] == "archives verified"


@pytest.mark.parametrize("key", ["fingerprint", "tokenizer_fingerprint"])
def test_locked_build_refuses_another_fingerprint_and_writes_nothing(fake_work, key):
    lock, _ = _lock_fake(fake_work)
    raw = json.loads(lock.read_text())
    raw["corpus"][key] = "0" * 64
    lock.write_text(json.dumps(raw))
    what = "corpus" if key == "fingerprint" else "tokenizer"
    with pytest.raises(DataError, match=f"the {what} fingerprint .* is not the 000000000000… that .*lock.json records"):
        build_corpus(fake_work / "c2", FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25,
                     vocab_size=300, lock=lock, log=lambda m: None)
    assert not (fake_work / "c2").exists()


def test_locked_build_refuses_a_changed_archive(fake_work):
    lock, _ = _lock_fake(fake_work)
    _tgz(fake_work / "work" / "downloads" / "fake-books-1.2.0.tgz",
         {"package/texts/b00.txt": BOOK.format(k=0, shared="Another text under the same name.").encode()})
    with pytest.raises(DataError) as err:
        build_corpus(fake_work / "c2", FAKE_SOURCES, fake_work / "work", fetch=False, val_fraction=0.25,
                     vocab_size=300, lock=lock, log=lambda m: None)
    assert "books:" in str(err.value) and "a changed archive is refused" in str(err.value)
    assert "\n" not in str(err.value) and not (fake_work / "c2").exists()


def test_locked_build_fetches_the_pinned_version_and_names_a_gone_one(fake_work, fake_registry):
    lock, _ = _lock_fake(fake_work)
    dl = fake_work / "work" / "downloads"
    for archive in dl.glob("*"):  # the registry has the locked versions and a newer fake-books
        shutil.copy(archive, fake_registry / archive.name)
    _tgz(fake_registry / "fake-books-1.3.0.tgz", {"package/texts/new.txt": BOOK.format(k=99, shared="New.").encode()})
    (dl / "fake-books-1.2.0.tgz").unlink()
    build_corpus(fake_work / "c2", FAKE_SOURCES, fake_work / "work", fetch=True, val_fraction=0.25, vocab_size=300,
                 lock=lock, log=lambda m: None)
    assert (dl / "fake-books-1.2.0.tgz").exists() and not (dl / "fake-books-1.3.0.tgz").exists()
    (dl / "fake-books-1.2.0.tgz").unlink()
    (fake_registry / "fake-books-1.2.0.tgz").unlink()  # the locked version is gone from the registry
    with pytest.raises(DataError) as err:
        build_corpus(fake_work / "c3", FAKE_SOURCES, fake_work / "work", fetch=True, val_fraction=0.25,
                     vocab_size=300, lock=lock, log=lambda m: None)
    assert str(err.value).startswith("books: npm package fake-books@1.2.0 could not be fetched (version 1.2.0 may "
                                     "be gone from the registry; `--update-lock` resolves anew")
    assert "\n" not in str(err.value) and not (fake_work / "c3").exists()
    # --update-lock resolves anew: the registry's current fake-books, and the fingerprint it gives
    before = json.loads(lock.read_text())["corpus"]["fingerprint"]
    manifest = build_corpus(fake_work / "c4", FAKE_SOURCES, fake_work / "work", fetch=True, val_fraction=0.25,
                            vocab_size=300, lock=lock, update_lock=True, log=lambda m: None)
    raw = json.loads(lock.read_text())
    assert raw["sources"]["books"]["version"] == "1.3.0" and raw["sources"]["books"]["sha256"] == hashlib.sha256(
        (fake_registry / "fake-books-1.3.0.tgz").read_bytes()).hexdigest()
    assert raw["corpus"]["fingerprint"] == manifest["fingerprint"] != before


def test_cli_build_is_locked_to_the_committed_versions(tmp_path, fake_registry):
    """The real CLI and the committed lock: the client is asked for the pinned version, a gone
    version is named in one line, and an archive whose bytes are not the pinned ones is refused."""
    from mhar_probe.data.lock import DEFAULT_LOCK, load_lock

    pinned = load_lock(DEFAULT_LOCK).sources["devil"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mhar_probe.cli", "corpus", "build", "--out", str(tmp_path / "c"),
           "--work", str(tmp_path / "w"), "--sources", "devil"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert f"dict-devil={pinned.version} could not be fetched (version {pinned.version} may be gone" in proc.stderr
    (fake_registry / pinned.archive).write_bytes(b"not the locked archive")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert f"sha256 {hashlib.sha256(b'not the locked archive').hexdigest()[:16]}…, the lock pins " \
           f"{pinned.sha256[:16]}…; a changed archive is refused" in proc.stderr
    assert not (tmp_path / "c").exists()


def test_committed_lock_pins_every_source_and_the_study_corpus():
    from mhar_probe.data.lock import DEFAULT_LOCK, load_lock
    from mhar_probe.data.sources import SOURCES

    lock = load_lock(DEFAULT_LOCK)
    assert {name: (p.registry, p.package) for name, p in lock.sources.items()} == {
        s.name: (s.registry, s.package) for s in SOURCES}
    assert all(len(p.sha256) == 64 and p.version for p in lock.sources.values())
    study = json.loads((ROOT / "results/study100m/runs/100m-baseline-kv4-lr5e-4-s0-n3815/corpus.json").read_text())
    assert lock.corpus["fingerprint"] == study["fingerprint"]
    assert lock.corpus["tokenizer_fingerprint"] == study["tokenizer_fingerprint"]
    assert lock.expected(dict(sources=[s.name for s in SOURCES], val_fraction=0.02, vocab_size=8192,
                              installed_bytes=0)) is lock.corpus


@pytest.mark.skipif(shutil.which("xz") is None or shutil.which("tar") is None, reason="needs tar and xz")
def test_pack_writes_an_xz_archive_that_unpacks_to_the_folder(tmp_path):
    """`mhar corpus pack`: the folder under its own name, byte for byte, and a non-corpus folder refused
    with nothing written. (Its one-thread choice shows only above xz's 192 MiB block: not tested here.)"""
    from mhar_probe.cli import main

    folder = tmp_path / "corpus-x"
    (folder / "docs").mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"fingerprint": "f" * 12}))
    files = {"docs/a.txt": "the river and the stone\n" * 400, "docs/b.txt": "a lantern by the orchard\n" * 300}
    for name, text in files.items():
        (folder / name).write_text(text)
    out = tmp_path / "packed.tar.xz"
    assert main(["corpus", "pack", "--corpus", str(folder), "--out", str(out)]) == 0
    with tarfile.open(out, "r:xz") as tar:
        got = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    assert got == {f"corpus-x/{k}": v for k, v in files.items()} | {f"corpus-x/{MANIFEST}": (folder / MANIFEST).read_text()}
    (tmp_path / "plain").mkdir()
    assert main(["corpus", "pack", "--corpus", str(tmp_path / "plain"), "--out", str(tmp_path / "p.tar.xz")]) == 2
    assert not list(tmp_path.glob("p.tar.xz*"))
