"""Leave nothing of a `gpuanalyze run --try` trial running after it: its whole process tree is
killed and reaped after every trial, not only at the time limit.

A trial starts in a new process group (led by the trial's root) in the launcher's session. Killing
that group is not enough: a process that calls ``setsid()`` or ``setpgid()`` (a daemonising
helper, a server the script starts) leaves the group. So, on Linux:

- while the trial runs, the launcher records its descendants from the ``/proc/<pid>/stat`` parent
  chains (each with its start time, so a reused pid is never killed);
- the launcher is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``) while the trials run:
  a process whose parent dies is re-parented to the launcher rather than to init, so it is still
  found as a descendant, and the launcher reaps it.

After the trial: SIGTERM to the group, to every recorded descendant and to the groups they lead,
KILL_GRACE_S to exit, then SIGKILL to what is left, and each of them reaped. Elsewhere (no /proc)
only the process group is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

#: Seconds the tree gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 2.0
#: Seconds between two looks at the tree while a trial runs.
SCAN_EVERY_S = 0.25
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_PROC = Path("/proc")

Identity = tuple[int, int]
"""(pid, start time in clock ticks): a process, never confused with a later one of the same pid."""


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Make this process a child subreaper for the block (Linux); yields whether it is one."""
    libc = _libc()
    if libc is None:
        yield False
        return
    before = ctypes.c_int(0)
    libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
    done = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield done
    finally:
        if done and not before.value:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class Tree:
    """The processes of one trial: its root and every descendant seen while it ran."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: set[Identity] = set()
        self._ours = os.getpid()
        self._before = {pid for pid, (ppid, _, _) in processes().items() if ppid == self._ours}
        """The launcher's children before the trial started (not the trial's)."""

    def scan(self) -> None:
        """Record the trial's descendants now (orphans re-parented to the launcher included)."""
        table = processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        queue = [self.root, *(p for p in children.get(self._ours, []) if p not in self._before)]
        queue += [pid for pid, start in self.seen if table.get(pid, (0, 0, -1))[2] == start]
        visited: set[int] = set()
        while queue:
            pid = queue.pop()
            if pid in visited or pid not in table or pid == self._ours:
                continue
            visited.add(pid)
            if pid != self.root:
                self.seen.add((pid, table[pid][2]))
            queue.extend(children.get(pid, []))

    def alive(self) -> list[Identity]:
        """The recorded descendants still running (zombies left out), pid reuse excluded."""
        table = processes()
        return [(pid, start) for pid, start in self.seen if table.get(pid, (0, 0, -1))[2] == start and _running(pid)]

    def kill(self) -> None:
        """SIGTERM the group and every descendant, SIGKILL what is left after KILL_GRACE_S, reap
        what the launcher may reap."""
        self.scan()
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            self._reap()
            self.scan()
            if not self.alive() and not _group_alive(self.root):
                break
            time.sleep(0.05)
        else:
            self._signal(signal.SIGKILL)
        self._reap()
        for _ in range(40):  # SIGKILL is not instant; reap what dies
            if not self.alive():
                break
            time.sleep(0.05)
            self._reap()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root, signum)
        for pid, _ in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                os.kill(pid, signum)
                if os.getpgid(pid) == pid:  # a setsid leader: its own group too
                    os.killpg(pid, signum)

    def _reap(self) -> None:
        for pid, _ in list(self.seen):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def processes() -> dict[int, tuple[int, int, int]]:
    """{pid: (ppid, pgid, start time)} of every process now (empty without /proc)."""
    out: dict[int, tuple[int, int, int]] = {}
    if not sys.platform.startswith("linux"):
        return out
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if not entry.name.isdigit():
                continue
            try:
                text = (_PROC / entry.name / "stat").read_text()
            except OSError:
                continue
            fields = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and ')'
            with contextlib.suppress(IndexError, ValueError):
                out[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return out


def _running(pid: int) -> bool:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :][:1] not in ("Z", "X")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return any(g == pgid and _running(pid) for pid, (_, g, _) in processes().items())


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
