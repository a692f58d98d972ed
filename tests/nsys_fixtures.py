"""Small Nsight Systems SQLite exports built with sqlite3 to the documented schema (the Nsight Systems user
guide, "SQLite schema reference"), in the shapes real exports take across versions: the old
``EXPORT_META_DATA`` table (up to 2023.1) or ``META_DATA_EXPORT`` + ``META_DATA_CAPTURE`` (2024.2 on),
ENUM tables (2022.4 on) or none, NVTX names in ``text`` or ``textId``, several ranks in one capture."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

MS = 1_000_000  # ns


def global_pid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


@dataclass(kw_only=True)
class Export:
    """What to put in the export; each step of each rank: a 9 ms NVTX range, a 0.2 ms pageable H2D copy, a
    launch and a 5 ms kernel, and a 0.5 ms cudaStreamSynchronize."""

    pids: tuple[int, ...] = (100,)
    steps: int = 3
    step_name: str | None = "ProfilerStep#{}"
    """NVTX range name per step ('{}' is the step number); None: no step ranges."""
    phases: bool = False
    """Also gpuanalyze:forward ranges (analyzer.profile(nvtx=True))."""
    phase_names: tuple[str, ...] = ()
    """More phase ranges per step, each from 0.1 to 6 ms into the step."""
    old_meta: bool = False
    no_meta: bool = False
    """No metadata table at all (StringIds and the activity tables only)."""
    time_columns: tuple[str, str] = ("start", "end")
    """The activity tables' time columns (another exporter's layout names them otherwise)."""
    enums: bool = True
    gpu_table: bool = True
    text_id: bool = False
    """NVTX names through StringIds (textId) instead of text."""
    tables: tuple[str, ...] = ("kernel", "memcpy", "runtime", "nvtx")
    extra_kernel_columns: tuple[str, ...] = ()
    kernel_name: str = "void at::native::vectorized_elementwise_kernel<4>(int)"
    kernels_per_step: int = 1
    """More kernels per step (benchmarks): each a launch and a 2 us kernel after the first."""
    sync_call: str = "cudaStreamSynchronize_v3020"
    """The runtime call each step waits in (0.5 ms)."""
    host: bool = False
    """Also the host-side tables: CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (a record per step's sync call),
    OSRT_API (per step on the loop thread, a 0.35 ms read while the GPU waits and a 1 ms
    pthread_cond_timedwait), ThreadNames (the loop thread 'python3', a 'pt_data_pin' thread) and
    TARGET_INFO_CUDA_DEVICE."""
    visible_devices: bool = False
    """Every rank's kernels on its device 0 (CUDA_VISIBLE_DEVICES per rank), GPU ids mapped by
    TARGET_INFO_CUDA_DEVICE; TARGET_INFO_GPU names GPU 1 'NVIDIA H200'."""
    env: tuple[str, ...] = ()
    """The profiled process's environment (META_DATA_CAPTURE ``PROCESS_0:ENVIRONMENT_VARIABLE`` rows, as nsys writes
    them: ``RANK="1"``)."""
    strings: dict[str, int] = field(default_factory=dict)


def _sid(e: Export, cur: sqlite3.Cursor, text: str) -> int:
    if text not in e.strings:
        e.strings[text] = len(e.strings) + 1
        cur.execute("INSERT INTO StringIds VALUES (?, ?)", (e.strings[text], text))
    return e.strings[text]


def _schema(e: Export, cur: sqlite3.Cursor) -> None:
    cur.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    cur.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    cur.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '')")
    version = "2022.1.3.3" if e.old_meta else "2025.5.2.266"
    if e.no_meta:
        pass
    elif e.old_meta:
        cur.execute("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)")
        cur.execute("INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_PRODUCT_VERSION', ?)", (version,))
    else:
        cur.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
        cur.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)")
        cur.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', ?)", (version,))
        cur.executemany(
            "INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
            [("PROCESS_0:COMMAND", "python"), ("PROCESS_0:ARGUMENT_0", "train.py")]
            + [("PROCESS_0:ENVIRONMENT_VARIABLE", v) for v in e.env],
        )
    if e.enums:
        cur.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT)")
        cur.executemany(
            "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
            [(1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"), (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host")],
        )
        cur.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)")
        cur.executemany(
            "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)",
            [(0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")],
        )
    if e.gpu_table:
        cur.execute(
            "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, totalMemory INTEGER, smCount INTEGER, "
            "computeMajor INTEGER, computeMinor INTEGER, cuDevice INTEGER)"
        )
        for d in range(len(e.pids)):
            name = "NVIDIA H200" if e.visible_devices and d == 1 else "NVIDIA H100 80GB HBM3"
            row = (d, name, 80 << 30, 132, 9, 0, d)
            cur.execute("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    if e.host or e.visible_devices:
        cur.execute(
            "CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, uuid TEXT, "
            "numMultiprocessors INTEGER)"
        )
        for d, pid in enumerate(e.pids):
            row = (d, 0 if e.visible_devices else d, pid, None, 132)
            cur.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?, ?, ?)", row)
    if e.host:
        _host_schema(e, cur)
    times = f"{e.time_columns[0]} INTEGER, {e.time_columns[1]} INTEGER"
    dev = f"{times}, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
    dev += "globalPid INTEGER"
    if "kernel" in e.tables:
        extra = "".join(f", {c} INTEGER" for c in e.extra_kernel_columns)
        cur.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({dev}, demangledName INTEGER, shortName INTEGER{extra})")
    if "memcpy" in e.tables:
        cur.execute(
            f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY ({dev}, bytes INTEGER, copyKind INTEGER, srcKind INTEGER, "
            "dstKind INTEGER)"
        )
    if "runtime" in e.tables:
        cur.execute(
            f"CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME ({times}, eventClass INTEGER, "
            "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER)"
        )
    if "nvtx" in e.tables:
        cur.execute(
            f"CREATE TABLE NVTX_EVENTS ({times}, eventType INTEGER, rangeId INTEGER, "
            "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER)"
        )


def _host_schema(e: Export, cur: sqlite3.Cursor) -> None:
    cur.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER, end INTEGER, deviceId INTEGER, "
        "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, syncType INTEGER, "
        "eventId INTEGER)"
    )
    if e.enums:
        cur.execute("CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER, name TEXT, label TEXT)")
        kinds = ["UNKNOWN", "EVENT_SYNCHRONIZE", "STREAM_WAIT_EVENT", "STREAM_SYNCHRONIZE", "CONTEXT_SYNCHRONIZE"]
        rows = [(i, f"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_{k}", k.title()) for i, k in enumerate(kinds)]
        cur.executemany("INSERT INTO ENUM_CUPTI_SYNC_TYPE VALUES (?, ?, ?)", rows)
    cur.execute(
        "CREATE TABLE OSRT_API (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, nameId INTEGER, "
        "returnValue INTEGER, nestingLevel INTEGER, callchainId INTEGER)"
    )
    cur.execute("CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER)")
    for pid in e.pids:
        gp = global_pid(pid)
        cur.execute("INSERT INTO ThreadNames VALUES (?, 20, ?)", (_sid(e, cur, "python3"), gp | pid))
        cur.execute("INSERT INTO ThreadNames VALUES (?, 20, ?)", (_sid(e, cur, "pt_data_pin"), gp | (pid + 7)))


def _host_rows(e: Export, cur: sqlite3.Cursor, device: int, gp: int, tid: int, t0: int, sync_corr: int) -> None:
    if not e.host:
        return
    row = (t0 + 7 * MS + 1000, t0 + 7 * MS + MS // 2 - 1000, device, 1, 7, sync_corr, gp, 3, None)
    cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?,?)", row)
    calls = [
        (t0 + MS // 10, t0 + MS // 10 + 350_000, "read", 0),
        (t0 + MS // 10 + 1000, t0 + MS // 10 + 2000, "read", 1),  # nested in the first: not a second wait
        (t0 + 8 * MS, t0 + 9 * MS, "pthread_cond_timedwait", 0),
    ]
    for start, end, name, level in calls:
        row = (start, end, 27, tid, _sid(e, cur, name), 0, level, None)
        cur.execute("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)", row)
    other = (t0 + MS // 10, t0 + 5 * MS, 27, tid + 7, _sid(e, cur, "read"), 0, 0, None)  # the pin thread: not the loop
    cur.execute("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)", other)


def _nvtx(e: Export, cur: sqlite3.Cursor, tid: int, name: str, start: int, end: int) -> None:
    text, text_id = (None, _sid(e, cur, name)) if e.text_id else (name, None)
    cur.execute(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, ?, ?, NULL, ?)", (start, end, text, tid, text_id)
    )


def _rank(e: Export, cur: sqlite3.Cursor, device: int, pid: int) -> None:
    gp = global_pid(pid)
    tid = gp | pid
    corr = 0
    for i in range(e.steps):
        t0 = 100 * MS + i * 10 * MS + device * 1000
        if e.step_name is not None and "nvtx" in e.tables:
            _nvtx(e, cur, tid, e.step_name.format(i), t0, t0 + 9 * MS)
        for phase in ("gpuanalyze:forward",) * e.phases + e.phase_names if "nvtx" in e.tables else ():
            _nvtx(e, cur, tid, phase, t0 + MS // 10, t0 + 6 * MS)
        if "memcpy" in e.tables:
            corr += 1
            row = (t0 + MS // 2, t0 + MS // 2 + MS // 5, device, 1, 7, corr, gp, 4096, 1, 0, 2)
            cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)
            if "runtime" in e.tables:
                name = _sid(e, cur, "cudaMemcpyAsync_v3020")
                rt = (t0 + MS // 2 - 5000, t0 + MS // 2, 0, tid, corr, name, 0, None)
                cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", rt)
        corr += 1
        if "runtime" in e.tables:
            launch = _sid(e, cur, "cudaLaunchKernel_v7000")
            rt = (t0 + MS, t0 + MS + 10_000, 0, tid, corr, launch, 0, None)
            cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", rt)
            sync = _sid(e, cur, e.sync_call)
            rt = (t0 + 7 * MS, t0 + 7 * MS + MS // 2, 0, tid, corr + 10_000, sync, 0, None)
            cur.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", rt)
        _host_rows(e, cur, device, gp, tid, t0, corr + 10_000)
        if "kernel" in e.tables:
            name = _sid(e, cur, e.kernel_name)
            extra = (0,) * len(e.extra_kernel_columns)
            dev = 0 if e.visible_devices else device
            row = (t0 + MS + MS // 10, t0 + 6 * MS + MS // 10, dev, 1, 7, corr, gp, name, name, *extra)
            marks = ",".join("?" * len(row))
            cur.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({marks})", row)
        _more_kernels(e, cur, t0 + 6 * MS + MS // 10, device, gp, tid, corr)
        corr += e.kernels_per_step


def _more_kernels(e: Export, cur: sqlite3.Cursor, t: int, device: int, gp: int, tid: int, corr: int) -> None:
    if e.kernels_per_step <= 1 or "kernel" not in e.tables:
        return
    name, launch = _sid(e, cur, e.kernel_name), _sid(e, cur, "cudaLaunchKernel_v7000")
    extra = (0,) * len(e.extra_kernel_columns)
    marks = ",".join("?" * (9 + len(extra)))
    kernels, launches = [], []
    for j in range(1, e.kernels_per_step):
        c, start = corr + j, t + j * 3000
        kernels.append((start, start + 2000, device, 1, 7, c, gp, name, name, *extra))
        launches.append((start - 2500, start - 1000, 0, tid, c, launch, 0, None))
    cur.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({marks})", kernels)
    if "runtime" in e.tables:
        cur.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", launches)


def build_export(path: Path, e: Export | None = None) -> Path:
    """Write the export ``e`` describes to ``path``."""
    e = e or Export()
    conn = sqlite3.connect(path)
    cur = conn.cursor()
    _schema(e, cur)
    for device, pid in enumerate(e.pids):
        _rank(e, cur, device, pid)
    conn.commit()
    conn.close()
    return path
