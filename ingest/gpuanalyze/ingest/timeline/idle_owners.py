"""Who owned each idle interval of the GPU: the timeline read the way an engineer reads it (docs/idle-owners.md,
"Owners by behaviour", states each rule and the API behaviour it rests on).

The GPU timeline (the union of every kernel, memcpy and memset) is cut into busy and idle intervals over the whole
capture. A gap ended by a kernel whose launch call returned after the gap began waited for the host: the host's
state owns each instant until the call returned, then the kernel's launch latency is ``launch`` (``sync`` where the
host sat in a blocking call meanwhile). A gap whose kernel was launched before it began is ``queued``; one with no
kernel after it is the host's. Every idle instant gets one owner, by schema.IDLE_OWNERS' precedence: graph capture
and start-up work wherever the GPU idles, then (only where it waited for the host) the DataLoader, a blocking call
(a call that returns only when device work it waits on is done; once it returned the host's state owns the time
again), a collective, a launch or dispatch, a CPU op that launches nothing, and nothing recorded (``host_idle``:
host work the trace does not show); ``queued`` last. The owners of a window add up to its idle time.
"""

from __future__ import annotations

import numpy as np

from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.free_memory import between_passes
from gpuanalyze.ingest.timeline.intervals import (
    EMPTY,
    Clipper,
    Seg,
    intersect,
    minus,
    outermost,
    outside,
    segments,
    union,
)
from gpuanalyze.ingest.timeline.model import Timeline
from gpuanalyze.ingest.timeline.runtime_calls import (
    BLOCKING,
    CAPTURE_BEGIN,
    CAPTURE_END,
    COLLECTIVE_OPS,
    SCALAR_READ_OPS,
)
from gpuanalyze.ingest.timeline.startup_work import ALLOCATION, COMPILATION, DEVICE_SETUP, MODULE_LOADING, kind_of
from gpuanalyze.ingest.timeline.trace_events import MARK_LOADER
from gpuanalyze.ingest.trace import schema as S

#: A kernel launch call this long while the GPU idles is loading or compiling the kernel (lazy module loading,
#: PTX JIT): a launch itself takes microseconds (CUDA's launch latency is ~2-10 us).
LONG_LAUNCH_US = 1000.0
#: A runtime call at least this long that returns when device work it overlapped ends waited for that work.
BEHAVIOUR_MIN_US = 50.0
BEHAVIOUR_EPS_US = 20.0
#: Allocation repeats (churn, not start-up) when it comes in at least this share of the windows after the first, and
#: in REPEAT_MIN_WINDOWS of them at least: in most iterations of the steady state. PyTorch's caching allocator calls
#: cudaMalloc only to grow its pool, over a run's first iterations, and frees only on empty_cache() or to retry a
#: failed allocation: one or two windows with allocations cannot tell a pool still growing from churn.
REPEAT_SHARE = 0.5
REPEAT_MIN_WINDOWS = 3
#: What device work a runtime call enqueued (by correlation id).
NONE, KERNEL, COPY, SET = 0, 1, 2, 3
_Windows = list[tuple[int, float, float]]


