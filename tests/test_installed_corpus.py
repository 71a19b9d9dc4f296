"""The `installed` corpus reads distributions' RECORDs: one document per text file, sources tagged
package==version, exact duplicates, large, binary and generated files and this project left out."""

from __future__ import annotations

import pytest

from mhar_probe.data import load as corpus_mod
from mhar_probe.data import load_corpus
from mhar_probe.data.installed import MAX_FILE_BYTES, scan_installed


def _dist(site, name: str, version: str, files: dict[str, bytes], listed_only: tuple[str, ...] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    rows = [*files, *listed_only, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in rows))


@pytest.fixture()
def site(tmp_path):
    _dist(tmp_path, "Alpha_Pkg", "1.2", {
        "alpha/__init__.py": b"def f():\n    return 1\n",
        "alpha/README.md": b"# Alpha\nsome prose\n",
        "alpha/vendored.py": b"shared = True\n",
        "alpha/data.bin": b"\x00\x01",  # not a text suffix
        "alpha/latin.txt": "caf\xe9\n".encode("latin-1"),  # not UTF-8
        "alpha/table.py": b"x = [" + b"1, " * 400 + b"]\n",  # one 1,200-character line: generated
        "alpha/big.txt": b"line\n" * (MAX_FILE_BYTES // 5 + 1),
    }, listed_only=("alpha/missing.py",))
    _dist(tmp_path, "beta", "0.3", {"beta/core.h": b"int beta(void);\n", "beta/copy.py": b"shared = True\n"})
    _dist(tmp_path, "mhar-probe", "0.1.0", {"mhar_probe/x.py": b"print('own code')\n"})
    return tmp_path


def test_documents_sources_and_what_is_left_out(site):
    scan = scan_installed((str(site),), include_stdlib=False)
    ids = {d.id: d for d in scan.documents}
    assert sorted(ids) == ["alpha-pkg/alpha/README.md", "alpha-pkg/alpha/__init__.py",
                           "alpha-pkg/alpha/vendored.py", "beta/beta/core.h"]
    assert ids["alpha-pkg/alpha/__init__.py"].source == "alpha-pkg==1.2"
    assert ids["beta/beta/core.h"].source == "beta==0.3"
    assert (scan.packages, scan.skipped_large, scan.skipped_binary, scan.skipped_generated, scan.duplicates) == (
        2, 1, 1, 1, 1)  # beta/copy.py repeats alpha/vendored.py: the first package in name order keeps it
    assert "1 exact duplicates" in scan.meta()["files_left_out"]


def test_load_corpus_installed_records_the_scan(site, monkeypatch):
    scan = scan_installed((str(site),), include_stdlib=False)
    monkeypatch.setattr(corpus_mod, "scan_installed", lambda: scan)
    corpus = load_corpus("installed")
    assert corpus.name == "installed" and corpus.composition.meta["packages"] == 2
    assert {r.source for r in corpus.composition.rows} == {"alpha-pkg==1.2", "beta==0.3"}
    assert len(corpus.train) + len(corpus.val) == 4


def test_the_cli_accepts_named_corpora_and_refuses_missing_paths():
    from mhar_probe.cli.args import check_corpus
    from mhar_probe.errors import UserError

    check_corpus("installed")
    check_corpus("embedded")
    check_corpus(None)
    with pytest.raises(UserError, match="does not exist .*embedded, installed"):
        check_corpus("no/such/corpus.jsonl")
