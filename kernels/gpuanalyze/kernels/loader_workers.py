"""The synthetic loader's worker processes, and the main-process side that drives them so a run always ends.

Main and each worker share one pipe; there is no ``multiprocessing.Queue`` (no feeder thread to
join at exit, no named semaphore to leak). Main sends a slot index to fill; the worker answers
with the index once the batch is in the slot. Main waits on every pipe and every process
sentinel at once, in slices of ``POLL_S``: a worker that dies (SIGBUS, the OOM killer, a crash)
is reported at once, Ctrl-C is acted on within a slice, and a run in which no worker answers for
``timeout_s`` is stopped with an error.

Ctrl-C in a terminal signals the whole process group. Workers start with SIGINT ignored (main
ignores and blocks it, holding any Ctrl-C pending, for the few milliseconds it takes to start each
one), and leave when their pipe closes or their parent changes (main was killed), so only
main acts on Ctrl-C, none is lost, and no worker outlives the run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

import numpy as np

from analyzer.errors import GpuAnalyzeError
from gpuanalyze.kernels.shm import free_bytes, mib

READY = -1
"""What a worker sends once its per-sample function is compiled and the slots are mapped."""
POLL_S = 0.1
"""Longest a wait blocks before checking Ctrl-C, deadlines and the parent again."""


def _producer(wid: int, path: str, shape: tuple[int, ...], iters: int, conn: Connection, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # main handles Ctrl-C and closes our pipe
    from gpuanalyze.kernels.loader_work import augment

    augment(np.zeros(4, np.float32), 1, 0)  # compile before reporting ready
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:  # main already gave up and removed the segment
        return
    import mmap

    try:
        mapping = mmap.mmap(fd, int(np.prod(shape)) * 4)
    finally:
        os.close(fd)
    slots = np.ndarray(shape, np.float32, buffer=mapping)
    try:
        _serve(wid, slots, iters, conn, parent)
    finally:
        del slots
        with contextlib.suppress(BufferError):
            mapping.close()


def _serve(wid: int, slots: np.ndarray, iters: int, conn: Connection, parent: int) -> None:
    from gpuanalyze.kernels.loader_work import augment

    count = 0
    try:
        conn.send(READY)
        while True:
            if not conn.poll(POLL_S):
                if os.getppid() != parent:  # main was killed: nobody will close the pipe for us
                    return
                continue
            idx = conn.recv()
            for s in range(slots.shape[1]):
                augment(slots[idx, s].reshape(-1), iters, wid * 7919 + count)
                count += 1
            conn.send(idx)
    except (EOFError, OSError):  # main closed the pipe (end of run, Ctrl-C) or went away
        return


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """While a worker is started: SIGINT ignored, so the worker inherits SIG_IGN from its first
    instruction, and blocked, so a Ctrl-C arriving meanwhile stays pending (Linux never discards a
    blocked signal) and reaches main's own handler the moment the worker is started."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C back while a bounded cleanup runs, then deliver it (a second Ctrl-C must not
    interrupt the cleanup of the first)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if caught:
            if callable(old):
                old(signal.SIGINT, None)
            elif old == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


def death_message(wid: int, pid: int | None, exitcode: int | None, shm: Path) -> str:
    """One line saying which worker died and the likely cause."""
    who = f"data-loader worker {wid} (pid {pid})"
    if exitcode is None:
        return f"{who} closed its pipe unexpectedly"
    if exitcode == 0:
        return f"{who} exited before the run ended"
    if exitcode > 0:
        return f"{who} exited with status {exitcode} (its error is printed above)"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    hint = ""
    if -exitcode == signal.SIGBUS:
        hint = f": out of shared memory? {shm} has {mib(free_bytes(shm))} free"
    elif -exitcode == signal.SIGKILL:
        hint = " (the OOM killer, or killed by hand)"
    return f"{who} died of {name}{hint}"


class Workers:
    """Worker processes filling batch slots of a shared-memory segment; every wait is bounded."""

    def __init__(self, *, timeout_s: float, shm: Path) -> None:
        self.timeout_s = timeout_s
        self.shm = shm
        self.procs: list[BaseProcess] = []
        self.conns: list[Connection] = []
        self.owner: list[int] = []

    def start(self, count: int, path: Path, shape: tuple[int, ...], iters: int) -> None:
        ctx = mp.get_context("spawn")
        for wid in range(count):
            ours, theirs = ctx.Pipe(duplex=True)
            self.conns.append(ours)
            proc = ctx.Process(
                target=_producer,
                args=(wid, str(path), shape, iters, theirs, os.getpid()),
                daemon=True,
                name=f"gpuanalyze-loader-{wid}",
            )
            self.procs.append(proc)
            try:
                with _sigint_ignored():
                    proc.start()
            finally:
                theirs.close()

    def wait_ready(self) -> None:
        pending = set(range(len(self.procs)))
        while pending:
            wid, msg = self._receive()
            assert msg == READY, msg
            pending.discard(wid)

    def fill(self, slots: int) -> None:
        """Hand out every slot, round-robin; each comes back to the worker that filled it."""
        self.owner = [i % len(self.procs) for i in range(slots)]
        for idx in range(slots):
            self.refill(idx)

    def refill(self, idx: int) -> None:
        wid = self.owner[idx]
        try:
            self.conns[wid].send(idx)
        except OSError as exc:
            raise self._died(wid) from exc

    def next_full(self) -> int:
        """The index of the next filled slot."""
        _, idx = self._receive()
        return idx

    def _receive(self) -> tuple[int, int]:
        sentinels = {p.sentinel: wid for wid, p in enumerate(self.procs)}
        conns = {c: wid for wid, c in enumerate(self.conns)}
        deadline = time.monotonic() + self.timeout_s
        while True:
            ready = wait([*conns, *sentinels], timeout=POLL_S)
            for obj in ready:
                if isinstance(obj, int):
                    raise self._died(sentinels[obj])
            for obj in ready:
                assert isinstance(obj, Connection)
                wid = conns[obj]
                try:
                    return wid, obj.recv()
                except (EOFError, OSError) as exc:
                    raise self._died(wid) from exc
            if time.monotonic() > deadline:
                raise GpuAnalyzeError(
                    f"the data-loader workers sent nothing for {self.timeout_s:g} s (a loaded or stalled machine?); "
                    "stopped the benchmark"
                )

    def _died(self, wid: int) -> GpuAnalyzeError:
        proc = self.procs[wid]
        proc.join(timeout=1.0)
        return GpuAnalyzeError(death_message(wid, proc.pid, proc.exitcode, self.shm))

    def close(self, *, grace_s: float) -> None:
        """Close the pipes (workers leave at once), wait up to ``grace_s`` in all, then kill what is left."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.close()
        started = [p for p in self.procs if p.pid is not None]
        deadline = time.monotonic() + grace_s
        for proc in started:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in started:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1.0)
        self.conns, self.procs = [], []