class IdleOwners:
    """The owner of every idle instant of a trace's GPU timeline, cut per window in O(log n)."""

    def __init__(
        self,
        k: Timeline,
        launch: tuple[np.ndarray, np.ndarray, np.ndarray],
        blocking_calls: np.ndarray,
        busy: Clipper,
        by_start: tuple[np.ndarray, np.ndarray],
        windows: _Windows,
    ) -> None:
        """``launch``: each device event's launch-call start and end (-1 without one), each runtime call's device
        work (``call_kinds``); ``blocking_calls``: the
        runtime calls known to block (sync family and copies to pageable memory); ``busy``: the union of device
        activity; ``by_start``: the device events' stable order by start, and their starts in it; ``windows``:
        the (step, start, end) the capture is judged in."""
        gpu, rt = k.gpu, k.runtime
        starts = [a.start for a in (gpu, rt, k.cpu, k.host_ops) if a.start.size]
        ends = [a.end for a in (gpu, rt, k.cpu, k.host_ops) if a.end.size]
        starts += [np.array([lo for _, lo, _ in windows], dtype=np.float64)] if windows else []
        ends += [np.array([hi for _, _, hi in windows], dtype=np.float64)] if windows else []
        lo_all = min(float(x.min()) for x in starts) if starts else 0.0
        hi_all = max(float(x.max()) for x in ends) if ends else 0.0
        segs = (busy.s, busy.e)
        idle = outside(lo_all, hi_all, segs) if segs[0].size else EMPTY
        launched = np.sort(launch[0][launch[0] >= 0])
        owned = self._paint(k, launch[1:], launched, blocking_calls, segs, idle, by_start, windows)
        self.by_owner = {o: Clipper(*owned.get(o, EMPTY)) for o in S.IDLE_OWNERS}
        """Each owner's idle time as disjoint sorted segments."""
        self._busy = busy

    def _paint(
        self,
        k: Timeline,
        launch: tuple[np.ndarray, np.ndarray],
        launched: np.ndarray,
        blocking: np.ndarray,
        busy: Seg,
        idle: Seg,
        by_start: tuple[np.ndarray, np.ndarray],
        windows: _Windows,
    ) -> dict[str, Seg]:
        rt = k.runtime
        codes = [{"memcpy": COPY, "memset": SET}.get(x.category, KERNEL) for x in k.kinds]
        enqueued = np.array([*codes, NONE], np.int8)[launch[1]]
        owned: dict[str, Seg] = {}
        remaining = idle
        for owner, segs in (("graph_capture", _capture(k, launched)), *_startup(k, enqueued, windows)):
            remaining = _take(owned, remaining, owner, segs)
        between_passes(k.gpu.start.size)  # what the start-up owners freed (free_memory.py), before the gaps' arrays
        host, latency, queued = _gap_kinds(k, launch[0], idle, by_start)
        block = union(
            segments(rt.start[blocking], rt.end[blocking]),
            _behaviour_blocking(k, enqueued, busy),
            _named_ops(k, SCALAR_READ_OPS),
        )
        waiting = intersect(remaining, host)
        del host
        loader = k.cpu_mark == MARK_LOADER
        waiting = _take(owned, waiting, "data_loader", segments(k.cpu.start[loader], k.cpu.end[loader]))
        waiting = _take(owned, waiting, "sync", block)
        waiting = _take(owned, waiting, "collective", _named_ops(k, COLLECTIVE_OPS))
        between_passes(k.gpu.start.size)  # before the ops' pass, the largest of them
        waiting, quiet = _take_launching(owned, waiting, k, enqueued > NONE)
        waiting = _take(owned, waiting, "launch", _during(waiting, rt.start, rt.end))
        owned["host_idle"] = _take_quiet(owned, waiting, quiet)
        del quiet
        between_passes(k.gpu.start.size)  # what the ops' pass freed, before the gaps' last owners
        latent = intersect(remaining, latency)
        owned["sync"] = union(owned["sync"], intersect(latent, block))
        owned["launch"] = union(owned["launch"], minus(latent, block))
        owned["queued"] = intersect(remaining, queued)
        return owned

    def sync_owned_ms(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The ``sync``-owned idle (ms) while the host sat in each blocking call, cut at the next call's start so
        that none is counted twice. ``start`` is sorted; the calls not in it (``.item()`` ops, calls blocking by
        behaviour) own the rest."""
        if start.size == 0:
            return np.empty(0)
        stop = end.copy()
        stop[:-1] = np.minimum(stop[:-1], start[1:])
        return self.by_owner["sync"].lengths(start, np.maximum(stop, start)) / 1e3

    def fields(self, lo: float, hi: float) -> dict[str, float | bool]:
        """The KernelStats fields of [lo, hi): each owner's idle time in it (ms), the window's idle time."""
        out: dict[str, float | bool] = {S.owner_field(o): c.length(lo, hi) / 1e3 for o, c in self.by_owner.items()}
        out["window_idle_ms"] = max(0.0, (hi - lo) - self._busy.length(lo, hi)) / 1e3
        out["owners"] = True
        return out


def correlated(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """For each of ``ids`` (correlation ids), the index of the last element of ``keys`` equal to it; -1 where none."""
    out = np.full(ids.size, -1, np.int64)
    if keys.size == 0 or ids.size == 0:
        return out
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys[order], ids, side="right") - 1
    found = (pos >= 0) & (ids >= 0)
    found[found] = keys[order[pos[found]]] == ids[found]
    out[found] = order[pos[found]]
    return out


def call_kinds(k: Timeline) -> np.ndarray:
    """Each runtime call's device work (an index into ``k.kinds``, by correlation id); -1 where it enqueued none."""
    return np.append(k.gpu_kind, np.int32(-1))[correlated(k.gpu_correlation, k.runtime_correlation)]


def _capture(k: Timeline, launched: np.ndarray) -> Seg:
    """Graph-capture regions: each begin call to the end call that follows it; a begin followed by another begin or
    by nothing (a capture that never ends) up to the first device work launched after it, or the next begin."""
    cls = k.runtime_class
    begin = cls == CAPTURE_BEGIN
    if not begin.any():
        return EMPTY
    rt = k.runtime
    sel = np.flatnonzero(begin | (cls == CAPTURE_END))
    t = np.where(begin[sel], rt.start[sel], rt.end[sel])
    order = np.argsort(t, kind="stable")
    t, is_begin = t[order], begin[sel][order]
    b = np.flatnonzero(is_begin)
    nxt = np.minimum(b + 1, t.size - 1)
    ended = (b + 1 < t.size) & ~is_begin[nxt]
    last = float(max(rt.end.max(), k.gpu.end.max() if k.gpu.end.size else 0.0))
    stop = np.where(ended, t[nxt], np.append(t[b[1:]], last))
    if launched.size:
        after = np.searchsorted(launched, t[b], side="right")
        ran = ~ended & (after < launched.size)
        stop[ran] = np.minimum(stop[ran], launched[np.minimum(after, launched.size - 1)][ran])
    return segments(t[b], stop)


def allocation_repeats(starts: np.ndarray, windows: _Windows) -> bool:
    """Allocation calls (``starts``) in REPEAT_SHARE or more of the windows after the first, and in
    REPEAT_MIN_WINDOWS of them at least: churn. Otherwise they are start-up (first allocations, a pool growing)."""
    if len(windows) < 2 or starts.size == 0:
        return False
    bounds = np.array(sorted((lo, hi) for _, lo, hi in windows)[1:], dtype=np.float64)
    s = np.sort(starts)
    n = np.searchsorted(s, bounds[:, 1]) - np.searchsorted(s, bounds[:, 0])
    having = int((n > 0).sum())
    return having >= REPEAT_MIN_WINDOWS and having >= REPEAT_SHARE * bounds.shape[0]


def _startup(k: Timeline, enqueued: np.ndarray, windows: _Windows) -> list[tuple[str, Seg]]:
    """Start-up work by owner, with long kernel launch calls counted as module loading and allocation as
    device set-up unless it repeats (``allocation_repeats``)."""
    w, rt = k.startup, k.runtime
    of = np.array([kind_of(n) for n in w.names] or [""], dtype=object)[w.name]

    def seg(kind: str) -> Seg:
        sel = of == kind
        return segments(w.start[sel], w.end[sel])

    long = (enqueued == KERNEL) & ((rt.end - rt.start) >= LONG_LAUNCH_US)
    if k.runtime_class.size:
        long &= k.runtime_class != BLOCKING
    alloc = seg(ALLOCATION)
    churn = allocation_repeats(alloc[0], windows)
    return [
        ("compilation", seg(COMPILATION)),
        ("module_loading", union(seg(MODULE_LOADING), segments(rt.start[long], rt.end[long]))),
        ("device_setup", seg(DEVICE_SETUP) if churn else union(seg(DEVICE_SETUP), alloc)),
        ("allocator", alloc if churn else EMPTY),
    ]


def _gap_kinds(
    k: Timeline, launch: np.ndarray, idle: Seg, by_start: tuple[np.ndarray, np.ndarray]
) -> tuple[Seg, Seg, Seg]:
    """The idle gaps split by what they waited for: (the host, until the next launch), (the next kernel's launch
    latency), (work already queued)."""
    a, b = idle
    if a.size == 0:
        return EMPTY, EMPTY, EMPTY
    start = k.gpu.start
    order, start_sorted = by_start
    pos = np.searchsorted(start_sorted, b, side="left")
    ends_with = pos < start.size
    nxt = order[np.minimum(pos, start.size - 1)]
    del pos  # the temporaries go as soon as they are used: this runs on every gap of the capture at once
    ends_with &= start[nxt] <= b + 1e-6
    # the kernel that ends the gap: the earliest launch among the device events starting at b
    L = np.where(ends_with, launch[nxt], -1.0)
    del nxt, ends_with
    queued = (L >= 0) & (a >= L)
    late = (a < L) & (b > L)
    host = (np.where(late, np.minimum(L, b), b)[~queued], a[~queued])
    return segments(host[1], host[0]), segments(L[late], b[late]), segments(a[queued], b[queued])


def _behaviour_blocking(k: Timeline, enqueued: np.ndarray, busy: Seg) -> Seg:
    """Runtime calls that end when device work they overlapped ends, enqueuing none themselves or only a copy."""
    rt = k.runtime
    if rt.start.size == 0 or busy[0].size == 0:
        return EMPTY
    dur = rt.end - rt.start
    cand = np.flatnonzero((dur >= BEHAVIOUR_MIN_US) & ((enqueued == NONE) | (enqueued == COPY)))
    if cand.size == 0:
        return EMPTY
    e = rt.end[cand]
    j = np.searchsorted(busy[1], e, side="right") - 1
    ok = j >= 0
    jj = np.maximum(j, 0)
    ok &= (busy[1][jj] > rt.start[cand]) & (e - busy[1][jj] <= BEHAVIOUR_EPS_US)
    return segments(rt.start[cand[ok]], rt.end[cand[ok]])


def _take(owned: dict[str, Seg], waiting: Seg, owner: str, segs: Seg) -> Seg:
    """``owner`` gets the part of ``waiting`` inside ``segs`` (with what it had); what is left of ``waiting``."""
    _give(owned, owner, intersect(waiting, segs))
    return minus(waiting, segs)


def _give(owned: dict[str, Seg], owner: str, got: Seg) -> None:
    owned[owner] = union(owned[owner], got) if owner in owned else got


def _during(waiting: Seg, start: np.ndarray, end: np.ndarray) -> Seg:
    """The segments of the intervals (calls, ops) that overlap ``waiting``: inside it (or inside any part of it), the
    same segments as all intervals' (the rest are never merged, sorted or held)."""
    if waiting[0].size == 0 or start.size == 0:
        return EMPTY
    keep = _overlapping(waiting, start, end)
    return segments(start[keep], end[keep])


def _overlapping(waiting: Seg, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which intervals overlap a segment of ``waiting`` (not empty)."""
    i = np.minimum(np.searchsorted(waiting[1], start, side="right"), waiting[0].size - 1)  # the first ending after
    keep = waiting[0][i] < end
    keep &= waiting[1][i] > start
    return keep


def _named_ops(k: Timeline, prefixes: tuple[str, ...]) -> Seg:
    ops = k.host_ops
    if ops.start.size == 0:
        return EMPTY
    sel = ops.named(prefixes)
    return segments(ops.start[sel], ops.end[sel])


def _take_launching(owned: dict[str, Seg], waiting: Seg, k: Timeline, enqueue: np.ndarray) -> tuple[Seg, list[Seg]]:
    """``launch`` takes its part of ``waiting`` from the outermost CPU ops of each thread that launched device work
    on that thread, a thread at a time, and of those only the ops that overlap ``waiting`` (no union of every thread's
    ops is held); what is left of ``waiting``, and each thread's outermost ops that launched none and overlap it
    (merged) for ``_take_quiet``."""
    ops = k.host_ops
    if ops.start.size == 0:
        return waiting, []
    rt = k.runtime
    known_tid = k.runtime_tid.size == rt.start.size
    by_thread = bool((ops.tid[1:] >= ops.tid[:-1]).all())  # a device trace's ops come sorted (CallSites.ops)
    quiet = []
    for tid in np.unique(ops.tid).tolist():
        launching, idle_ops = _thread_ops(
            ops,
            slice(*np.searchsorted(ops.tid, (tid, tid + 1))) if by_thread else np.flatnonzero(ops.tid == tid),
            rt.start[enqueue & (k.runtime_tid == tid)] if known_tid else rt.start[enqueue],
            waiting,
        )
        waiting = _take(owned, waiting, "launch", launching)
        del launching  # each thread's segments go before the next thread's are made
        quiet.append(idle_ops)
    return waiting, quiet


def _take_quiet(owned: dict[str, Seg], waiting: Seg, quiet: list[Seg]) -> Seg:
    """``cpu_ops`` takes its part of ``waiting`` from each thread's quiet ops in turn; what is left. Taken thread by
    thread, the part is the same set as taken from their union, but pieces of one segment of ``waiting`` may come
    from two threads and touch: intersecting ``waiting`` with their merge gives the very segments the union's
    intersection gives (pieces cut only where ``waiting``'s own segments end)."""
    before, pieces = waiting, []
    for segs in quiet:
        pieces.append(intersect(waiting, segs))
        waiting = minus(waiting, segs)
    _give(owned, "cpu_ops", pieces[0] if len(pieces) == 1 else intersect(before, union(*pieces)) if pieces else EMPTY)
    return waiting


def _thread_ops(ops: HostOps, sel: np.ndarray | slice, calls: np.ndarray, waiting: Seg) -> tuple[Seg, Seg]:
    """Of one thread's ops (``sel``), the segments of the outermost that launched device work (a start in ``calls``)
    and of those that did not, of the ops that overlap ``waiting`` (what waits later is part of it); a function of its
    own: its temporaries go before the next thread's."""
    if waiting[0].size == 0:
        return EMPTY, EMPTY
    s, e = ops.start[sel], ops.end[sel]
    ahead, tie = s[1:] > s[:-1], s[1:] == s[:-1]
    if not bool((ahead | (tie & (e[1:] <= e[:-1]))).all()):  # not yet by start, the longer first (a stable sort)
        order = np.lexsort((-e, s))
        s, e = s[order], e[order]
        del order
    del ahead, tie
    top = outermost(s, e)
    if not bool(top.all()):  # ops nested in others were mostly dropped as they were read (blocking_calls.reaching)
        s, e = s[top], e[top]
    del top
    calls.sort()  # the caller's temporary, sorted where it is
    n = np.searchsorted(calls, e, side="left")
    n -= np.searchsorted(calls, s, side="left")
    launched = n > 0
    del n
    near = _overlapping(waiting, s, e)
    quiet = near & ~launched
    near &= launched
    return segments(s[near], e[near]), segments(s[quiet], e[quiet])
