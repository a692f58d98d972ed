"""Nsight Systems rows kept a batch at a time, as columns: what ``TimelineSink.consume`` keeps of the same events one
by one (bit for bit: times in us as ``ns / 1e3``, the same bounds, names interned in the same order), with the
per-name work (a call's class, a kernel's kind, a range's role) done once per distinct name, each ``StringIds`` id
looked up once, and the per-row work in numpy: an event struct per row cost 3-4x reading the rows from SQLite.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.nsys.step_ranges import classify, is_op
from gpuanalyze.ingest.timeline.blocking_calls import OP, TID_LIMIT, reaching, read_by_name
from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS
from gpuanalyze.ingest.timeline.model import TimelineSink, cpu_role
from gpuanalyze.ingest.timeline.runtime_calls import BLOCKING, call_facts
from gpuanalyze.ingest.timeline.trace_events import MARK_LOADER, MAX_DUR_US, MAX_TS_US
from gpuanalyze.ingest.trace.byte_source import ReadLimits

_NO_MARK = -9
#: Calls CUDA documents as not waiting on the host, though CUPTI records a synchronisation for them.
NOT_HOST_WAIT = re.compile(r"^(cuda|cu|hip)(StreamWaitEvent|EventQuery|StreamQuery)")
#: Built-in ENUM_CUDA_MEM_KIND (same numbering as the table of 2022.4 on).
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static", 6: "Managed Static"}
#: Built-in ENUM_CUDA_MEMCPY_OPER.
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH"}
COPY_KINDS |= {10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}


def timed(rows: list[Any]) -> tuple[list[Any], list[tuple[Any, ...]], np.ndarray, np.ndarray]:
    """(rows, their columns, start and end as int64) of the rows whose start and end, their first two values, are
    integers: a row with NULL, real or text times is skipped (checked on the columns: no SQL test on every row)."""
    cols = list(zip(*rows, strict=True))
    start, end = np.array(cols[0]), np.array(cols[1])
    if start.dtype == end.dtype == np.int64:
        return rows, cols, start, end
    rows = [r for r in rows if type(r[0]) is int and type(r[1]) is int]
    cols = list(zip(*rows, strict=True)) or [() for _ in cols]
    return rows, cols, np.array(cols[0], np.int64), np.array(cols[1], np.int64)


def _extend(target: array[Any], values: np.ndarray) -> None:
    target.frombytes(np.ascontiguousarray(values, dtype=target.typecode).tobytes())


class Cached(dict[Any, Any]):
    """What ``make`` derives from each key, remembered for ``limit`` keys (past them, made again: a hostile export)."""

    def __init__(self, make: Callable[[Any], Any], limit: int = 1 << 16) -> None:
        super().__init__()
        self.make, self.limit = make, limit

    def __missing__(self, key: Any) -> Any:
        got = self.make(key)
        if len(self) < self.limit:
            self[key] = got
        return got


class Interned(dict[Any, int]):
    """Keys to small ids in first-seen order, with what ``make`` derives from each key once (``facts``)."""

    def __init__(self, make: Callable[[Any], tuple[Any, ...]]) -> None:
        super().__init__()
        self.make = make
        self.facts: list[tuple[Any, ...]] = []
        self._tables: dict[int, np.ndarray] = {}

    def __missing__(self, key: Any) -> int:
        self.facts.append(self.make(key))
        got = self[key] = len(self.facts) - 1
        return got

    def table(self, i: int, dtype: Any) -> np.ndarray:
        """Field i of every key's facts, by id (made for the keys added since the last call only: a capture's
        ProfilerStep#N ranges are a name each)."""
        got = self._tables.get(i, np.empty(0, dtype))
        if got.size < len(self.facts):
            got = self._tables[i] = np.append(got, np.array([f[i] for f in self.facts[got.size :]], dtype=dtype))
        return got


def strings(db: NsysDb) -> Cached:
    """The text of a name column's value: a StringIds id looked up once per distinct id, a text value as it is
    (cut in SQL: ``NsysDb.id_or_text``); None for anything else or an id StringIds does not hold."""
    lookup = db.has("StringIds", "id", "value")
    sql = f"SELECT substr(value, 1, {MAX_NAME_CHARS}) FROM StringIds WHERE id = ?"

    def text(key: Any) -> str | None:
        if isinstance(key, str) or type(key) is not int or not lookup:
            return key if isinstance(key, str) else None
        rows = db.small(sql, (key,), 1)
        return rows[0][0] if rows and isinstance(rows[0][0], str) else None

    return Cached(text)


