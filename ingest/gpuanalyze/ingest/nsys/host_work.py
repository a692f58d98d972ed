"""What the host did besides CUDA calls in an Nsight Systems export: its waits on the device, its OS calls and
the names of its threads, fed to the same evidence a Kineto trace gives (blocking calls, DataLoader waits).

- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``: CUPTI's record of each CUDA synchronisation API call (CUPTI
  reference, ``CUpti_ActivitySynchronization``: ``start``/``end`` are the host-side times of the call,
  ``correlationId`` the call's). A runtime call with the correlation id of such a record waited for the
  device, so it is blocking even when its name does not say so (runtime_calls.py reads names), except the
  two calls CUDA documents as not waiting: ``cudaStreamWaitEvent`` (the *device* waits) and
  ``cudaEventQuery``/``cudaStreamQuery`` (they return at once). The kind of wait is read from the runtime
  call, not from ``syncType``: its numbering is not stable across releases (2024.6 and 2026.1 exports record
  ``cudaStreamSynchronize`` as 2, which ``ENUM_CUPTI_SYNC_TYPE`` and CUPTI call STREAM_WAIT_EVENT; 2022.1
  records ``cudaDeviceSynchronize`` as 1). Only where a process has no runtime calls are the records
  themselves the waits, named from ``ENUM_CUPTI_SYNC_TYPE`` (or CUPTI's numbering), stream waits left out.
- ``OSRT_API``: OS runtime calls (``nsys profile -t osrt``). On a rank's loop thread (the thread with most
  of its CUDA runtime calls) a call that waits for a file, pipe or socket (``read``, ``poll``, ``select``,
  ``recv`` and kin, IO_WAITS) is the loop waiting for input, as a DataLoader ``__next__`` is in a Kineto trace:
  worker processes hand batches over through a pipe the loop polls and reads, a single-process loader
  reads its files there (a capture without GPU rows gets a note only: no GPU waited). Sleeps and waits on
  other threads (a lock, a condition: the GIL, the pin-memory thread's queue) are counted in a note, not owned.
- ``ThreadNames``: the loop thread's name, and PyTorch's DataLoader threads: ``pt_data_pin`` (the pin-memory
  thread, started only by the multi-process loader: torch/utils/data/dataloader.py) and ``pt_data_worker``
  (each worker process's thread), which say the loader has worker processes.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.nsys.rows import RowSink

SYNC, OSRT, THREADS = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API", "ThreadNames"
_PID = "((globalPid >> 24) & 16777215)"
_TID_PID = "((globalTid >> 24) & 16777215)"
_TIMED = "typeof(start) = 'integer' AND typeof(end) = 'integer'"
#: CUPTI's CUpti_ActivitySynchronizationType (exports without ENUM_CUPTI_SYNC_TYPE).
SYNC_TYPES = {1: "EVENT_SYNCHRONIZE", 2: "STREAM_WAIT_EVENT", 3: "STREAM_SYNCHRONIZE", 4: "CONTEXT_SYNCHRONIZE"}
#: The runtime call a synchronisation record stands for where the process has no runtime calls.
SYNC_CALLS = {
    "EVENT_SYNCHRONIZE": "cudaEventSynchronize",
    "STREAM_SYNCHRONIZE": "cudaStreamSynchronize",
    "CONTEXT_SYNCHRONIZE": "cudaDeviceSynchronize",
}
#: OS calls that wait for a file, pipe or socket (glibc names; ``64`` variants are the same calls).
IO_WAITS = frozenset(
    [
        "read",
        "pread",
        "pread64",
        "readv",
        "preadv",
        "preadv2",
        "fread",
        "fgets",
        "recv",
        "recvfrom",
        "recvmsg",
        "recvmmsg",
        "poll",
        "ppoll",
        "select",
        "pselect",
        "pselect6",
        "epoll_wait",
        "epoll_pwait",
        "epoll_pwait2",
        "accept",
        "accept4",
    ]
)
SLEEPS = frozenset(["nanosleep", "clock_nanosleep", "usleep", "sleep"])
THREAD_WAITS = frozenset(
    [
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_cond_clockwait",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "pthread_mutex_lock",
        "pthread_mutex_timedlock",
        "pthread_rwlock_rdlock",
        "pthread_rwlock_wrlock",
        "pthread_join",
        "futex",
        "waitpid",
        "wait",
        "wait4",
        "waitid",
    ]
)
PIN_THREAD, WORKER_THREAD = "pt_data_pin", "pt_data_worker"
_MAX_THREADS = 1 << 16


def read_syncs(db: NsysDb) -> dict[int, np.ndarray]:
    """pid -> the correlation ids of its synchronisation records, sorted (8 bytes a record, every record kept)."""
    if not db.has(SYNC, "correlationId", "globalPid"):
        return {}
    parts: dict[int, list[np.ndarray]] = {}
    ints = "typeof(globalPid) = 'integer' AND typeof(correlationId) = 'integer'"
    for rows in db.batches(f"SELECT {_PID}, correlationId FROM {SYNC} WHERE {ints}"):
        pids, corrs = np.array(rows, dtype=np.int64).T
        for pid in np.unique(pids).tolist():
            parts.setdefault(pid, []).append(corrs[pids == pid])
    return {pid: np.unique(np.concatenate(got)) for pid, got in parts.items()}


def _sync_names(db: NsysDb) -> dict[int, str]:
    names = dict(SYNC_TYPES)
    if db.has("ENUM_CUPTI_SYNC_TYPE", "id", "name"):
        rows = db.small("SELECT id, substr(name, 1, 80) FROM ENUM_CUPTI_SYNC_TYPE")
        got = {i: str(n).removeprefix("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_") for i, n in rows if isinstance(i, int)}
        names = got or names
    return names


def sync_calls(db: NsysDb, pids: list[int]) -> Any:
    """(pid, start ns, end ns, call name) of the host-waiting synchronisation records of ``pids``, in batches."""
    if not pids or not db.has(SYNC, "start", "end", "globalPid", "syncType"):
        return
    names = _sync_names(db)
    wanted = ", ".join(str(int(p)) for p in pids)
    sql = f"SELECT {_PID}, start, end, syncType FROM {SYNC} WHERE {_TIMED} AND {_PID} IN ({wanted})"
    for rows in db.batches(sql):
        out = []
        for pid, start, end, kind in rows:
            call = SYNC_CALLS.get(names.get(kind, "")) if isinstance(kind, int) else None
            if call is not None:
                out.append((pid, start, end, call))
        yield out


@dataclass(slots=True)
class OsWaits:
    """One loop thread's OS waits, by family."""

    io: Counter[str] = field(default_factory=Counter)
    io_us: float = 0.0
    other: Counter[str] = field(default_factory=Counter)
    other_us: dict[str, float] = field(default_factory=dict)

    def note(self, thread: str) -> str | None:
        parts = []
        if self.io_us:
            calls = ", ".join(n for n, _ in self.io.most_common(3))
            parts.append(
                f"{self.io_us / 1e3:,.1f} ms in {sum(self.io.values()):,} file/pipe/socket waits ({calls}), "
                "counted as waiting for input (data loading)"
            )
        top = sorted(self.other_us.items(), key=lambda kv: -kv[1])[:3]
        if top:
            shown = ", ".join(f"{n} {us / 1e3:,.1f} ms" for n, us in top)
            parts.append(f"{shown} in sleeps and waits on other threads (not owned)")
        if not parts:
            return None
        return f"OS runtime calls (OSRT_API) on the loop thread {thread}: " + "; ".join(parts)


