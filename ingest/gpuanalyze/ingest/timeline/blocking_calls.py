"""Who made each blocking runtime call: the CPU op around it and the code that called that op.

The Kineto sink drops ordinary CPU ops, so it keeps, in compact arrays (start, end, thread, interned
name: about 30 bytes each), only the events that could name a blocking call or an idle GPU's code: CPU ops
(``cpu_op``), callers: ``user_annotation`` (``record_function``) slices other than gpuanalyze's own step and
phase marks, and ``nn.Module: ...`` slices (``with_stack``/``with_modules``), and the user's Python frames
(``python_function`` events of ``with_stack``, named ``file(line): function``, the file with every ``sys.path``
prefix taken off: torch/profiler/python_tracer.py, ``_prefix_regex``). A user frame is none of: a ``<...>``
name (``<built-in method ...>``, ``<frozen runpy>``), PyTorch and its domain libraries (``torch*``), the
standard library (``sys.stdlib_module_names``: ``threading.py``), a path still under site-packages,
dist-packages or a Python installation. It also keeps, for each runtime call that may block the host
(synchronize calls and every ``cudaMemcpy*``), its thread and name.

After parsing, ``attribute`` matches each call to the outermost CPU op around it on its thread (the
op the Python code called: ``aten::to``, not its inner ``aten::copy_``) and the innermost caller
around it, by one sort and a stack sweep per thread: O(n log n) time, O(n) memory. Events that
overlap without nesting (malformed or hostile traces) cost at most ``_PROBE`` stack looks per call.
"""

from __future__ import annotations

import re
import sys
from array import array
from dataclasses import dataclass

import numpy as np

from gpuanalyze.ingest.timeline.intervals import outermost_by_thread
from gpuanalyze.ingest.timeline.name_table import HostIntervals, NamedEvents, NameTable
from gpuanalyze.ingest.timeline.runtime_calls import COLLECTIVE_OPS, SCALAR_READ_OPS

#: Stack entries looked at per call when the events around it do not nest.
_PROBE = 8
#: Timestamps are microseconds written with limited precision: a call may start or end this much outside its op.
_EPS_US = 1e-3
TID_LIMIT = 1 << 62
#: Distinct names kept (hostile traces: every op named differently); the rest share OTHER_NAME.
MAX_NAMES = 1 << 16
OTHER_NAME = "(other names)"
MODULE_PREFIX = "nn.Module: "
#: user_annotation names that are gpuanalyze's step and phase marks, not a caller.
NOT_CALLERS = ("ProfilerStep#", "enumerate(Data", "gpuanalyze:")
OP, CALLER, FRAME = 0, 1, 2
_FRAME = re.compile(r"(.+)\(\d+\): \S")
_LIBRARY_DIRS = ("site-packages/", "dist-packages/", "/lib/python")
_STDLIB = frozenset(sys.stdlib_module_names)


@dataclass(frozen=True, slots=True)
class BlockingCalls(NamedEvents):
    """The runtime calls that may block the host, with the op and caller around each (-1: none)."""

    DTYPES = (np.int64, np.int32, np.int32, np.int32)
    index: np.ndarray
    """Index of each call in Timeline.runtime."""
    call: np.ndarray
    op: np.ndarray
    caller: np.ndarray
    names: tuple[str, ...]
    """What call, op and caller index into."""


@dataclass(frozen=True, slots=True)
class HostOps(HostIntervals):
    """CPU ops (``cpu_op`` events; nested ones where ``CallSites.ops`` keeps them) with their thread and name."""

    DTYPES = (np.float64, np.float64, np.int64, np.int32)
    tid: np.ndarray
    name: np.ndarray
    names: tuple[str, ...]

    def named(self, prefixes: tuple[str, ...]) -> np.ndarray:
        """Which ops' names start with one of ``prefixes`` (a mask over the ops, tested once per distinct name)."""
        if self.start.size == 0:
            return np.zeros(0, bool)
        return np.array([n.startswith(prefixes) for n in self.names], dtype=bool)[self.name]


def role_of(name: str, cat: str) -> int:
    """A CPU event's role by name and category alone: OP, CALLER, FRAME (a user's Python frame), -1: not kept."""
    if name.startswith(NOT_CALLERS):
        return -1
    if cat == "cpu_op" or cat == "operator":
        return OP
    if cat == "user_annotation" or (cat == "python_function" and name.startswith(MODULE_PREFIX)):
        return CALLER
    return FRAME if cat == "python_function" and is_user_frame(name) else -1