def range_facts(key: tuple[str, bool], step_range: str | None) -> tuple[Any, ...]:
    """Of an NVTX range's (name, emit_nvtx seq): name, an op, a step, its (kind, number), a JIT compiler's, then
    TimelineSink's role of it as a CPU event (phase mark, call-site role, start-up work), and whether the idle-owner
    pass reads it by name."""
    name, seq = key
    step, op = classify(name, step_range), is_op(name, seq)
    mark, site, startup = cpu_role(name, "cpu_op" if op else "user_annotation")
    nvrtc, read = "nvrtc" in name.lower(), bool(read_by_name((name,))[0])
    return name, op, step is not None, step, nvrtc, _NO_MARK if mark is None else mark, site, startup, read


class RowSink(TimelineSink):
    """A TimelineSink that takes columns of rows (module docstring), the export's synchronisation records (``waits``:
    the sorted correlation ids of this process's) and its loop thread's OS waits."""

    def __init__(self, path: str, limits: ReadLimits, waits: np.ndarray | None = None) -> None:
        super().__init__(path, limits)
        self.waits = np.empty(0, np.int64) if waits is None else waits
        self.marked = 0  # runtime calls made blocking by a synchronisation record (their names did not say so)
        self._calls = Interned(lambda name: (*call_facts(name), NOT_HOST_WAIT.match(name) is not None))

    def loader_waits(self, start_us: array[float], dur_us: array[float]) -> None:
        """Times the loop waited for input (OS calls): DataLoader marks, as ``__next__`` is in a Kineto trace."""
        self.c_ts.extend(start_us)
        self.c_dur.extend(dur_us)
        self.c_mark.extend(array("b", [MARK_LOADER]) * len(start_us))
        self._bounded()

    def _timed(self, ts: np.ndarray, dur: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """Which rows have times within the bounds TimelineSink keeps; those of the ``used`` rows (all by default)
        that do not are counted as bad."""
        self.events += ts.size
        self.complete_events += ts.size
        ok = (ts >= -MAX_TS_US) & (ts <= MAX_TS_US) & (dur >= 0.0) & (dur <= MAX_DUR_US)
        self.bad_times += int(np.count_nonzero(~ok if used is None else used & ~ok))
        return ok

    def _tids(self, tid: Sequence[Any]) -> np.ndarray:
        got = np.array(tid)
        if got.dtype == np.int64 and (got.size == 0 or int(np.abs(got).max()) < TID_LIMIT):
            return got
        return np.array([self.sites.thread_id(t) for t in tid], dtype=np.int64)

    def device_rows(self, cat: str, ts: np.ndarray, dur: np.ndarray, names: list[str], corr: np.ndarray) -> None:
        """Device activities; ``corr``: each row's correlation id (-1 for none)."""
        ok = self._timed(ts, dur)
        names = names if ok.all() else [n for n, keep in zip(names, ok.tolist(), strict=True) if keep]
        kinds: dict[str, int] = {}
        kind = np.array([kinds[n] if n in kinds else kinds.setdefault(n, self._kind(n, cat)) for n in names], np.int32)
        targets: tuple[array[Any], ...] = (self.g_ts, self.g_dur, self.g_kind, self.g_corr)
        for target, values in zip(targets, (ts[ok], dur[ok], kind, corr[ok]), strict=True):
            _extend(target, values)
        self._bounded()

    def runtime_rows(
        self, ts: np.ndarray, dur: np.ndarray, names: list[str], tid: Sequence[Any], corr: np.ndarray
    ) -> None:
        """Runtime calls (TimelineSink._runtime and NsysSink._runtime, a batch at a time)."""
        if not (ok := self._timed(ts, dur)).all():
            keep = np.flatnonzero(ok).tolist()
            ts, dur, corr, names, tid = ts[ok], dur[ok], corr[ok], [names[i] for i in keep], [tid[i] for i in keep]
        ids = np.array([self._calls[n] for n in names], dtype=np.int64)
        klass = self._calls.table(0, np.int8)[ids]
        self.enqueue_calls += int(self._calls.table(1, bool)[ids].sum())
        named = self._calls.table(2, bool)[ids]
        marked = np.zeros(ids.size, bool)
        if self.waits.size:
            held = self.waits[np.minimum(np.searchsorted(self.waits, corr), self.waits.size - 1)] == corr
            marked = held & (klass != BLOCKING) & ~self._calls.table(4, bool)[ids]
            klass[marked] = BLOCKING
            self.marked += int(marked.sum())
        base = len(self.r_ts)
        for i in np.flatnonzero(named | marked).tolist():
            self.sites.add_call(base + i, names[i], tid[i])
        for i in np.flatnonzero(self._calls.table(3, bool)[ids]).tolist():
            self.startup.call(names[i], float(ts[i]), float(dur[i]))
        targets: tuple[array[Any], ...] = (self.r_ts, self.r_dur, self.r_sync, self.r_class, self.r_tid, self.r_corr)
        for target, values in zip(targets, (ts, dur, klass == BLOCKING, klass, self._tids(tid), corr), strict=True):
            _extend(target, values)
        self._bounded()

    def cpu_rows(self, ts: np.ndarray, dur: np.ndarray, ids: np.ndarray, facts: Interned, tid: list[Any]) -> None:
        """CPU events (NVTX ranges: ``facts`` by ``range_facts``): what TimelineSink.consume keeps of them."""
        mark, site = facts.table(5, np.int8)[ids], facts.table(6, np.int8)[ids]
        site = np.full(ids.size, -1, np.int8) if self.sites.dropped else site
        startup = facts.table(7, bool)[ids]
        ok = self._timed(ts, dur, (mark != _NO_MARK) | (site >= 0) | startup)
        for i in np.flatnonzero(startup & ok).tolist():
            self.startup.add(facts.facts[ids[i]][0], float(ts[i]), float(dur[i]))
        kept = np.flatnonzero((site >= 0) & ok)
        if kept.size:
            own = self.sites
            distinct, first = np.unique(ids[kept], return_index=True)
            interned = np.zeros(len(facts.facts), np.int32)
            for d in distinct[np.argsort(first)].tolist():  # interned in the order the rows name them
                interned[d] = own._names.id(facts.facts[d][0])
            start, tids, names, role = ts[kept], self._tids([tid[i] for i in kept.tolist()]), ids[kept], site[kept]
            end = start + dur[kept]
            if self.g_ts:  # a device trace's ops inside an earlier op of the batch are never read: not held
                keep = role != OP
                op = ~keep
                read = facts.table(8, bool)[names[op]]
                keep[op] = reaching(start[op], end[op], tids[op], read)
                start, end, tids, names, role = start[keep], end[keep], tids[keep], names[keep], role[keep]
            targets: tuple[array[Any], ...] = (own.e_ts, own.e_end, own.e_tid, own.e_name, own.e_caller)
            for target, values in zip(targets, (start, end, tids, interned[names], role), strict=True):
                _extend(target, values)
        for i in np.flatnonzero((mark == -1) & ok).tolist():  # a ProfilerStep (step_ranges.classify takes them first)
            self._step(facts.facts[ids[i]][0], (ts[i], dur[i]), self._threads.setdefault(tid[i], len(self._threads)))
        marked = np.flatnonzero((mark >= 0) & ok)
        for d in np.unique(ids[marked[mark[marked] == MARK_LOADER]]).tolist():
            self._loader_iter(facts.facts[d][0])
        _extend(self.c_ts, ts[marked])
        _extend(self.c_dur, dur[marked])
        _extend(self.c_mark, mark[marked])
        self._bounded()


def device_names(db: NsysDb, names: Cached) -> dict[str, Cached]:
    """Per device category, what a row's name column (kernels) or its copy and memory kinds are named as in Kineto."""
    copies, kinds = dict(COPY_KINDS), dict(MEM_KINDS)
    if db.has("ENUM_CUDA_MEMCPY_OPER", "id", "name"):
        for i, name in db.small("SELECT id, substr(name, 1, 64) FROM ENUM_CUDA_MEMCPY_OPER"):
            code = str(name).removeprefix("CUDA_MEMCPY_KIND_").removeprefix("UVM_")
            if isinstance(i, int) and len(code) == 4 and code[1:3] == "TO":
                copies[i] = f"{code[0]}to{code[3]}"
    if db.has("ENUM_CUDA_MEM_KIND", "id", "label"):
        for i, label in db.small("SELECT id, substr(label, 1, 32) FROM ENUM_CUDA_MEM_KIND"):
            if isinstance(i, int) and isinstance(label, str):
                kinds[i] = label

    def kind(k: object) -> str:
        return kinds.get(k, "Unknown") if isinstance(k, int) else "Unknown"

    def copy(key: tuple[object, object, object]) -> str:
        op = copies.get(key[0], "Unknown") if isinstance(key[0], int) else "Unknown"
        return f"Memcpy {op} ({kind(key[1])} -> {kind(key[2])})"

    return {
        "kernel": Cached(lambda raw: name if (name := names[raw]) is not None else "(unnamed kernel)"),
        "gpu_memcpy": Cached(copy),
        "gpu_memset": Cached(lambda key: f"Memset ({kind(key[0])})"),
    }
