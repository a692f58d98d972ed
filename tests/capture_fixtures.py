"""Small captures built to the documented behaviour of the APIs they record, for the timeline pass (how a capture is
cut, who owns each idle instant): Kineto JSON dicts (tests/kineto_fixtures.ev) and Nsight Systems SQLite exports
(the schema of tests/nsys_fixtures.py) with every row placed by hand. Times: Kineto in us, nsys in ns."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.kineto_fixtures import ev
from tests.mechanism_fixtures import _doc
from tests.nsys_fixtures import Export, _schema, _sid, global_pid

A100 = ("NVIDIA A100-SXM4-40GB", (8, 0))
PID = 100
TID = global_pid(PID) | PID
MS = 1_000_000
#: ENUM_CUDA_MEM_KIND / ENUM_CUDA_MEMCPY_OPER numbering (rows.MEM_KINDS, COPY_KINDS).
PAGEABLE, PINNED, DEVICE = 0, 1, 2
HTOD, DTOH = 1, 2


def kineto(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A Kineto trace of ``events`` on an A100."""
    return _doc(events, *A100)


def launch(t: float, corr: int, kernel_at: float, kernel_us: float, name: str = "ampere_sgemm_128x64_nn") -> list:
    """A cudaLaunchKernel at ``t`` (5 us) and its kernel."""
    return [
        ev("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=corr),
        ev("kernel", name, kernel_at, kernel_us, stream=7, correlation=corr),
    ]


@dataclass
class Nsys:
    """An Nsight Systems export of one process, rows added in ns (session time) by the methods below."""

    duration_ns: int | None = None
    """ANALYSIS_DETAILS.duration: the session's length (None: no such table)."""
    kernels: list[tuple] = field(default_factory=list)
    copies: list[tuple] = field(default_factory=list)
    calls: list[tuple[int, int, str, int]] = field(default_factory=list)
    ranges: list[tuple[int, int, str]] = field(default_factory=list)
    corr: int = 0

    def call(self, start: int, dur: int, name: str, corr: int | None = None) -> int:
        """A runtime/driver call; returns its correlation id."""
        if corr is None:
            self.corr += 1
            corr = self.corr
        self.calls.append((start, start + dur, name, corr))
        return corr

    def kernel(self, call_at: int, start: int, dur: int, name: str = "ampere_sgemm_128x64_nn") -> None:
        corr = self.call(call_at, 5_000, "cudaLaunchKernel_v7000")
        self.kernels.append((start, start + dur, corr, name))

    def copy(self, call_at: int, call_ns: int, start: int, dur: int, op: int, src: int, dst: int, call: str) -> None:
        corr = self.call(call_at, call_ns, call)
        self.copies.append((start, start + dur, corr, op, src, dst))

    def step_range(self, start: int, end: int, name: str) -> None:
        self.ranges.append((start, end, name))

    def write(self, path: Path) -> Path:
        e = Export(steps=0)
        conn = sqlite3.connect(path)
        cur = conn.cursor()
        _schema(e, cur)
        cur.executemany(
            "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [(PINNED, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned")]
        )
        gp = global_pid(PID)
        for s, end, corr, name in self.kernels:
            n = _sid(e, cur, name)
            cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,0,1,7,?,?,?,?)", (s, end, corr, gp, n, n))
        for s, end, corr, op, src, dst in self.copies:
            row = (s, end, corr, gp, 1 << 20, op, src, dst)
            cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,0,1,7,?,?,?,?,?,?)", row)
        for s, end, name, corr in self.calls:
            row = (s, end, TID, corr, _sid(e, cur, name))
            cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0,NULL)", row)
        for s, end, name in self.ranges:
            cur.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,59,NULL,NULL,NULL,?,?,NULL,NULL)", (s, end, name, TID))
        if self.duration_ns is not None:
            cur.execute(
                "CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, "
                "stopTime INTEGER)"
            )
            cur.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, 0, ?)", (gp, self.duration_ns, self.duration_ns))
        conn.commit()
        conn.close()
        return path


def whole_process(step_range: bool) -> Nsys:
    """``nsys profile python train.py``: 10 s of imports and dataset building that record nothing (then CUDA's
    context creation in the first cudaMalloc), 20 steps of 2 ms (a pinned H2D copy of the batch, a 1.5 ms kernel,
    a cudaStreamSynchronize), 2 s of teardown that records nothing; ``step_range``: each step in an NVTX
    ProfilerStep#N range."""
    cap = Nsys(duration_ns=10 * 1000 * MS + 20 * 2 * MS + 2 * 1000 * MS)
    t0 = 10 * 1000 * MS
    cap.call(t0 - 300 * MS, 290 * MS, "cudaMalloc_v3020")
    for i in range(20):
        t = t0 + i * 2 * MS
        if step_range:
            cap.step_range(t, t + 2 * MS, f"ProfilerStep#{i}")
        cap.copy(t + 10_000, 8_000, t + 20_000, 50_000, HTOD, PINNED, DEVICE, "cudaMemcpyAsync_v3020")
        cap.kernel(t + 30_000, t + 80_000, 1_500_000)
        cap.call(t + 40_000, 1_545_000, "cudaStreamSynchronize_v3020")
    return cap
