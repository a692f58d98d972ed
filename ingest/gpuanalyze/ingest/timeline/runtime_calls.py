"""What a runtime/driver API call does to the host, read from its API family, not from a list of exact names.

The CUDA runtime documents three behaviours that matter to who owns an idle GPU ("API synchronization
behavior", CUDA Runtime API reference; HIP follows it):

- **blocking**: the call returns only when device work it waits on is done. Every ``*Synchronize`` call
  (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``, ``cuCtxSynchronize``,
  ``cuStreamSynchronize``, ``hipStreamSynchronize``, ...), and every memcpy variant without ``Async`` in
  its name (``cudaMemcpy``, ``cudaMemcpy2D``, ``cudaMemcpyToSymbol``, ``cudaMemcpyPeer``, ``cuMemcpyDtoH``,
  ``hipMemcpy``, ``hipMemcpyWithStream``, ``hipMemcpyDtoH``: synchronous to the host). An ``*Async`` copy
  to or from pageable memory blocks too; that is read from the copy's device record (kernel_stats.py),
  and any other call that ends when device work it overlapped ends is found by behaviour (idle_owners.py);
- **graph capture**: between ``cudaStreamBeginCapture`` and ``cudaStreamEndCapture`` (``hip*`` likewise,
  also the ``*ToGraph`` form) launches are recorded into a graph and nothing runs;
- anything else: a launch or an enqueue (which device work it enqueued is read from correlation ids, not
  names), or bookkeeping.
"""

from __future__ import annotations

import re

from gpuanalyze.ingest.timeline.startup_work import call_kind

OTHER, BLOCKING, CAPTURE_BEGIN, CAPTURE_END = 0, 1, 2, 3

_SYNCHRONIZE = re.compile(r"^(cuda|cu|hip)\w*Synchronize")
_MEMCPY = re.compile(r"^(cuda|cu|hip)Memcpy")
_CAPTURE_BEGIN = re.compile(r"^(cuda|cu|hip)StreamBeginCapture")
_CAPTURE_END = re.compile(r"^(cuda|cu|hip)StreamEndCapture")
_CACHE_LIMIT = 4096


def call_class(name: str) -> int:
    """BLOCKING, CAPTURE_BEGIN, CAPTURE_END or OTHER for a runtime/driver call name."""
    short = name[:128]
    if _SYNCHRONIZE.match(short) or (_MEMCPY.match(short) and "Async" not in short):
        return BLOCKING
    if _CAPTURE_BEGIN.match(short):
        return CAPTURE_BEGIN
    return CAPTURE_END if _CAPTURE_END.match(short) else OTHER


_ENQUEUE = re.compile(r"^(cuda|cu|hip)(\w*Launch\w*|Memcpy\w*|Memset\w*|GraphLaunch)")


def enqueues(name: str) -> bool:
    """A call that puts device work on a stream (a kernel launch, a copy, a memset, a graph launch): the device
    records one activity for each, so a trace with such calls and no device records lost its activity."""
    return _ENQUEUE.match(name[:128]) is not None


def may_block(name: str) -> bool:
    """A call whose op and caller are worth naming: blocking by family, or any memcpy (an ``*Async`` one blocks
    when its host memory is pageable)."""
    return call_class(name) == BLOCKING or _MEMCPY.match(name[:128]) is not None


_FACTS: dict[str, tuple[int, bool, bool, bool]] = {}


def call_facts(name: str) -> tuple[int, bool, bool, bool]:
    """(call_class, enqueues, may_block, start-up work: startup_work.call_kind) of a call name, cached: a trace makes
    millions of calls of a few dozen names."""
    got = _FACTS.get(name)
    if got is None:
        got = (call_class(name), enqueues(name), may_block(name), call_kind(name) is not None)
        if len(_FACTS) < _CACHE_LIMIT:
            _FACTS[name] = got
    return got


#: CPU ops that read a device value back to the host (``tensor.item()``, ``.tolist()`` of a scalar, ``if t:``):
#: blocking whatever runtime calls the trace kept for them.
SCALAR_READ_OPS = ("aten::_local_scalar_dense", "aten::item")
#: CPU ops of a collective (c10d's ops, NCCL/Gloo annotations): host time in them is time waiting on other ranks.
COLLECTIVE_OPS = ("c10d::", "nccl:", "gloo:", "record_param_comms")
