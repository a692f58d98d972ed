"""Who owned each idle interval of the GPU: the timeline read the way an engineer reads it.

The GPU timeline (the union of every kernel, memcpy and memset) is cut into busy and idle intervals over
the whole capture. Each idle gap ends with a kernel whose launch call started at L:

- L after the gap began: the GPU waited for the host. Until the launch call returned the host's state at each
  instant owns the time (a launch call that blocks, a copy to pageable memory, is a blocking call); from then
  to the kernel's start it is the launch's own latency (``launch``);
- L before the gap began: the work was already queued and the GPU waited on a dependency (an event, another
  stream, a graph's internal edges): ``queued``;
- no kernel after it (the capture's tail) or no launch record: the host's state owns it.

Every idle instant gets exactly one owner, by this precedence (schema.IDLE_OWNERS):

1. ``graph_capture``: inside ``cudaStreamBeginCapture``..``EndCapture`` (launches recorded, nothing runs);
2. start-up work on the host (startup_work.py): ``compilation``, ``module_loading`` (also a kernel launch call
   of LONG_LAUNCH_US or more while the GPU idles: lazy loading / JIT inside the launch), ``device_setup``,
   ``allocator`` (cudaMalloc/cudaFree and kin; cudaFree synchronises the device);
3. only where the GPU waited for the host: ``data_loader`` (DataLoader ``__next__``); ``sync`` (inside a
   blocking call, runtime_calls.py, or a ``.item()`` op; and a gap that began while the host sat in one, up to
   the next launch: the call drained the queue); ``collective`` (inside a c10d/NCCL/Gloo op); ``launch`` (inside
   a CPU op that launches device work, or a runtime call: dispatch); ``cpu_ops`` (inside a CPU op that launches
   nothing: preprocessing, an optimizer on the CPU); ``host_idle`` (no recorded host activity: Python between
   ops, or a host that waits on something unrecorded);
4. ``queued`` where the work was already queued.

A call is also blocking by behaviour: any runtime call of BEHAVIOUR_MIN_US or more, enqueuing no device work,
that ends within BEHAVIOUR_EPS_US of the end of device work it overlapped (it returned when that work did).
The owners of a window add up to its idle time (its length less the union of device activity in it).
"""

from __future__ import annotations

import numpy as np

from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.intervals import Clipper, merge
from gpuanalyze.ingest.kineto import MARK_LOADER, KinetoTrace
from gpuanalyze.ingest.runtime_calls import CAPTURE_BEGIN, CAPTURE_END, COLLECTIVE_OPS, SCALAR_READ_OPS
from gpuanalyze.ingest.startup_work import ALLOCATION, COMPILATION, DEVICE_SETUP, MODULE_LOADING, kind_of

#: A kernel launch call this long while the GPU idles is loading or compiling the kernel (lazy module loading,
#: PTX JIT): a launch itself takes microseconds (CUDA's launch latency is ~2-10 us).
LONG_LAUNCH_US = 1000.0
#: A runtime call at least this long that returns when device work it overlapped ends waited for that work.
BEHAVIOUR_MIN_US = 50.0
BEHAVIOUR_EPS_US = 20.0
_Seg = tuple[np.ndarray, np.ndarray]
_EMPTY: _Seg = (np.empty(0), np.empty(0))


def intersect(a: _Seg, b: _Seg) -> _Seg:
    """The intersection of two sets of disjoint sorted segments."""
    if a[0].size == 0 or b[0].size == 0:
        return _EMPTY
    i = np.searchsorted(b[1], a[0], side="right")  # first b segment ending after each a starts
    j = np.searchsorted(b[0], a[1], side="left")  # b segments starting before each a ends
    n = np.maximum(j - i, 0)
    if not n.any():
        return _EMPTY
    ai = np.repeat(np.arange(a[0].size), n)
    bi = np.arange(int(n.sum()))  # b's index of each pair: i of its a segment, then on, in place
    bi -= np.repeat(np.cumsum(n) - n - i, n)
    s = np.maximum(a[0][ai], b[0][bi])
    e = np.minimum(a[1][ai], b[1][bi])
    del ai, bi
    keep = e > s
    return s[keep], e[keep]


