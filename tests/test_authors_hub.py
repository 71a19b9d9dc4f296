"""`mhar import OWNER/NAME DST`: a Hub id goes through huggingface_hub's own snapshot_download, here
offline. The test builds a Hub cache in huggingface_hub's layout (models--owner--name/ with blobs/,
snapshots/<commit>/ of links into them and refs/main; `scan_cache_dir` must read it as a clean cache)
holding a tiny authors-format checkpoint, and runs `mhar import` in a fresh interpreter with
HF_HUB_CACHE pointing at it and HF_HUB_OFFLINE=1 (huggingface_hub reads both when it is imported).
An id the cache does not hold is refused in one line naming it and saying what to do."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from authors_format import authors_config, random_weights, reference_logits, write_checkpoint

REPO = Path(__file__).resolve().parents[1]
HUB_ID = "wdlctc-test/tiny-attnres"  # owner/name
COMMIT = hashlib.sha1(b"tiny-attnres").hexdigest()  # a commit hash, as the Hub's refs hold
ABSENT_ID = "wdlctc-test/not-cached"


def hub_cache(root: Path, repo_id: str, files: Path, commit: str) -> Path:
    """HF_HUB_CACHE holding `files` as the snapshot of `repo_id` at `commit`, branch main pointing
    to it: each file stored once under blobs/<sha256> and linked from snapshots/<commit>/."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for f in sorted(files.iterdir()):
        blob = hashlib.sha256(f.read_bytes()).hexdigest()
        (repo / "blobs" / blob).write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", blob))
    (repo / "refs" / "main").write_text(commit)
    return root


#: runs `mhar ARGV` for each ARGV of argv[1] (JSON) in this interpreter; prints [[status, stderr], ...]
SCRIPT = """
import contextlib, io, json, sys
from mhar_probe.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        results.append([main(argv), err.getvalue().strip()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imports(tmp_path_factory) -> dict:
    """One fresh interpreter, offline, with a Hub cache holding HUB_ID (its starting costs seconds):
    `mhar import` of HUB_ID, of HUB_ID at its commit, and of an id the cache does not hold."""
    root = tmp_path_factory.mktemp("hub")
    cfg = authors_config("llama", "delta_mh")
    weights = random_weights(cfg, seed=5)
    files = write_checkpoint(root / "src", cfg, weights, shards=2)
    cache = hub_cache(root / "hub", HUB_ID, files, COMMIT)
    runs = {"main": ["import", HUB_ID, str(root / "dst")],
            "commit": ["import", HUB_ID, str(root / "dst-commit"), "--revision", COMMIT],
            "absent": ["import", ABSENT_ID, str(root / "dst-absent")]}
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
           "HF_HOME": str(root / "hf-home")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(list(runs.values()))], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = dict(zip(runs, json.loads(proc.stdout.splitlines()[-1])))
    return {"root": root, "cache": cache, "files": files, "cfg": cfg, "weights": weights, "results": results}


def test_the_test_cache_is_huggingface_hubs_layout(imports):
    from huggingface_hub import scan_cache_dir

    scanned = scan_cache_dir(imports["cache"])
    assert not scanned.warnings and [r.repo_id for r in scanned.repos] == [HUB_ID]
    assert [rev.commit_hash for r in scanned.repos for rev in r.revisions] == [COMMIT]
    assert {f.file_name for r in scanned.repos for rev in r.revisions for f in rev.files} == \
        {f.name for f in imports["files"].iterdir()}


def test_a_hub_id_resolves_through_the_hub_cache_and_records_its_revision(imports):
    from mhar_probe.model.saved import load_model

    root, files, cfg, weights = imports["root"], imports["files"], imports["cfg"], imports["weights"]
    for run, dst in (("main", root / "dst"), ("commit", root / "dst-commit")):
        status, err = imports["results"][run]
        assert status == 0, err
        record = json.loads((dst / "import.json").read_text())
        assert record["hub_id"] == HUB_ID and record["revision"] == COMMIT
        snapshot = imports["cache"] / f"models--{HUB_ID.replace('/', '--')}" / "snapshots" / COMMIT
        assert Path(record["source"]) == snapshot
        shards = sorted(files.glob("*.safetensors"))
        assert record["weights_sha256"] == {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in shards}
    model = load_model(root / "dst").eval()  # the weights came through: the float64 reference's logits
    ids = torch.randint(0, cfg["vocab_size"], (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits.double()
    ref = reference_logits(cfg, {k: v.float().double() for k, v in weights.items()}, ids)
    assert (logits - ref).abs().max().item() <= 1e-5


def test_a_hub_id_with_no_network_and_no_cache_is_one_line_naming_it_and_what_to_do(imports):
    status, err = imports["results"]["absent"]
    lines = err.splitlines()
    assert status == 2 and len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"mhar import: error: cannot get {ABSENT_ID} from the Hugging Face Hub"), line
    assert str(imports["cache"]) in line  # where it looked
    assert "unset HF_HUB_OFFLINE" in line and f"hf download {ABSENT_ID} --local-dir DIR" in line
    assert not (imports["root"] / "dst-absent").exists()