def osrt_waits(db: NsysDb, loop: dict[int, int], sinks: Mapping[int, RowSink]) -> dict[int, OsWaits]:
    """Read the loop threads' OS calls (``loop``: pid -> globalTid); feed the I/O waits to each rank's sink
    (``sinks`` by pid; empty for a capture without GPU rows: nothing waited for input there, only a note)."""
    cols = db.columns(OSRT)
    if not {"start", "end", "globalTid", "nameId"} <= cols or not loop:
        return {}
    nesting = " AND nestingLevel = 0" if "nestingLevel" in cols else ""  # fread's inner read is not a second wait
    tids = ", ".join(str(int(t)) for t in loop.values())
    name = db.string_sql("nameId")
    sql = f"SELECT {_TID_PID}, start, end, {name} FROM {OSRT} WHERE {_TIMED} AND globalTid IN ({tids}){nesting}"
    out: dict[int, OsWaits] = {}
    for rows in db.batches(sql):
        starts: dict[int, tuple[array, array]] = {}
        for pid, start, end, call in rows:
            if not isinstance(call, str) or end < start or pid not in loop:
                continue
            waits = out.get(pid)
            if waits is None:
                waits = out[pid] = OsWaits()
            dur = (end - start) / 1e3
            if call in IO_WAITS:
                waits.io[call] += 1
                waits.io_us += dur
                s, d = starts.setdefault(pid, (array("d"), array("d")))
                s.append(start / 1e3)
                d.append(dur)
            elif call in SLEEPS or call in THREAD_WAITS:
                waits.other[call] += 1
                waits.other_us[call] = waits.other_us.get(call, 0.0) + dur
        for pid, (s, d) in starts.items():
            if (sink := sinks.get(pid)) is not None:
                sink.loader_waits(s, d)
    return out


