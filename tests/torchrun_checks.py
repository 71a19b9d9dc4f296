"""Runs a test starts in other processes (under torchrun, or one process), each with a hard
time limit that says where the run was when it ran out.

`launch` writes a child script: a guard, then the test's `body`. The guard sends the rank's
stderr (file descriptor 2: Python's and NCCL's) to its own file `<stem>.rank<R>.stderr` and
makes the rank print the Python stacks of all its threads (`faulthandler`)
* when it is still running after `timeout` seconds (then it exits with status 1, and torchrun
  stops the other ranks),
* when it is stopped with SIGTERM (torchrun stopping the survivors of a failed rank), and
* when it gets SIGUSR1 (the parent asking, below).
If the launcher itself is still running `grace` seconds after the limit, every process under it
is sent SIGUSR1, then killed. The result's `report()` is the command, how it ended, and the tail
of the launcher's and every rank's stderr: what a failing test prints (no `-s` needed).
A stack in `destroy_process_group` says the run hung at exit, one in a collective (`barrier`,
`all_reduce`, DDP's backward) that ranks disagreed on a collective, one in a compiler that it
was only slow.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mhar_probe.proctree import descendants, signal_all

#: prepended to the body; reads its stem and limit from argv[1:3] and removes them
GUARD = '''\
import faulthandler, os, signal, sys
_stem, _limit = sys.argv[1], float(sys.argv[2])
del sys.argv[1:3]
_fd = os.open(f"{_stem}.rank{os.environ.get('RANK', '0')}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(_fd, 2)
os.close(_fd)
faulthandler.enable(all_threads=True)
faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
faulthandler.register(signal.SIGUSR1, all_threads=True)
faulthandler.dump_traceback_later(_limit, exit=True)
'''

#: what faulthandler prints first when the limit passes
TIMEOUT_MARK = "Timeout ("


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Launched:
    """How one launched run ended."""

    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str  # the launcher's (torchrun's, or the one process's before its guard ran)
    seconds: float
    killed: bool  # still running `grace` s past the limit: stacks asked for, then killed
    ranks: dict[str, str] = field(default_factory=dict)  # rank -> its stderr

    @property
    def timed_out(self) -> bool:
        return self.killed or any(TIMEOUT_MARK in text for text in self.ranks.values())

    @property
    def all_stderr(self) -> str:
        return "\n".join([self.stderr, *self.ranks.values()])

    def report(self, tail: int = 6000) -> str:
        how = ("TIMED OUT (killed after asking for stacks)" if self.killed
               else "TIMED OUT (the ranks' own limit)" if self.timed_out else f"exit {self.returncode}")
        short = min(tail, 2000)  # (torchrun's own account of a failure is long and says little)
        parts = [f"$ {' '.join(self.cmd)}", f"-> {how} after {self.seconds:.0f} s",
                 f"--- launcher stderr (last {short} characters) ---", self.stderr[-short:]]
        for rank, text in sorted(self.ranks.items()):
            parts += [f"--- rank {rank} stderr (last {tail} characters) ---", text[-tail:]]
        return "\n".join(parts)


def launch(body: str, args: list[str], *, stem: Path, timeout: float, nproc: int = 1, grace: float = 20.0,
           env: dict[str, str] | None = None) -> Launched:
    """Run `body` (Python source, after `GUARD`) with `args` in `nproc` processes (torchrun when
    more than one), at most `timeout` seconds per rank; see the module notes."""
    script = stem.parent / f"{stem.name}_run.py"
    script.write_text(GUARD + body)
    for old in stem.parent.glob(f"{stem.name}.rank*.stderr"):
        old.unlink()
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                 "--master_port", str(free_port())] if nproc > 1 else [sys.executable])
    cmd = [*launcher, str(script), str(stem), str(timeout), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ if env is None else env), start_new_session=True)
    killed = False
    try:
        out, err = proc.communicate(timeout=timeout + grace)
    except subprocess.TimeoutExpired:
        killed = True
        below = descendants(proc.pid)
        ranks = below if nproc > 1 else [proc.pid, *below]  # (torchrun itself would die of SIGUSR1)
        signal_all(ranks, signal.SIGUSR1)  # each rank prints its stacks
        time.sleep(3)
        signal_all([*below, proc.pid], signal.SIGKILL)
        out, err = proc.communicate()
    ranks = {p.name.split(".rank")[-1].removesuffix(".stderr"): p.read_text(errors="replace")
             for p in sorted(stem.parent.glob(f"{stem.name}.rank*.stderr"))}
    return Launched(cmd, proc.returncode, out, err, time.monotonic() - t0, killed, ranks)