def is_user_frame(name: str) -> bool:
    """A ``python_function`` name of the user's own code (module docstring)."""
    m = _FRAME.match(name) if not name.startswith("<") else None
    if m is None or any(d in m.group(1) for d in _LIBRARY_DIRS):
        return False
    top = m.group(1).split("/", 1)[0].removesuffix(".py")
    return name.startswith("/") or not (top.startswith("torch") or top in _STDLIB)


class CallSites:
    """What the sink keeps to name blocking calls (module docstring); ``len`` counts the kept events."""

    def __init__(self) -> None:
        self.dropped = False
        self._reset()

    def _reset(self) -> None:
        self.e_ts, self.e_end, self.e_tid = array("d"), array("d"), array("q")
        self.e_name, self.e_caller = array("i"), array("b")
        self.c_index, self.c_tid, self.c_name = array("q"), array("q"), array("i")
        self._names = NameTable(MAX_NAMES, OTHER_NAME)
        self._tid_id: dict[object, int] = {}

    def __len__(self) -> int:
        return len(self.e_ts) + len(self.c_index)

    def thread_id(self, tid: object) -> int:
        if type(tid) is int and -TID_LIMIT <= tid < TID_LIMIT:
            return tid
        got = self._tid_id.get(tid)
        if got is None:  # string, huge or missing thread ids: ids apart from the integer ones
            got = self._tid_id[tid] = -1 - TID_LIMIT - len(self._tid_id)
        return got

    def add_cpu(self, name: str, role: int, ts: float, dur: float, tid: object) -> None:
        """A CPU event whose ``role`` is OP, CALLER or FRAME."""
        self.e_ts.append(ts)
        self.e_end.append(ts + dur)
        self.e_tid.append(self.thread_id(tid))
        self.e_name.append(self._names.id(name))
        self.e_caller.append(role)

    def add_call(self, index: int, name: str, tid: object) -> None:
        """Runtime call number ``index``, if it may block (runtime_calls.may_block)."""
        if self.dropped:
            return
        self.c_index.append(index)
        self.c_tid.append(self.thread_id(tid))
        self.c_name.append(self._names.id(name))

    def frames(self) -> HostOps:
        """The user's Python frames, or the callers (record_function ranges) of a capture without them."""
        got = self.ops(FRAME)
        return got if got.start.size else self.ops(CALLER)

    def drop(self) -> None:
        """Keep nothing more (the trace has too many events to name its blocking calls)."""
        self._reset()
        self.dropped = True

    def ops(self, role: int = OP, nested: bool = True) -> HostOps:
        """The kept CPU ops (or events of another role), for the idle-owner pass; ``nested=False``: only those that
        change what it reads of a device trace's ops (``outermost`` with ``reach``, and the ops it reads by name)."""
        if not self.e_ts:
            return HostOps.empty()
        op = np.frombuffer(self.e_caller, dtype=np.int8) == role
        s, e = np.frombuffer(self.e_ts, dtype=np.float64), np.frombuffer(self.e_end, dtype=np.float64)
        tid, name = np.frombuffer(self.e_tid, dtype=np.int64), np.frombuffer(self.e_name, dtype=np.int32)
        if not nested:  # in the order every pass sorts them by (thread, start, longer first): none sorts again
            idx = np.flatnonzero(op)
            order, keep = _reach(s[idx], e[idx], tid[idx], read_by_name(self._names.names)[name[idx]])
            idx = idx[order[keep]]
            return HostOps(s[idx], e[idx], tid[idx], name[idx], tuple(self._names.names))
        return HostOps(s[op], e[op], tid[op], name[op], tuple(self._names.names))

    def attribute(self, r_start: np.ndarray, r_end: np.ndarray) -> BlockingCalls:
        """Each kept call with the outermost CPU op and the innermost caller around it."""
        if not self.c_index:
            return BlockingCalls.empty()
        idx = np.frombuffer(self.c_index, dtype=np.int64).copy()
        c_tid = np.frombuffer(self.c_tid, dtype=np.int64)
        c_s, c_e = r_start[idx], r_end[idx]
        op = np.full(idx.size, -1, np.int32)
        caller = np.full(idx.size, -1, np.int32)
        if self.e_ts:
            e_s = np.frombuffer(self.e_ts, dtype=np.float64)
            e_e = np.frombuffer(self.e_end, dtype=np.float64)
            e_tid = np.frombuffer(self.e_tid, dtype=np.int64)
            e_name = np.frombuffer(self.e_name, dtype=np.int32)
            roles = np.frombuffer(self.e_caller, dtype=np.int8)
            for role, out, outermost in ((OP, op, True), (CALLER, caller, False)):
                sel = _near_calls(
                    np.flatnonzero((roles == role) & np.isin(e_tid, c_tid)), (e_s, e_e, e_tid), c_s, c_tid
                )
                if sel.size:
                    out[:] = _sweep(e_s[sel], e_e[sel], e_tid[sel], e_name[sel], c_s, c_e, c_tid, outermost)
        return BlockingCalls(
            idx, np.frombuffer(self.c_name, dtype=np.int32).copy(), op, caller, tuple(self._names.names)
        )


