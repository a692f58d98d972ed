"""Nsight Systems export rows as the Kineto events the importer already understands, one sink per rank.

Each activity row becomes the event a PyTorch profiler trace has for the same thing, fed to
``model.TimelineSink`` in batches, so kernels, copies, runtime calls, phase marks, blocking calls and
host ops are kept exactly as for a Kineto trace and nothing downstream knows the source:

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> ``kernel`` (demangled name, correlation id);
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` -> ``gpu_memcpy`` named as Kineto names copies,
  ``Memcpy HtoD (Pageable -> Device)``, from ``copyKind``/``srcKind``/``dstKind`` through the export's
  ``ENUM_CUDA_MEMCPY_OPER``/``ENUM_CUDA_MEM_KIND`` (the same numbering is built in for exports before 2022.4,
  which have no ENUM tables); ``CUPTI_ACTIVITY_KIND_MEMSET`` -> ``gpu_memset``, ``Memset (Device)``;
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``cuda_runtime`` named without nsys's ``_v<version>`` suffix
  (``cudaStreamSynchronize_v3020`` -> ``cudaStreamSynchronize``), so runtime_calls.call_class reads its API family;
- ``CUPTI_ACTIVITY_KIND_OVERHEAD`` JIT compilation and module loading -> Kineto's ``overhead`` events
  (``Driver Compiler``, ``Runtime Triggered Module Loading``, ``Lazy Function Loading``): start-up work;
- ``CUDA_GPU_MEMORY_USAGE_EVENTS`` (``--cuda-memory-usage=true``): device memory the driver gave out over time
  (step_memory.py);
- ``NVTX_EVENTS`` ranges (push/pop and start/end; name in ``text`` or ``textId``) -> ``cpu_op`` for
  ``torch.autograd.profiler.emit_nvtx``'s ``aten::<op>, seq = ...`` ranges (named ``aten::<op>``), else
  ``user_annotation`` (record_function, DataLoader, ``gpuanalyze:<part>`` phases); a range of a JIT
  compiler that names NVRTC (nvFuser's ``executor_utils::NVRTC``) is also start-up compilation.

Ranks are the processes with GPU activity, decoded from ``globalPid``/``globalTid`` (bits 24-47 hold
the process id, the Nsight Systems schema's encoding), not from ``PROCESSES`` (which can list every
process on the host); they are numbered by their lowest CUDA device, then pid. Rows of other processes
(a launcher, a compile worker) are left out. A capture without GPU rows is one CPU-only trace.

Host-side evidence (nsys/host_work.py): synchronisation records mark the runtime calls that waited for the
device, loop-thread OS waits for input are DataLoader waits, and ThreadNames names the loop thread and tells
a multi-process DataLoader.

Steps are NVTX ranges (nsys/step_ranges.py): ``--step-range NAME``, else ``ProfilerStep#N``, else gpuanalyze's own
``gpuanalyze:step#N``; without any, the capture is one window.

The ranks are read in groups (``traces`` yields a group's traces before it reads the next: every query filters on
the group's process ids): a rank alone when its GPU rows are many (memory holds one rank's events, not the
capture's), small ranks together (a pass over each table per rank made thousands of tiny ranks quadratic).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np

from analyzer.errors import TraceError
from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.nsys.host_work import (
    OsWaits,
    Threads,
    loader_note,
    osrt_waits,
    read_syncs,
    sync_calls,
    thread_label,
    thread_names,
)
from gpuanalyze.ingest.nsys.meta import NsysMeta, gpu_for
from gpuanalyze.ingest.nsys.rows import Cached, Interned, RowSink, device_names, range_facts, strings, timed
from gpuanalyze.ingest.nsys.step_ranges import Steps, describe, nvtx_cut, step_events, step_kind
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.trace_events import Event
from gpuanalyze.ingest.trace.byte_source import ReadLimits

KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
OVERHEAD = "CUPTI_ACTIVITY_KIND_OVERHEAD"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"
#: ENUM_CUPTI_OVERHEAD_TYPE names -> Kineto's names of the same CUPTI overhead (startup_work.OVERHEAD_KINDS).
OVERHEAD_NAMES = {
    "OVERHEAD_DRIVER_COMPILER": "Driver Compiler",
    "OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING": "Runtime Triggered Module Loading",
    "OVERHEAD_LAZY_FUNCTION_LOADING": "Lazy Function Loading",
}
#: Built-in ENUM_CUPTI_OVERHEAD_TYPE numbering (exports without the table).
OVERHEAD_CODES = {2: "Driver Compiler", 6: "Runtime Triggered Module Loading", 7: "Lazy Function Loading"}
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)
#: NVTX_EVENTS.eventType of ranges: Nvtx(t)PushPopRange, Nvtx(t)StartEndRange (marks and domains are not ranges);
#: read from ENUM_NSYS_EVENT_TYPE where the export has it.
NVTX_RANGES = (59, 60, 70, 71)
_PID = "((globalPid >> 24) & 16777215)"
_TID_PID = "((globalTid >> 24) & 16777215)"
_TIMED = "typeof(start) = 'integer' AND typeof(end) = 'integer'"
VERSION_SUFFIX = re.compile(r"_v\d+$")
_MAX_COUNTED_NAMES = 4096
#: Most processes with GPU activity read as ranks (one host's; a training job has one per GPU); beyond: refused.
MAX_RANKS = 1024
#: Ranks of at most this many GPU rows together are read in one pass over each table (~40 bytes an event held).
GROUP_ROWS = 1 << 20


class NsysEvents:
    """Streams one export's tables into a TimelineSink per rank, a rank at a time (``traces`` does it all)."""

    def __init__(
        self, db: NsysDb, meta: NsysMeta, limits: ReadLimits, step_range: str | None, name: str | None = None
    ) -> None:
        self.db, self.meta, self.limits, self.step_range = db, meta, limits, step_range
        self.path = name or str(db.path)
        """What messages name: the user's file (a report, not the export made of it)."""
        self.devices, rows = self._gpu_processes()
        self.ranked = bool(self.devices)
        self.keys: list[int | None] = list(self.devices) if self.ranked else [None]
        self.place = meta.place if len(self.keys) == 1 else None
        """(rank, world size) of a one-process capture from its process's environment (nsys/meta.py)."""
        self.groups = _groups(self.keys, rows)
        self.syncs = read_syncs(db)
        self.sinks: dict[int | None, RowSink] = {}
        """The rank being read (one sink at a time)."""
        self._where = ""
        """The SQL filter on the rank's process id ({pid} is the table's process id expression)."""
        self.backend: str | None = None
        """'nccl' once a rank ran NCCL kernels."""
        self.calls: dict[int, Counter[int]] = {}
        """pid -> runtime calls per thread (globalTid): the loop thread makes most."""
        self.os_waits: dict[int, OsWaits] = {}
        self.threads: dict[int, Threads] = {}
        self.capture_workers = 0
        self.loop: dict[int, int] = {}
        """pid -> its loop thread (globalTid)."""
        self._sync_only_ranks: list[int] = []
        self.steps: dict[int | None, Steps] = {}
        self.nvtx_names: Counter[str] = Counter()
        self.nvtx_span = (float("inf"), float("-inf"))
        """First start and last end of the NVTX ranges read (us): the window of a capture that has nothing else."""
        self.op_ranges: Counter[int | None] = Counter()
        """Per rank read, its NVTX ranges of ops (emit_nvtx)."""
        self._strings = strings(db)
        self._call_names = Cached(lambda raw: _call_name(self._strings[raw]))
        self._device_names = device_names(db, self._strings)
        self._range_facts = Interned(lambda key: range_facts(key, step_range))

    def _gpu_processes(self) -> tuple[dict[int, int | None], Counter[int]]:
        """pid -> lowest CUDA device of its GPU rows, in rank order; and each pid's GPU rows."""
        seen: dict[int, int | None] = {}
        rows: Counter[int] = Counter()
        for table in GPU_TABLES:
            if not self.db.has(table, "start", "end", "globalPid"):
                continue
            dev = "deviceId" if "deviceId" in self.db.columns(table) else "NULL"
            sql = f"SELECT {_PID}, {dev}, count(*) FROM {table} GROUP BY 1, 2"
            for pid, device, n in self.db.small(sql, limit=1 << 16):
                if isinstance(pid, int):
                    d = device if isinstance(device, int) else None
                    old = seen.get(pid)
                    seen[pid] = d if old is None else old if d is None else min(old, d)
                    rows[pid] += n
        if len(seen) > MAX_RANKS:
            raise TraceError(
                f"{self.path}: {len(seen):,} processes ran GPU work in this capture, more than the {MAX_RANKS:,} "
                "ranks one capture is read for (one host's training job has a process per GPU); refusing to read it"
            )
        order = sorted(seen, key=lambda p: (seen[p] is None, seen[p] or 0, p))
        return {p: seen[p] for p in order}, rows

    def _sink_key(self, pid: object) -> tuple[bool, int | None]:
        if not self.ranked:
            return True, None
        return (pid in self.sinks), pid if isinstance(pid, int) else None

    def _add(self, pid: object, events: list[Event]) -> None:
        ok, key = self._sink_key(pid)
        if ok:
            self.sinks[key].consume(events)

    def _col(self, table: str, name: str) -> str:
        return name if name in self.db.columns(table) else "NULL"

    def _split(self, ids: tuple[Any, ...]) -> Iterator[tuple[int | None, RowSink, np.ndarray]]:
        """(rank, sink, positions of its rows in a batch) of each rank read, from the rows' globalPid or globalTid."""
        if len(self.sinks) == 1:
            yield *next(iter(self.sinks.items())), np.arange(len(ids))
            return
        pids = (np.array(ids, dtype=np.int64) >> 24) & 0xFFFFFF
        for key, sink in self.sinks.items():
            if (sel := np.flatnonzero(pids == key)).size:
                yield key, sink, sel

    def _id_col(self, table: str, name: str) -> str:
        """An id column as SQL: its integer, -1 where missing or not an integer (TimelineSink._id)."""
        return (
            f"CASE WHEN typeof({name}) = 'integer' THEN {name} ELSE -1 END" if name in self.db.columns(table) else "-1"
        )

    def _device_rows(self, table: str, cat: str, name: str, extra: str) -> None:
        if not self.db.has(table, "start", "end"):
            return
        gp, pid = ("globalPid", _PID) if "globalPid" in self.db.columns(table) else ("0", "0")
        corr, where = self._id_col(table, "correlationId"), self._where.format(pid=pid)
        sql = f"SELECT start, end, {gp}, {corr}, {name}{extra} FROM {table} WHERE 1{where}"
        names = self._device_names[cat]
        for batch in self.db.batches(sql):
            _, cols, start, end = timed(batch)
            corrs = np.array(cols[3], np.int64)
            made = [names[k] for k in (cols[4] if cat == "kernel" else zip(*cols[5:], strict=True))]
            ts, dur = start / 1e3, (end - start) / 1e3
            for _, sink, sel in self._split(cols[2]):
                sink.device_rows(cat, ts[sel], dur[sel], [made[i] for i in sel.tolist()], corrs[sel])

    def _kernels(self) -> None:
        cols = self.db.columns(KERNEL)
        col = next((c for c in ("demangledName", "shortName", "mangledName", "name") if c in cols), None)
        self._device_rows(KERNEL, "kernel", self.db.id_or_text(col) if col else "NULL", "")

    def _copies_and_sets(self) -> None:
        m = [self._col(MEMCPY, c) for c in ("copyKind", "srcKind", "dstKind")]
        self._device_rows(MEMCPY, "gpu_memcpy", "NULL", ", " + ", ".join(m))
        self._device_rows(MEMSET, "gpu_memset", "NULL", ", " + self._col(MEMSET, "memKind"))

    def _runtime(self) -> None:
        if not self.db.has(RUNTIME, "start", "end", "globalTid"):
            return
        name = self.db.id_or_text("nameId") if "nameId" in self.db.columns(RUNTIME) else "NULL"
        corr = self._id_col(RUNTIME, "correlationId")
        where = self._where.format(pid=_TID_PID)
        sql = f"SELECT start, end, globalTid, {corr}, {name} FROM {RUNTIME} WHERE 1{where}"
        calls = self.calls
        for batch in self.db.batches(sql):
            _, cols, start, end = timed(batch)
            corrs = np.array(cols[3], np.int64)
            names = [self._call_names[n] for n in cols[4]]
            ts, dur = start / 1e3, (end - start) / 1e3
            for _, sink, sel in self._split(cols[2]):
                at = sel.tolist()
                sink.runtime_rows(ts[sel], dur[sel], [names[i] for i in at], [cols[2][i] for i in at], corrs[sel])
            for tid, n in Counter(cols[2]).items():
                p = (tid >> 24) & 0xFFFFFF if isinstance(tid, int) else None
                if isinstance(p, int) and isinstance(tid, int) and (got := calls.get(p)) is not None:
                    got[tid] += n
                elif isinstance(p, int) and isinstance(tid, int) and len(calls) < _MAX_COUNTED_NAMES:
                    calls[p] = Counter({tid: n})

    def _sync_only(self) -> None:
        """The synchronisation records of the ranks without runtime calls, as the calls they stand for."""
        ranks = [p for p in self.syncs if p not in self.calls and (p in self.sinks or not self.ranked)]
        for rows in sync_calls(self.db, ranks):
            for p, start, end, call in rows:
                self._add(p, [Event("X", "cuda_runtime", call, start / 1e3, (end - start) / 1e3, None, None)])
        self._sync_only_ranks = ranks

    def _host(self) -> None:
        kept = {p: c for p, c in self.calls.items() if c and (p in self.sinks or not self.ranked)}
        loop = self.loop = {p: c.most_common(1)[0][0] for p, c in kept.items()}  # the thread making most calls
        ranks = {k: v for k, v in self.sinks.items() if k is not None}
        self.os_waits = osrt_waits(self.db, loop, ranks)
        pids = [p for p in self.sinks if p is not None] or list(loop)
        self.threads, self.capture_workers = thread_names(self.db, pids, loop)

    def _rank_notes(self, key: int | None, sink: RowSink) -> tuple[list[str], bool]:
        """This rank's notes on its host side, and whether its DataLoader has worker processes."""
        pid = key if key is not None else next(iter(self.loop), None)
        threads = self.threads.get(pid) if pid is not None else None
        notes = []
        if sink.marked:
            notes.append(
                f"{sink.marked:,} runtime call(s) waited for the device by CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
                "though their names do not say so: counted as blocking"
            )
        if pid in self._sync_only_ranks:
            notes.append(
                "no runtime calls: host waits read from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION alone (their kind from "
                "syncType, whose numbering differs across nsys releases)"
            )
        waits = self.os_waits.get(pid) if pid is not None else None
        if pid is not None and waits is not None and (text := waits.note(thread_label(threads, self.loop.get(pid)))):
            notes.append(text)
        if self.op_ranges[key]:
            notes.append(
                "an NVTX range per op (torch.autograd.profiler.emit_nvtx), read as CPU ops: each op also paid for "
                "its range on the host, so dispatch (launch-owned idle) reads high; confirm a launch-bound verdict "
                "on a capture without emit_nvtx"
            )
        note, workers = loader_note(threads, self.capture_workers, len(self.keys))
        if note:
            notes.append(note)
        return notes, workers

    def _overhead(self) -> None:
        if not self.db.has(OVERHEAD, "start", "end", "globalTid", "overheadType"):
            return
        names = dict(OVERHEAD_CODES)
        if self.db.has("ENUM_CUPTI_OVERHEAD_TYPE", "id", "name"):
            rows = self.db.small("SELECT id, substr(name, 1, 64) FROM ENUM_CUPTI_OVERHEAD_TYPE")
            names = {i: OVERHEAD_NAMES[n] for i, n in rows if isinstance(i, int) and n in OVERHEAD_NAMES}
        where = self._where.format(pid=_TID_PID)
        sql = f"SELECT start, end, {_TID_PID}, globalTid, overheadType FROM {OVERHEAD} WHERE {_TIMED}{where}"
        for rows in self.db.batches(sql):
            for start, end, p, tid, kind in rows:
                name = names.get(kind) if isinstance(kind, int) else None
                if name is not None:
                    self._add(p, [Event("X", "overhead", name, start / 1e3, (end - start) / 1e3, tid, None)])

    def _memory(self) -> None:
        """Each device-memory allocation (memoryOperationType 0) or free (1) of kind Device, Array or Device Static
        (MEM_KINDS) as that device's running total: reserved memory, in PyTorch's words (step_memory.py)."""
        if not self.db.has(MEMORY, "start", "globalPid", "deviceId", "bytes", "memoryOperationType"):
            return
        kinds = " AND memKind IN (2, 3, 5)" if "memKind" in self.db.columns(MEMORY) else ""
        where = f"typeof(start) = 'integer'{kinds}{self._where.format(pid=_PID)}"
        sql = f"SELECT {_PID}, start, deviceId, bytes, memoryOperationType FROM {MEMORY} WHERE {where} ORDER BY start"
        held: Counter[tuple[int | None, int]] = Counter()
        for rows in self.db.batches(sql):
            for pid, start, device, size, op in rows:
                ok, key = self._sink_key(pid)
                if ok and isinstance(device, int) and isinstance(size, int) and op in (0, 1):
                    held[key, device] += size if op == 0 else -size
                    self.sinks[key].memory.add(device, start / 1e3, math.nan, held[key, device], math.nan)

    def _nvtx_sql(self) -> tuple[str, str] | None:
        """(the SQL of a range's text and text id, the filter on ranges) of NVTX_EVENTS; None without the table."""
        cols = self.db.columns(NVTX)
        if not {"start", "end", "globalTid"} <= cols:
            return None
        text = self.db.string_sql("text", ids=False) if "text" in cols else "NULL"
        text_id = self.db.id_or_text("textId") if "textId" in cols else "NULL"
        kinds = f" AND eventType IN {self._range_types()}" if "eventType" in cols else ""
        return f"{text}, {text_id}", f"1{kinds}"

    def step_kind(self) -> str:
        """Decide, for every rank at once, which ranges are the steps (step_ranges.step_kind); what they are."""
        got = self._nvtx_sql()
        ranks = ", ".join(str(int(k)) for k in self.keys if k is not None)
        where = (f"{_TIMED} AND {got[1]}" + (f" AND {_TID_PID} IN ({ranks})" if ranks else "")) if got else ""
        cols = [self.db.string_sql(c, ids=c == "textId") for c in ("text", "textId") if c in self.db.columns(NVTX)]
        name = f"COALESCE({', '.join(cols)})" if cols else "NULL"
        self.kind = step_kind(self.db, self.path, name, where, self.step_range) if got else ""
        if self.step_range is not None and not got:
            raise TraceError(f"{self.path}: no NVTX range named {self.step_range!r} (the export has no NVTX ranges)")
        return describe(self.kind, self.step_range)

    def _nvtx(self) -> None:
        got = self._nvtx_sql()
        if got is None:
            return
        name, where = got
        sql = f"SELECT start, end, globalTid, {name} FROM {NVTX} WHERE {where}" + self._where.format(pid=_TID_PID)
        strings = self._strings
        for batch in self.db.batches(sql):
            rows, cols, start, end = timed(batch)
            texts = [t if t is not None else strings[i] for t, i in zip(cols[3], cols[4], strict=True)]
            if None in texts:  # neither a text nor a known id: not read
                rows = [r for r, t in zip(rows, texts, strict=True) if t is not None]
                texts = [t for t in texts if t is not None]
                rows, cols, start, end = timed(rows)
            if rows:
                self._ranges(cols, start, end, texts)

    def _ranges(self, cols: list[tuple[Any, ...]], start_ns: np.ndarray, end_ns: np.ndarray, texts: list[str]) -> None:
        """A batch of NVTX ranges: step ranges apart, the others as CPU ops or annotations (module docstring)."""
        start, end = start_ns / 1e3, end_ns / 1e3
        self.nvtx_span = (min(self.nvtx_span[0], float(start.min())), max(self.nvtx_span[1], float(end.max())))
        facts = self._range_facts
        ids = np.array([facts[nvtx_cut(t)] for t in texts], dtype=np.int64)
        distinct, first, counts = np.unique(ids, return_index=True, return_counts=True)
        for i in np.argsort(first).tolist():
            name = facts.facts[distinct[i]][0]
            if len(self.nvtx_names) < _MAX_COUNTED_NAMES or name in self.nvtx_names:
                self.nvtx_names[name] += int(counts[i])
        step, op, nvrtc = facts.table(2, bool)[ids], facts.table(1, bool)[ids], facts.table(4, bool)[ids]
        threads = [t if isinstance(t, int) else 0 for t in cols[2]]
        for key, sink, rows in self._split(cols[2]):
            for i in rows[step[rows]].tolist():
                kind, number = facts.facts[ids[i]][3]
                self.steps[key].by_kind[kind].append((number, float(start[i]), float(end[i]), threads[i]))
            rows = rows[~step[rows]]
            for i in rows[nvrtc[rows]].tolist():
                sink.startup.add(facts.facts[ids[i]][0], float(start[i]), float(end[i] - start[i]))
            self.op_ranges[key] += int(op[rows].sum())
            tids = [threads[i] for i in rows.tolist()]
            sink.cpu_rows(start[rows], end[rows] - start[rows], ids[rows], facts, tids)

    def _range_types(self) -> tuple[int, ...]:
        if not self.db.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
            return NVTX_RANGES
        rows = self.db.small("SELECT id, substr(name, 1, 64) FROM ENUM_NSYS_EVENT_TYPE")
        ids = [i for i, n in rows if isinstance(i, int) and str(n).endswith(("PushPopRange", "StartEndRange"))]
        return tuple(ids) if len(ids) > 1 else NVTX_RANGES

    def _begin(self, keys: list[int | None]) -> None:
        """Read ranks ``keys`` next ([None]: the whole capture, without GPU rows)."""
        only = next(iter(self.syncs.values())) if len(self.syncs) == 1 else None  # a capture's one process, unranked
        self.sinks = {k: RowSink(self.path, self.limits, only if k is None else self.syncs.get(k)) for k in keys}
        self.steps = {key: Steps() for key in keys}
        self.op_ranges = Counter()
        self.calls = {}
        pids = ", ".join(str(int(k)) for k in keys if k is not None)
        self._where = f" AND {{pid}} IN ({pids})" if pids else ""

    def traces(self) -> Iterator[Timeline]:
        """One Timeline per rank (one CPU-only trace without GPU rows), each group of ranks read after the last
        rank before it is taken; ``step_kind`` first."""
        for group in self.groups:
            self._begin(group)
            self._kernels()
            self._copies_and_sets()
            self._runtime()
            self._overhead()
            self._memory()
            self._nvtx()
            self._sync_only()
            self._host()
            for key in group:
                yield self._trace(key)

    def _trace(self, key: int | None) -> Timeline:
        """Rank ``key``'s trace, its events handed over (freed with the trace, before the next group is read)."""
        # a capture of NVTX ranges alone is one window over them: its verdict is unknown, no GPU activity
        alone = not self.kind and not self.ranked and not self.sinks[key].r_ts and bool(self.nvtx_names)
        if self.kind or alone:
            whole: list[tuple[int | None, float, float, int]] = [(None, *self.nvtx_span, 0)]
            self.sinks[key].consume(step_events(self.steps[key].by_kind[self.kind] if self.kind else whole))
        sink = self.sinks.pop(key)
        if not self.ranked and not sink.r_ts and not self.nvtx_names:
            absent = [t for t in (*GPU_TABLES, RUNTIME) if t not in self.db.tables]
            tables = f" (no {', '.join(absent)} table)" if absent else ""
            raise TraceError(
                f"{self.path}: no rows to analyse, no CUDA activity or runtime calls{tables}: nothing on the GPU to "
                "analyse (capture with nsys profile -t cuda,nvtx,osrt)"
            )
        meta = self._meta(key, sink)
        notes, workers = self._rank_notes(key, sink)
        if alone:
            notes.append("no step NVTX ranges: the whole capture is analysed as one window (its NVTX ranges)")
        k = sink.finish(meta, notes)
        if workers and k.loader_workers is None:
            k = dataclasses.replace(k, loader_workers=1)
        return k

    def _meta(self, key: int | None, sink: RowSink) -> dict[str, bytes]:
        """The Kineto metadata of rank ``key``: its place in the job and its GPU's properties, where known."""
        if any("nccl" in k.name.lower() for k in sink.kinds):
            self.backend = "nccl"
        rank, world = self.place or (self.keys.index(key), len(self.keys))
        dist: dict[str, object] = {"rank": rank, "world_size": world}
        if self.backend:
            dist["backend"] = self.backend
        meta = {"distributedInfo": msgspec.json.encode(dist)}
        gpu = gpu_for(self.meta, self.devices.get(key) if key is not None else None, key)
        if gpu is not None:
            meta["deviceProperties"] = msgspec.json.encode([gpu.props()])
        return meta


def _call_name(raw: object) -> str:
    """A runtime call's name without nsys's version suffix."""
    return VERSION_SUFFIX.sub("", raw) if isinstance(raw, str) else "(unnamed call)"


def _groups(keys: list[int | None], rows: Counter[int]) -> list[list[int | None]]:
    """The ranks in rank order, in runs whose GPU rows add up to at most GROUP_ROWS (a larger rank alone)."""
    groups: list[list[int | None]] = []
    for key in keys:
        if not groups or sum(rows[k] for k in groups[-1] if k is not None) + rows[key or 0] > GROUP_ROWS:
            groups.append([])
        groups[-1].append(key)
    return groups