def minus(a: _Seg, b: _Seg) -> _Seg:
    """The parts of disjoint sorted segments ``a`` outside disjoint sorted segments ``b``."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    lo, hi = min(a[0][0], b[0][0]) - 1.0, max(a[1][-1], b[1][-1]) + 1.0
    comp = (np.concatenate([[lo], b[1]]), np.concatenate([b[0], [hi]]))
    keep = comp[1] > comp[0]
    return intersect(a, (comp[0][keep], comp[1][keep]))


def _outside(lo: float, hi: float, b: _Seg) -> _Seg:
    """``minus(([lo], [hi]), b)`` without intersect's index arrays (one segment less every gap of a capture): the
    gaps of ``b`` clipped to [lo, hi), in order."""
    cs = np.concatenate([[min(lo, b[0][0]) - 1.0], b[1]])
    ce = np.concatenate([b[0], [max(hi, b[1][-1]) + 1.0]])
    keep = ce > cs
    s, e = np.maximum(cs[keep], lo), np.minimum(ce[keep], hi)
    del cs, ce, keep
    keep = e > s
    return s[keep], e[keep]


def _seg(start: np.ndarray, end: np.ndarray) -> _Seg:
    keep = end > start
    return merge(start[keep], end[keep])


def _union(*sets: _Seg) -> _Seg:
    return _seg(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))


class IdleOwners:
    """The owner of every idle instant of a trace's GPU timeline, cut per window in O(log n)."""

    def __init__(
        self,
        k: KinetoTrace,
        launch: np.ndarray,
        blocking_calls: np.ndarray,
        busy: Clipper,
        by_start: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """``launch``: each device event's launch-call end (-1 without one); ``blocking_calls``: the runtime calls
        known to block (sync family and copies to pageable memory); ``busy``: the union of device activity;
        ``by_start``: the device events' stable order by start, and their starts in it."""
        gpu, rt = k.gpu, k.runtime
        starts = [a.start for a in (gpu, rt, k.cpu, k.host_ops) if a.start.size]
        ends = [a.end for a in (gpu, rt, k.cpu, k.host_ops) if a.end.size]
        starts += [np.array([lo for _, lo, _ in k.steps], dtype=np.float64)] if k.steps else []
        ends += [np.array([hi for _, _, hi in k.steps], dtype=np.float64)] if k.steps else []
        lo_all = min(float(x.min()) for x in starts) if starts else 0.0
        hi_all = max(float(x.max()) for x in ends) if ends else 0.0
        segs = (busy.s, busy.e)
        idle = _outside(lo_all, hi_all, segs) if segs[0].size else _EMPTY
        self._launches = np.empty(0)
        self._owners = self._paint(k, launch, blocking_calls, segs, idle, by_start)
        self._busy = busy

    def _paint(
        self,
        k: KinetoTrace,
        launch: np.ndarray,
        blocking: np.ndarray,
        busy: _Seg,
        idle: _Seg,
        by_start: tuple[np.ndarray, np.ndarray],
    ) -> dict[str, Clipper]:
        rt = k.runtime
        enqueue = _enqueues(k)
        self._launches = np.sort(rt.start[enqueue])
        kernel_call = _kernel_calls(k)
        owned: dict[str, _Seg] = {}
        remaining = idle
        for owner, segs in (
            ("graph_capture", _capture(k)),
            *_startup(k, kernel_call),
        ):
            owned[owner] = intersect(remaining, segs)
            remaining = minus(remaining, segs)
        host, latency, queued = _gap_kinds(k, launch, idle, by_start)
        block = _union(
            _seg(rt.start[blocking], rt.end[blocking]),
            _behaviour_blocking(k, enqueue, busy),
            _named_ops(k, SCALAR_READ_OPS),
        )
        waiting = intersect(remaining, host)
        launching, quiet = _ops_by_launch(k, enqueue)
        for owner, segs in (
            ("data_loader", _seg(k.cpu.start[k.cpu_mark == MARK_LOADER], k.cpu.end[k.cpu_mark == MARK_LOADER])),
            ("sync", _union(block, _drained(idle, launch, busy, block, host))),
            ("collective", _named_ops(k, COLLECTIVE_OPS)),
            ("launch", _union(launching, _seg(rt.start, rt.end))),
            ("cpu_ops", quiet),
        ):
            owned[owner] = intersect(waiting, segs)
            waiting = minus(waiting, segs)
        owned["host_idle"] = waiting
        owned["launch"] = _union(owned["launch"], intersect(remaining, latency))
        owned["queued"] = intersect(remaining, queued)
        return {o: Clipper(*owned.get(o, _EMPTY)) for o in S.IDLE_OWNERS}

    def window(self, lo: float, hi: float) -> dict[str, float]:
        """Milliseconds of idle time each owner holds in [lo, hi), and the window's idle time (``""``)."""
        out = {o: c.length(lo, hi) / 1e3 for o, c in self._owners.items()}
        out[""] = max(0.0, (hi - lo) - self._busy.length(lo, hi)) / 1e3
        return out

    def sync_owned_ms(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The ``sync``-owned idle (ms) each blocking call is answerable for: from its start to the first launch
        after it returned (the gap it drained), cut at the next call's start so that none is counted twice.
        ``start`` is sorted; the calls not in it (``.item()`` ops, calls blocking by behaviour) own the rest."""
        if start.size == 0:
            return np.empty(0)
        stop = end.copy()
        nxt = np.searchsorted(self._launches, end, side="left")
        has = nxt < self._launches.size
        stop[has] = np.maximum(end[has], self._launches[nxt[has]])
        stop[:-1] = np.minimum(stop[:-1], start[1:])
        return self._owners["sync"].lengths(start, np.maximum(stop, start)) / 1e3

    def fields(self, lo: float, hi: float) -> dict[str, float | bool]:
        """The KernelStats fields of [lo, hi)."""
        got = self.window(lo, hi)
        out: dict[str, float | bool] = {S.owner_field(o): got[o] for o in S.IDLE_OWNERS}
        out["window_idle_ms"] = got[""]
        out["owners"] = True
        return out


def _enqueues(k: KinetoTrace) -> np.ndarray:
    """Runtime calls that enqueued device work (their correlation id is a device event's)."""
    corr = k.runtime_correlation
    dev = np.unique(k.gpu_correlation[k.gpu_correlation >= 0])
    if corr.size == 0 or dev.size == 0:
        return np.zeros(corr.size, bool)
    at = np.minimum(np.searchsorted(dev, corr), dev.size - 1)
    return (dev[at] == corr) & (corr >= 0)


def _kernel_calls(k: KinetoTrace) -> np.ndarray:
    """Runtime calls that launched a kernel (not a copy or memset)."""
    corr = k.runtime_correlation
    cats = np.array([x.category not in ("memcpy", "memset") for x in k.kinds], dtype=bool)
    if corr.size == 0 or not cats.size:
        return np.zeros(corr.size, bool)
    is_kernel = cats[k.gpu_kind] & (k.gpu_correlation >= 0)
    dev = np.unique(k.gpu_correlation[is_kernel])
    if dev.size == 0:
        return np.zeros(corr.size, bool)
    at = np.minimum(np.searchsorted(dev, corr), dev.size - 1)
    return (dev[at] == corr) & (corr >= 0)


def _capture(k: KinetoTrace) -> _Seg:
    """Graph-capture regions: each begin call to the next end call (or the capture's end)."""
    cls = k.runtime_class
    if cls.size == 0:
        return _EMPTY
    begin = np.flatnonzero(cls == CAPTURE_BEGIN)
    if begin.size == 0:
        return _EMPTY
    end = np.flatnonzero(cls == CAPTURE_END)
    b_s = np.sort(k.runtime.start[begin])
    e_s = np.sort(k.runtime.end[end])
    last = float(max(k.runtime.end.max(), k.gpu.end.max() if k.gpu.end.size else 0.0))
    at = np.searchsorted(e_s, b_s, side="left")
    stop = np.full(b_s.size, last)
    found = at < e_s.size
    stop[found] = e_s[at[found]]
    return _seg(b_s, stop)


def _startup(k: KinetoTrace, kernel_call: np.ndarray) -> list[tuple[str, _Seg]]:
    """Start-up work by owner, with long kernel launch calls counted as module loading."""
    w = k.startup
    kinds = np.array([kind_of(n) for n in w.names], dtype=object) if w.names else np.empty(0, object)
    of = kinds[w.name] if w.name.size else np.empty(0, object)
    rt = k.runtime
    long = kernel_call & ((rt.end - rt.start) >= LONG_LAUNCH_US) if kernel_call.size else np.zeros(0, bool)
    out = []
    for owner, kind in (
        ("compilation", COMPILATION),
        ("module_loading", MODULE_LOADING),
        ("device_setup", DEVICE_SETUP),
        ("allocator", ALLOCATION),
    ):
        sel = of == kind
        segs = _seg(w.start[sel], w.end[sel]) if sel.size else _EMPTY
        if owner == "module_loading" and long.any():
            segs = _union(segs, _seg(rt.start[long], rt.end[long]))
        out.append((owner, segs))
    return out


def _gap_kinds(
    k: KinetoTrace, launch: np.ndarray, idle: _Seg, by_start: tuple[np.ndarray, np.ndarray]
) -> tuple[_Seg, _Seg, _Seg]:
    """The idle gaps split by what they waited for: (the host, until the next launch), (the next kernel's launch
    latency), (work already queued)."""
    a, b = idle
    if a.size == 0:
        return _EMPTY, _EMPTY, _EMPTY
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
    return (
        _seg(host[1], host[0]),
        _seg(L[late], b[late]),
        _seg(a[queued], b[queued]),
    )


def _behaviour_blocking(k: KinetoTrace, enqueue: np.ndarray, busy: _Seg) -> _Seg:
    """Runtime calls that end when device work they overlapped ends (enqueuing none themselves)."""
    rt = k.runtime
    if rt.start.size == 0 or busy[0].size == 0:
        return _EMPTY
    dur = rt.end - rt.start
    cand = np.flatnonzero((dur >= BEHAVIOUR_MIN_US) & ~enqueue)
    if cand.size == 0:
        return _EMPTY
    e = rt.end[cand]
    j = np.searchsorted(busy[1], e, side="right") - 1
    ok = j >= 0
    jj = np.maximum(j, 0)
    ok &= (busy[1][jj] > rt.start[cand]) & (e - busy[1][jj] <= BEHAVIOUR_EPS_US)
    return _seg(rt.start[cand[ok]], rt.end[cand[ok]])


def _named_ops(k: KinetoTrace, prefixes: tuple[str, ...]) -> _Seg:
    ops = k.host_ops
    if ops.start.size == 0:
        return _EMPTY
    sel = ops.named(prefixes)
    return _seg(ops.start[sel], ops.end[sel])


def _drained(idle: _Seg, launch: np.ndarray, busy: _Seg, block: _Seg, host: _Seg) -> _Seg:
    """The host-waiting part of every gap that began while the host sat in a blocking call."""
    a = idle[0]
    if a.size == 0 or block[0].size == 0:
        return _EMPTY
    i = np.searchsorted(block[0], a + BEHAVIOUR_EPS_US, side="right") - 1
    inside = (i >= 0) & (block[1][np.maximum(i, 0)] >= a - BEHAVIOUR_EPS_US)
    gaps = _seg(a[inside], idle[1][inside])
    return intersect(gaps, host)


def _ops_by_launch(k: KinetoTrace, enqueue: np.ndarray) -> tuple[_Seg, _Seg]:
    """The outermost CPU ops on each thread that launched device work on that thread, and those that launched
    none."""
    ops = k.host_ops
    if ops.start.size == 0:
        return _EMPTY, _EMPTY
    rt = k.runtime
    known_tid = k.runtime_tid.size == rt.start.size
    calls = np.flatnonzero(enqueue)
    yes_s, yes_e, no_s, no_e = [], [], [], []
    for tid in np.unique(ops.tid):
        sel = np.flatnonzero(ops.tid == tid)
        order = sel[np.lexsort((-ops.end[sel], ops.start[sel]))]
        s, e = ops.start[order], ops.end[order]
        before = np.maximum.accumulate(e)
        outer = np.ones(s.size, bool)
        outer[1:] = s[1:] >= before[:-1]
        s, e = s[outer], e[outer]
        mine = calls[k.runtime_tid[calls] == tid] if known_tid else calls
        cs = np.sort(rt.start[mine])
        n = np.searchsorted(cs, e, side="left") - np.searchsorted(cs, s, side="left")
        yes_s.append(s[n > 0])
        yes_e.append(e[n > 0])
        no_s.append(s[n == 0])
        no_e.append(e[n == 0])
    return _seg(np.concatenate(yes_s), np.concatenate(yes_e)), _seg(np.concatenate(no_s), np.concatenate(no_e))
