"""A mistyped path is refused at once (issue 54): each command checks the paths it reads before
its heavy imports, so `mhar info runs/typo` answers in a fraction of a second, not after loading
torch. Run in a fresh interpreter: after each refusal, torch must not have been imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mhar_probe import cli

MISSING = "/nonexistent/mhar-54"

#: (argv, what the refusal says): every command whose options load nothing heavy
REFUSALS = [
    (["info", MISSING], f"run directory {MISSING} does not exist"),
    (["capture", MISSING], f"run directory {MISSING} does not exist"),
    (["probe", MISSING], f"run or routing dataset {MISSING} does not exist"),
    (["stats", "tails", MISSING], f"run {MISSING} does not exist"),
    (["stats", "ceg", MISSING, MISSING + "b"], f"run {MISSING} does not exist"),
    (["stats", "mcnemar", MISSING, MISSING], f"eval output {MISSING} does not exist"),
    (["corpus", "pack", "--corpus", MISSING, "--out", "x.tar.xz"], f"corpus folder {MISSING} does not exist"),
]

#: commands whose options come from modules that load torch (the model's presets, methods and
#: backends): their paths are checked in the words before the parser is built (`early_check`)
CORPUS_MISSING = f"corpus path {MISSING} does not exist (or name one of: embedded, installed)"
EARLY_REFUSALS = [
    (["train", "--out", "x", "--corpus", MISSING], CORPUS_MISSING),
    (["train", f"--corpus={MISSING}", "--out", "x", "--steps", "3"], CORPUS_MISSING),
    (["train", "--out", MISSING, "--resume"],
     f"run directory {MISSING} does not exist; --resume continues a run there (leave it off to start one)"),
    (["sweep", "--methods", "baseline", "mhar", "--corpus", MISSING, "--out", "x"], CORPUS_MISSING),
    (["sweep", "--out", "x", "--grid", MISSING], f"grid file {MISSING} does not exist"),
    (["cpt", MISSING, "--out", "x"], f"source model {MISSING} does not exist"),
    (["cpt", ".", "--out", MISSING, "--resume", "--steps", "3"],
     f"run directory {MISSING} does not exist; --resume continues a run there (leave it off to start one)"),
    (["convert", MISSING, "out"], f"source model {MISSING} does not exist"),
    (["eval", MISSING], f"run directory {MISSING} does not exist"),
    (["eval", MISSING, "--tasks", "mhar_lastword", "--limit", "5"], f"run directory {MISSING} does not exist"),
]
#: refused early with a line of its own; the parser refuses it too (train takes no positional)
RESUME_WITH_A_PATH = (["train", "--resume", MISSING],
                      f"--resume takes no value; give the run to continue as --out {MISSING}")

SCRIPT = """
import contextlib, io, json, sys
from mhar_probe.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    results.append([rc, err.getvalue().strip(), "torch" in sys.modules])
print(json.dumps(results))
"""


def test_a_missing_path_is_refused_before_torch_is_imported():
    cases = [*REFUSALS, *EARLY_REFUSALS, RESUME_WITH_A_PATH]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([argv for argv, _ in cases])],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for (argv, said), (rc, err, torch_loaded) in zip(cases, json.loads(proc.stdout.splitlines()[-1])):
        assert rc == 2 and err == f"mhar {argv[0]}: error: {said}", (argv, err)
        assert not torch_loaded, f"mhar {' '.join(argv)} imported torch before refusing"


@pytest.mark.parametrize("argv,said", EARLY_REFUSALS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_an_early_refusal_is_the_commands_own_refusal_said_sooner(argv, said, monkeypatch, capsys):
    """Without the early check, the parsed command refuses the same input with the same line: the
    words the early check reads are the command's real options, and it refuses nothing the command
    would accept."""
    monkeypatch.setattr(cli, "refuse_early", lambda command, argv: 0)
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip() == f"mhar {argv[0]}: error: {said}"


def test_a_path_given_to_resume_is_refused_by_the_parser_too(monkeypatch, capsys):
    monkeypatch.setattr(cli, "refuse_early", lambda command, argv: 0)
    with pytest.raises(SystemExit) as stop:
        cli.main(RESUME_WITH_A_PATH[0])
    assert stop.value.code == 2 and "mhar train: error:" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["train", "--out", "x", "--corpus", "embedded"],  # a named corpus
    ["train", "--out", MISSING],  # no --resume: a new run may go there
    ["sweep", "--out", "x", "--grid", "--corpus", "installed"],  # (the parser's to refuse: --grid has no value)
    ["cpt", "--out", "x", MISSING],  # SRC not first: left to the parsed command
    ["eval", "--limit", "5", MISSING],
    ["convert", "--heads", "4", MISSING, "out"],
    ["train", "--out", "x", "--corpus", MISSING, "--help"],  # help first
])
def test_what_the_early_check_leaves_to_the_command(argv):
    """Input the early check cannot read for sure (or that is not a mistake) passes it."""
    assert cli.refuse_early(argv[0], argv) == 0
