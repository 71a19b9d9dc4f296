"""A mistyped path is refused at once (issue 54): each command checks the paths it reads before
its heavy imports, so `mhar info runs/typo` answers in a fraction of a second, not after loading
torch. Run in a fresh interpreter: after each refusal, torch must not have been imported."""

from __future__ import annotations

import json
import subprocess
import sys

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
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([argv for argv, _ in REFUSALS])],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for (argv, said), (rc, err, torch_loaded) in zip(REFUSALS, json.loads(proc.stdout.splitlines()[-1])):
        assert rc == 2 and err == f"mhar {argv[0]}: error: {said}", (argv, err)
        assert not torch_loaded, f"mhar {' '.join(argv)} imported torch before refusing"
