"""The GPU tests' launcher (tests/torchrun_checks.py) says where a run that ran past its limit
was: the Python stacks of every rank, in the report a failing test prints."""

from __future__ import annotations

import pytest

from torchrun_checks import launch

STUCK = '''\
import time

def stuck_in_the_body():
    time.sleep(600)

print("started", file=sys.stderr, flush=True)
stuck_in_the_body()
'''


def test_a_run_past_its_limit_prints_where_it_was(tmp_path):
    ran = launch(STUCK, [], stem=tmp_path / "r", timeout=2, grace=30)
    assert ran.timed_out and not ran.killed and ran.returncode == 1  # its own limit ended it
    assert set(ran.ranks) == {"0"}
    text = ran.ranks["0"]
    assert "started" in text and "Timeout (0:00:02)!" in text and "stuck_in_the_body" in text
    assert "stuck_in_the_body" in ran.report() and "TIMED OUT" in ran.report()


def test_a_run_that_outlives_its_own_limit_is_asked_for_its_stacks_then_killed(tmp_path):
    body = "faulthandler.cancel_dump_traceback_later()\n" + STUCK  # as if its limit could not fire
    ran = launch(body, [], stem=tmp_path / "r", timeout=1, grace=2)
    assert ran.killed and ran.timed_out and ran.returncode == -9
    assert "stuck_in_the_body" in ran.ranks["0"] and "Timeout (" not in ran.ranks["0"]
    assert "killed after asking for stacks" in ran.report()


def test_a_run_that_ends_keeps_its_status_and_output(tmp_path):
    ran = launch("print('out', sys.argv[1:]); print('err', file=sys.stderr); sys.exit(3)\n", ["a", "b"],
                 stem=tmp_path / "r", timeout=30)
    assert ran.returncode == 3 and not ran.timed_out
    assert ran.stdout.strip() == "out ['a', 'b']" and ran.ranks["0"].strip() == "err"


GLOO = '''\
import torch.distributed as dist

def rank_zero_stuck():
    time.sleep(600)

import time
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    # rank 0's limit comes later than rank 1's: with the same limit, rank 0's could fire first, and
    # rank 1 would be in its failed barrier's exception hook, not in the barrier, when its own fires
    faulthandler.dump_traceback_later(_limit + 15, exit=True)
    rank_zero_stuck()
dist.barrier()
'''


@pytest.mark.slow
def test_torchrun_ranks_each_print_their_stacks(tmp_path):
    """Two gloo ranks, rank 0 stuck in the body, rank 1 waiting for it in a barrier: each
    rank's own stack is in its report (rank 1 reaches its limit first and exits; torchrun's
    SIGTERM makes rank 0 print too)."""
    ran = launch(GLOO, [], stem=tmp_path / "r", timeout=20, nproc=2, grace=60)
    assert ran.timed_out and ran.returncode != 0
    assert set(ran.ranks) == {"0", "1"}
    assert "rank_zero_stuck" in ran.ranks["0"]
    assert "barrier" in ran.ranks["1"] and "rank_zero_stuck" not in ran.ranks["1"]