@dataclass(slots=True)
class Threads:
    """What ThreadNames says of one process."""

    names: dict[int, str] = field(default_factory=dict)
    """globalTid -> name, for the threads asked about."""
    pin: bool = False
    workers: int = 0


def thread_names(db: NsysDb, pids: list[int], loop: dict[int, int]) -> tuple[dict[int, Threads], int]:
    """Per pid: the loop thread's name and PyTorch's DataLoader threads; the capture's worker threads."""
    if not db.has(THREADS, "globalTid", "nameId"):
        return {}, 0
    name = db.string_sql("nameId")
    out = {p: Threads() for p in pids}
    loop_tids = set(loop.values())
    workers = 0
    rows = db.small(f"SELECT {_TID_PID}, globalTid, {name} FROM {THREADS}", limit=_MAX_THREADS)
    for pid, tid, text in rows:
        if not isinstance(text, str):
            continue
        if text.startswith(WORKER_THREAD):
            workers += 1
        got = out.get(pid)
        if got is None:
            continue
        if tid in loop_tids:
            got.names[tid] = text[:64]
        if text.startswith(WORKER_THREAD):
            got.workers += 1
        got.pin |= text.startswith(PIN_THREAD)
    return out, workers


def thread_label(threads: Threads | None, tid: int | None) -> str:
    """How a note names a thread: its name where ThreadNames has it, and its thread id."""
    if tid is None:
        return "(unknown)"
    own = tid & 0xFFFFFF
    name = threads.names.get(tid) if threads is not None else None
    return f"{name!r} (tid {own})" if name else f"tid {own}"


def loader_note(threads: Threads | None, capture_workers: int, world: int) -> tuple[str | None, bool]:
    """A note on the DataLoader threads ThreadNames shows, and whether the loader has worker processes."""
    if threads is None:
        return None, False
    if threads.pin:
        return (
            "ThreadNames: a DataLoader pin-memory thread (pt_data_pin): a multi-process DataLoader with pin_memory=True"
        ), True
    if threads.workers or (capture_workers and world == 1):
        n = threads.workers or capture_workers
        return f"ThreadNames: {n} DataLoader worker thread(s) (pt_data_worker): a multi-process DataLoader", True
    return None, False
