"""Nsight Systems export rows as the Kineto events the importer already understands, one sink per rank.

Each activity row becomes the event a PyTorch profiler trace has for the same thing, fed to
``kineto.KinetoSink`` in batches, so kernels, copies, runtime calls, phase marks, blocking calls and
host ops are kept exactly as for a Kineto trace and nothing downstream knows the source:

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> ``kernel`` (demangled name, stream, correlation id);
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` -> ``gpu_memcpy`` named as Kineto names copies,
  ``Memcpy HtoD (Pageable -> Device)``, from ``copyKind``/``srcKind``/``dstKind`` through the export's
  ``ENUM_CUDA_MEMCPY_OPER``/``ENUM_CUDA_MEM_KIND`` (the same numbering is built in for exports before 2022.4,
  which have no ENUM tables); ``CUPTI_ACTIVITY_KIND_MEMSET`` -> ``gpu_memset``, ``Memset (Device)``;
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``cuda_runtime`` named without nsys's ``_v<version>`` suffix
  (``cudaStreamSynchronize_v3020`` -> ``cudaStreamSynchronize``), so runtime_calls.call_class reads its API family;
- ``CUPTI_ACTIVITY_KIND_OVERHEAD`` JIT compilation and module loading -> Kineto's ``overhead`` events
  (``Driver Compiler``, ``Runtime Triggered Module Loading``, ``Lazy Function Loading``): start-up work;
- ``NVTX_EVENTS`` ranges (push/pop and start/end; name in ``text`` or ``textId``) -> ``cpu_op`` for
  ``torch.autograd.profiler.emit_nvtx``'s ``aten::<op>, seq = ...`` ranges (named ``aten::<op>``), else
  ``user_annotation`` (record_function, DataLoader, ``gpuanalyze:<part>`` phases); a range of a JIT
  compiler that names NVRTC (nvFuser's ``executor_utils::NVRTC``) is also start-up compilation.

Ranks are the processes with GPU activity, decoded from ``globalPid``/``globalTid`` (bits 24-47 hold
the process id, the Nsight Systems schema's encoding), not from ``PROCESSES`` (which can list every
process on the host); they are numbered by their lowest CUDA device, then pid. Rows of other processes
(a launcher, a compile worker) are left out. A capture without GPU rows is one CPU-only trace.

Host-side evidence (nsys_host.py): synchronisation records mark the runtime calls that waited for the
device, loop-thread OS waits for input are DataLoader waits, and ThreadNames names the loop thread and tells
a multi-process DataLoader.

Steps are NVTX ranges: ``--step-range NAME`` (``NAME``, or ``NAME`` plus a number), else ``ProfilerStep#N``,
else gpuanalyze's own ``gpuanalyze:step#N`` (``analyzer.profile(nvtx=True)``); without any, the capture
is one window.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from analyzer.errors import TraceError
from gpuanalyze.ingest.kineto import KinetoTrace
from gpuanalyze.ingest.kineto_events import _Args, _Event
from gpuanalyze.ingest.nsys_db import NsysDb
from gpuanalyze.ingest.nsys_host import (
    MAX_WAITS,
    NsysSink,
    OsWaits,
    Threads,
    loader_note,
    osrt_waits,
    read_syncs,
    sync_calls,
    thread_label,
    thread_names,
)
from gpuanalyze.ingest.nsys_meta import NsysMeta, gpu_for
from gpuanalyze.ingest.stream import ReadLimits

KERNEL, MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
OVERHEAD = "CUPTI_ACTIVITY_KIND_OVERHEAD"
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
OUR_STEP = "gpuanalyze:step#"
PROFILER_STEP = "ProfilerStep#"
_PID = "((globalPid >> 24) & 16777215)"
_TID_PID = "((globalTid >> 24) & 16777215)"
_TIMED = "typeof(start) = 'integer' AND typeof(end) = 'integer'"
#: Built-in ENUM_CUDA_MEM_KIND (same numbering as the table of 2022.4 on).
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static", 6: "Managed Static"}
#: Built-in ENUM_CUDA_MEMCPY_OPER.
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH"}
COPY_KINDS |= {10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_STEP_NUMBER = re.compile(r"[\s#:_=-]*(\d{1,15})$")
_MAX_COUNTED_NAMES = 4096


@dataclass(slots=True)
class _Steps:
    """Candidate step ranges of one rank: (number or None, start us, end us, thread)."""

    named: list[tuple[int | None, float, float, int]] = field(default_factory=list)
    profiler: list[tuple[int | None, float, float, int]] = field(default_factory=list)
    ours: list[tuple[int | None, float, float, int]] = field(default_factory=list)


def _number(rest: str) -> int | None:
    m = _STEP_NUMBER.fullmatch(rest)
    return int(m.group(1)) if m else None


def _copy_names(db: NsysDb) -> tuple[dict[int, str], dict[int, str]]:
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
    return copies, kinds


class NsysEvents:
    """Streams one export's tables into a KinetoSink per rank (``traces`` does it all)."""

    def __init__(
        self, db: NsysDb, meta: NsysMeta, limits: ReadLimits, step_range: str | None, name: str | None = None
    ) -> None:
        self.db, self.meta, self.limits, self.step_range = db, meta, limits, step_range
        self.path = name or str(db.path)
        """What messages name: the user's file (a report, not the export made of it)."""
        self.devices = self._gpu_processes()
        self.ranked = bool(self.devices)
        keys: list[int | None] = list(self.devices) if self.ranked else [None]
        self.syncs, self._syncs_cut = read_syncs(db)
        self.sinks = {k: NsysSink(self.path, limits, self._waits_of(k)) for k in keys}
        self.calls: dict[int, Counter[int]] = {}
        """pid -> runtime calls per thread (globalTid): the loop thread makes most."""
        self.os_waits: dict[int, OsWaits] = {}
        self.threads: dict[int, Threads] = {}
        self.capture_workers = 0
        self.loop: dict[int, int] = {}
        """pid -> its loop thread (globalTid)."""
        self._sync_only_ranks: list[int] = []
        self.steps = {k: _Steps() for k in keys}
        self.buffers: dict[int | None, list[_Event]] = {k: [] for k in keys}
        self.nvtx_names: Counter[str] = Counter()
        self._runtime_names: dict[str, str] = {}

    def _waits_of(self, key: int | None) -> set[int]:
        if key is not None:
            return self.syncs.get(key, set())
        return self.syncs[next(iter(self.syncs))] if len(self.syncs) == 1 else set()

    def _gpu_processes(self) -> dict[int, int | None]:
        """pid -> lowest CUDA device of its GPU rows, in rank order."""
        seen: dict[int, int | None] = {}
        for table in GPU_TABLES:
            if not self.db.has(table, "start", "end", "globalPid"):
                continue
            dev = "deviceId" if "deviceId" in self.db.columns(table) else "NULL"
            for pid, device in self.db.small(f"SELECT DISTINCT {_PID}, {dev} FROM {table}", limit=1 << 16):
                if isinstance(pid, int):
                    d = device if isinstance(device, int) else None
                    old = seen.get(pid)
                    seen[pid] = d if old is None else old if d is None else min(old, d)
        order = sorted(seen, key=lambda p: (seen[p] is None, seen[p] or 0, p))
        return {p: seen[p] for p in order}

    def _sink_key(self, pid: object) -> tuple[bool, int | None]:
        if not self.ranked:
            return True, None
        return (pid in self.sinks), pid if isinstance(pid, int) else None

    def _add(self, pid: object, event: _Event) -> None:
        ok, key = self._sink_key(pid)
        if not ok:
            return
        buf = self.buffers[key]
        buf.append(event)
        if len(buf) >= 8192:
            self._flush(key)

    def _flush(self, key: int | None) -> None:
        buf = self.buffers[key]
        if buf:
            self.sinks[key].consume(buf)
            self.buffers[key] = []

    def _flush_all(self) -> None:
        for key in self.buffers:
            self._flush(key)

    def _col(self, table: str, name: str) -> str:
        return name if name in self.db.columns(table) else "NULL"

    def _device_rows(self, table: str, cat: str, name_sql: str, extra: str) -> None:
        if not self.db.has(table, "start", "end"):
            return
        pid = _PID if "globalPid" in self.db.columns(table) else "0"
        stream, corr = self._col(table, "streamId"), self._col(table, "correlationId")
        sql = f"SELECT start, end, {pid}, {stream}, {corr}, {name_sql}{extra} FROM {table} WHERE {_TIMED}"
        for rows in self.db.batches(sql):
            for row in rows:
                start, end, p, s, c, name = row[:6]
                if cat == "gpu_memcpy":
                    name = self._copy_name(row[6], row[7], row[8])
                elif cat == "gpu_memset":
                    name = f"Memset ({self._kinds.get(row[6], 'Unknown') if isinstance(row[6], int) else 'Unknown'})"
                elif not isinstance(name, str):
                    name = "(unnamed kernel)"
                self._add(p, _Event("X", cat, name, start / 1e3, (end - start) / 1e3, None, _Args(s, c)))
        self._flush_all()

    def _copy_name(self, kind: object, src: object, dst: object) -> str:
        op = self._copies.get(kind, "Unknown") if isinstance(kind, int) else "Unknown"
        a = self._kinds.get(src, "Unknown") if isinstance(src, int) else "Unknown"
        b = self._kinds.get(dst, "Unknown") if isinstance(dst, int) else "Unknown"
        return f"Memcpy {op} ({a} -> {b})"

    def _kernels(self) -> None:
        cols = self.db.columns(KERNEL)
        col = next((c for c in ("demangledName", "shortName", "mangledName", "name") if c in cols), None)
        name_sql = self.db.string_sql(col) if col else "NULL"
        self._device_rows(KERNEL, "kernel", name_sql, "")

    def _copies_and_sets(self) -> None:
        self._copies, self._kinds = _copy_names(self.db)
        m = [self._col(MEMCPY, c) for c in ("copyKind", "srcKind", "dstKind")]
        self._device_rows(MEMCPY, "gpu_memcpy", "NULL", ", " + ", ".join(m))
        self._device_rows(MEMSET, "gpu_memset", "NULL", ", " + self._col(MEMSET, "memKind"))

    def _runtime_name(self, raw: str) -> str:
        got = self._runtime_names.get(raw)
        if got is None:
            got = _VERSION_SUFFIX.sub("", raw)
            if len(self._runtime_names) < _MAX_COUNTED_NAMES:
                self._runtime_names[raw] = got
        return got

    def _runtime(self) -> None:
        if not self.db.has(RUNTIME, "start", "end", "globalTid"):
            return
        name = self.db.string_sql("nameId") if "nameId" in self.db.columns(RUNTIME) else "NULL"
        corr = self._col(RUNTIME, "correlationId")
        sql = f"SELECT start, end, {_TID_PID}, globalTid, {corr}, {name} FROM {RUNTIME} WHERE {_TIMED}"
        calls = self.calls
        for rows in self.db.batches(sql):
            for start, end, p, tid, c, raw in rows:
                call = self._runtime_name(raw) if isinstance(raw, str) else "(unnamed call)"
                self._add(p, _Event("X", "cuda_runtime", call, start / 1e3, (end - start) / 1e3, tid, _Args(None, c)))
                if isinstance(p, int) and isinstance(tid, int) and (got := calls.get(p)) is not None:
                    got[tid] += 1
                elif isinstance(p, int) and isinstance(tid, int) and len(calls) < _MAX_COUNTED_NAMES:
                    calls[p] = Counter({tid: 1})
        self._flush_all()

    def _sync_only(self) -> None:
        """The synchronisation records of the ranks without runtime calls, as the calls they stand for."""
        ranks = [p for p in self.syncs if p not in self.calls and (p in self.sinks or not self.ranked)]
        for rows in sync_calls(self.db, ranks):
            for p, start, end, call in rows:
                self._add(p, _Event("X", "cuda_runtime", call, start / 1e3, (end - start) / 1e3, None, None))
        self._flush_all()
        self._sync_only_ranks = ranks

    def _loop_threads(self) -> dict[int, int]:
        """pid -> the thread that made most of its runtime calls (of the ranks kept)."""
        return {p: c.most_common(1)[0][0] for p, c in self.calls.items() if c and (p in self.sinks or not self.ranked)}

    def _host(self) -> None:
        loop = self.loop = self._loop_threads()
        ranks = {k: v for k, v in self.sinks.items() if k is not None}
        self.os_waits = osrt_waits(self.db, loop, ranks)
        pids = [p for p in self.sinks if p is not None] or list(loop)
        self.threads, self.capture_workers = thread_names(self.db, pids, loop)

    def _rank_notes(self, key: int | None, sink: NsysSink) -> tuple[list[str], bool]:
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
        note, workers = loader_note(threads, self.capture_workers, len(self.sinks))
        if note:
            notes.append(note)
        if self._syncs_cut:
            notes.append(
                f"more than {MAX_WAITS:,} synchronisation records: past them, blocking calls are read from their "
                "names only"
            )
        return notes, workers

    def _overhead(self) -> None:
        if not self.db.has(OVERHEAD, "start", "end", "globalTid", "overheadType"):
            return
        names = dict(OVERHEAD_CODES)
        if self.db.has("ENUM_CUPTI_OVERHEAD_TYPE", "id", "name"):
            rows = self.db.small("SELECT id, substr(name, 1, 64) FROM ENUM_CUPTI_OVERHEAD_TYPE")
            names = {i: OVERHEAD_NAMES[n] for i, n in rows if isinstance(i, int) and n in OVERHEAD_NAMES}
        sql = f"SELECT start, end, {_TID_PID}, globalTid, overheadType FROM {OVERHEAD} WHERE {_TIMED}"
        for rows in self.db.batches(sql):
            for start, end, p, tid, kind in rows:
                name = names.get(kind) if isinstance(kind, int) else None
                if name is not None:
                    self._add(p, _Event("X", "overhead", name, start / 1e3, (end - start) / 1e3, tid, None))
        self._flush_all()

    def _nvtx(self) -> None:
        cols = self.db.columns(NVTX)
        if not {"start", "end", "globalTid"} <= cols:
            return
        texts = [self.db.string_sql(c, ids=c == "textId") for c in ("text", "textId") if c in cols]
        name = f"COALESCE({', '.join(texts)})" if texts else "NULL"
        kinds = f" AND eventType IN {self._range_types()}" if "eventType" in cols else ""
        sql = f"SELECT start, end, {_TID_PID}, globalTid, {name} FROM {NVTX} WHERE {_TIMED}{kinds}"
        for rows in self.db.batches(sql):
            for start, end, p, tid, text in rows:
                if not isinstance(text, str):
                    continue
                self._range(p, tid, text, start / 1e3, end / 1e3)
        self._flush_all()

    def _range_types(self) -> tuple[int, ...]:
        if not self.db.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
            return NVTX_RANGES
        rows = self.db.small("SELECT id, substr(name, 1, 64) FROM ENUM_NSYS_EVENT_TYPE")
        ids = [i for i, n in rows if isinstance(i, int) and str(n).endswith(("PushPopRange", "StartEndRange"))]
        return tuple(ids) if len(ids) > 1 else NVTX_RANGES

    def _range(self, pid: object, tid: object, text: str, start: float, end: float) -> None:
        if len(self.nvtx_names) < _MAX_COUNTED_NAMES or text in self.nvtx_names:
            self.nvtx_names[text] += 1
        ok, key = self._sink_key(pid)
        if not ok:
            return
        thread = tid if isinstance(tid, int) else 0
        steps = self.steps[key]
        if self.step_range is not None and text.startswith(self.step_range):
            rest = text[len(self.step_range) :]
            if not rest or _number(rest) is not None:
                steps.named.append((_number(rest) if rest else None, start, end, thread))
                return
        if text.startswith(PROFILER_STEP):
            steps.profiler.append((_number(text[len(PROFILER_STEP) :]), start, end, thread))
            return
        if text.startswith(OUR_STEP):
            steps.ours.append((_number(text[len(OUR_STEP) :]), start, end, thread))
            return
        if "nvrtc" in text.lower():
            self.sinks[key].startup.add(text, start, end - start)
        cat = "user_annotation"
        if text.startswith("aten::"):
            cat, text = "cpu_op", text.split(",", 1)[0]
        self._add(pid, _Event("X", cat, text, start, end - start, thread, None))

    def _chosen_steps(self) -> str:
        """Feed the chosen step ranges as ProfilerStep#N annotations; which kind they were."""
        every = list(self.steps.values())
        if self.step_range is not None:
            if not any(s.named for s in every):
                common = ", ".join(repr(n[:40]) for n, _ in self.nvtx_names.most_common(5)) or "none"
                raise TraceError(
                    f"{self.path}: no NVTX range named {self.step_range!r} (most frequent NVTX ranges: {common})"
                )
            pick, kind = (lambda s: s.named), f"NVTX ranges named {self.step_range!r}"
        elif any(s.profiler for s in every):
            pick, kind = (lambda s: s.profiler), "ProfilerStep#N NVTX ranges"
        elif any(s.ours for s in every):
            pick, kind = (lambda s: s.ours), "gpuanalyze:step#N NVTX ranges"
        else:
            return ""
        for key, steps in self.steps.items():
            ranges = sorted(pick(steps), key=lambda r: r[1])
            own = all(n is not None for n, *_ in ranges)
            if own:  # a step restarted (gpuanalyze's first step, after the trace file opened): its last range
                ranges = sorted({n: r for r in ranges if (n := r[0]) is not None}.values(), key=lambda r: r[1])
            for i, (n, start, end, tid) in enumerate(ranges):
                step = n if own and n is not None else i
                event = _Event("X", "user_annotation", f"ProfilerStep#{step}", start, end - start, tid, None)
                self.buffers[key].append(event)
        self._flush_all()
        return kind

    def traces(self) -> tuple[list[KinetoTrace], str]:
        """One KinetoTrace per rank (one CPU-only trace without GPU rows), and what the steps are."""
        self._kernels()
        self._copies_and_sets()
        self._runtime()
        self._overhead()
        self._nvtx()
        self._sync_only()
        self._host()
        kind = self._chosen_steps()
        world = len(self.sinks)
        backend = "nccl" if any("nccl" in k.name.lower() for s in self.sinks.values() for k in s.kinds) else None
        out = []
        if not self.ranked and not self.sinks[None].r_ts:
            ranges = sum(self.nvtx_names.values())
            common = ", ".join(n[:40] for n, _ in self.nvtx_names.most_common(4))
            what = f"only {ranges:,} NVTX ranges ({common})" if ranges else "no rows to analyse"
            raise TraceError(
                f"{self.path}: {what}, no CUDA activity or runtime calls: nothing on the GPU to analyse "
                "(capture with nsys profile -t cuda,nvtx,osrt)"
            )
        for rank, (key, sink) in enumerate(self.sinks.items()):
            dist: dict[str, object] = {"rank": rank, "world_size": world}
            if backend:
                dist["backend"] = backend
            meta = {"distributedInfo": msgspec.json.encode(dist)}
            gpu = gpu_for(self.meta, self.devices.get(key) if key is not None else None, key)
            if gpu is not None:
                meta["deviceProperties"] = msgspec.json.encode([gpu.props()])
            notes, workers = self._rank_notes(key, sink)
            k = sink.finish(meta, notes)
            if workers and k.loader_workers is None:
                k = dataclasses.replace(k, loader_workers=1)
            out.append(k)
        return out, kind