def read_by_name(names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Which of ``names`` are ops the idle-owner pass reads by name (``.item()`` reads, collectives)."""
    return np.array([n.startswith(SCALAR_READ_OPS + COLLECTIVE_OPS) for n in names], bool)


def reaching(start: np.ndarray, end: np.ndarray, tid: np.ndarray, read: np.ndarray) -> np.ndarray:
    """Which ops change what the idle-owner pass reads of a device trace's ops: per thread, those no earlier op
    contains or that end after every earlier one (``outermost`` with ``reach``), and those ``read`` by name."""
    order, keep = _reach(start, end, tid, read)
    out = np.empty(start.size, bool)
    out[order] = keep
    return out


def _reach(start: np.ndarray, end: np.ndarray, tid: np.ndarray, read: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reaching``, in the order of (thread, start, the longer first): that order, and which to keep in it."""
    order = np.lexsort((-end, start, tid))
    return order, read[order] | outermost_by_thread(start[order], end[order], tid[order], reach=True)


def _near_calls(idx: np.ndarray, e: tuple[np.ndarray, ...], c_s: np.ndarray, c_tid: np.ndarray) -> np.ndarray:
    """The events of ``idx`` (``e``: all events' start, end, thread) around the start of a call on their thread:
    only they can be around a call (where events nest, the sweep's stack holds no other at a call's start)."""
    out = [idx[:0]]
    for t in np.unique(c_tid).tolist():
        starts = np.sort(c_s[c_tid == t])
        for part in np.array_split(idx, idx.size // (1 << 20) + 1):  # a million events at a time
            part = part[e[2][part] == t]
            j = np.minimum(np.searchsorted(starts, e[0][part] - _EPS_US), starts.size - 1)
            out.append(part[(starts[j] >= e[0][part] - _EPS_US) & (starts[j] <= e[1][part] + _EPS_US)])
    return np.sort(np.concatenate(out))


def _sweep(
    e_s: np.ndarray,
    e_e: np.ndarray,
    e_tid: np.ndarray,
    e_name: np.ndarray,
    c_s: np.ndarray,
    c_e: np.ndarray,
    c_tid: np.ndarray,
    outermost: bool,
) -> np.ndarray:
    """Name id of the outermost (or innermost) interval around each call on its thread; -1 where none."""
    n, m = e_s.size, c_s.size
    tid = np.concatenate([e_tid, c_tid])
    start = np.concatenate([e_s, c_s])
    end = np.concatenate([e_e, c_e])
    is_call = np.concatenate([np.zeros(n, np.int8), np.ones(m, np.int8)])
    # by thread, then start; intervals before calls that start with them, longer intervals first
    order = np.lexsort((-end, is_call, start, tid)).tolist()
    tids, starts, ends, names = tid.tolist(), start.tolist(), end.tolist(), e_name.tolist()
    out = [-1] * m
    stack: list[int] = []
    thread = None
    for i in order:
        if tids[i] != thread:
            thread, stack = tids[i], []
        s = starts[i]
        while stack and ends[stack[-1]] < s - _EPS_US:
            stack.pop()
        if i < n:
            stack.append(i)
            continue
        e = ends[i]
        probe = stack[:_PROBE] if outermost else stack[: -_PROBE - 1 : -1]
        for j in probe:
            if starts[j] <= s + _EPS_US and ends[j] >= e - _EPS_US:
                out[i - n] = names[j]
                break
    return np.array(out, dtype=np.int32)
