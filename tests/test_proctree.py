"""mhar_probe.proctree.descendants finds the processes below one (what a torchrun time limit signals),
checked against the pids the shell itself reports for its children and grandchildren."""

from __future__ import annotations

import os
import signal
import subprocess

from mhar_probe.proctree import descendants, signal_all


def test_descendants_are_the_children_and_grandchildren_the_shell_started():
    # the outer shell starts a sleep and an inner shell that starts another sleep; each prints its pid
    script = "sleep 30 & echo $!; bash -c 'sleep 30 & echo $!; echo $$; wait' & wait"
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        first, grandchild, inner = (int(proc.stdout.readline()) for _ in range(3))
        found = descendants(proc.pid)
        assert {first, inner, grandchild} <= set(found)
        assert found.index(inner) < found.index(grandchild)  # children before grandchildren
        assert proc.pid not in found and os.getpid() not in found
        assert descendants(grandchild) == []
    finally:
        signal_all([*descendants(proc.pid), proc.pid], signal.SIGKILL)
        proc.wait()


def test_signal_all_reaches_the_live_processes_and_skips_the_gone_ones():
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process now
    live = subprocess.Popen(["sleep", "30"])
    try:
        signal_all([gone.pid, live.pid], signal.SIGTERM)  # no ProcessLookupError for the first
        assert live.wait(timeout=10) == -signal.SIGTERM
    finally:
        live.kill()
        live.wait()
