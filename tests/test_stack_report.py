"""`make test-latest`'s report (tests/stack_report.py): what moved past the lock, and which moved
packages a failed test's traceback passes through."""

from __future__ import annotations

from stack_report import changed_against, culprits, failures, read_lock

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="2" failures="1">
<testcase classname="tests.test_model" name="test_ok" time="0.1"/>
<testcase classname="tests.test_model" name="test_generate[mhar]" time="0.2">
<failure message="TypeError: forward() got an unexpected keyword argument 'cache'">Traceback:
  File "/x/.venv-latest/lib/python3.11/site-packages/transformers/generation/utils.py", line 10, in generate
  File "/x/.venv-latest/lib/python3.11/site-packages/numpy/core/x.py", line 3, in f
TypeError: forward() got an unexpected keyword argument 'cache'</failure></testcase>
</testsuite></testsuites>
"""


def test_report_names_the_moved_package_in_the_failing_traceback(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("# made by uv\nnumpy==2.4.6\n    # via mhar-probe\ntransformers==5.24.0\nTokenizers==0.23.0\n")
    pins = read_lock(lock)
    assert pins == {"numpy": "2.4.6", "transformers": "5.24.0", "tokenizers": "0.23.0"}
    have = {"numpy": "2.4.6", "transformers": "5.25.0", "tokenizers": "0.24.0", "torch": "2.13.0"}
    changed = changed_against(pins, have)
    assert changed == {"tokenizers": ("0.23.0", "0.24.0"), "transformers": ("5.24.0", "5.25.0")}
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    (failed,) = failures(junit)
    assert failed[0] == "tests/test_model.py::test_generate[mhar]" and "unexpected keyword" in failed[1]
    # numpy is in the traceback but did not move; tokenizers moved but is not in it
    assert culprits(failed[1], changed) == ["transformers"]
