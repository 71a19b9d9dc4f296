"""The thread count of a CPU run (issue 54): the idle CPUs this process may use, split between
torchrun's ranks on the host; --threads wins. Read off fixed /proc/stat snapshots, not timed."""

from __future__ import annotations

import pytest

from mhar_probe import cputhreads
from mhar_probe.cputhreads import choose_threads, idle_cpus


@pytest.mark.parametrize("allowed,idle,ranks,threads", [
    (2, 2.0, 1, 2),    # alone on two cores: both
    (2, 1.0, 1, 1),    # beside one busy process: the idle one (torch's default, 2, spins against it)
    (2, 0.1, 1, 1),    # everything busy: still one
    (8, 5.6, 1, 6),    # rounded to the nearest CPU
    (8, 8.0, 2, 4),    # two ranks on the host: each its share
    (8, 3.0, 2, 2),    # ... of what is idle
    (3, 3.0, 4, 1),    # more ranks than CPUs: one each
])
def test_the_rule(allowed, idle, ranks, threads):
    choice = choose_threads(None, ranks=ranks, allowed=allowed, idle=idle)
    assert choice.threads == threads
    assert f"{allowed} CPUs allowed" in choice.reason and f"{allowed - idle:.1f} busy with other work" in choice.reason


def test_threads_flag_wins_and_no_look_gives_the_share():
    assert choose_threads(3, ranks=1, allowed=2, idle=0.0).line() == "3 CPU threads (--threads)"
    share = choose_threads(None, ranks=2, allowed=8, look=False)
    assert share.threads == 4 and share.line() == ("4 CPU threads (8 CPUs allowed, shared by 2 ranks on this host; "
                                                   "--threads N to choose)")


def stat_text(ticks: dict[str, tuple[int, ...]]) -> str:
    total = [sum(col) for col in zip(*ticks.values())]
    lines = [f"cpu  {' '.join(map(str, total))}"] + [f"{name} {' '.join(map(str, t))}" for name, t in ticks.items()]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 42"]) + "\n"


def test_idle_cpus_reads_the_allowed_cpus_idle_share_between_two_snapshots(tmp_path, monkeypatch):
    """cpu0 busy all the time, cpu1 idle 3/4 of it, cpu2 idle but not allowed: 0 + 0.75 of 2 CPUs."""
    stat = tmp_path / "stat"
    before = {"cpu0": (100, 0, 0, 50, 0, 0, 0, 0), "cpu1": (100, 0, 0, 50, 0, 0, 0, 0),
              "cpu2": (0, 0, 0, 500, 0, 0, 0, 0)}
    after = {"cpu0": (200, 0, 0, 50, 0, 0, 0, 0), "cpu1": (110, 0, 10, 110, 20, 0, 0, 0),
             "cpu2": (0, 0, 0, 600, 0, 0, 0, 0)}
    stat.write_text(stat_text(before))
    monkeypatch.setattr(cputhreads.time, "sleep", lambda seconds: stat.write_text(stat_text(after)))
    assert idle_cpus([0, 1], stat=stat) == pytest.approx(2 * 80 / 200)  # idle + iowait over all ticks
    assert idle_cpus([0, 1], stat=tmp_path / "missing") is None
