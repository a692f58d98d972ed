"""The system sampler: about once a second, off the training thread, what the host really gave the run.

A daemon thread reads /proc (host CPU on the CPUs of the affinity mask, run queue, load, this
process's and its child processes' CPU time and memory, preemptions) and, where NVML is present
and the run is on a GPU, the GPU's utilisation, memory, power, temperature and clocks. The
training thread only picks up the latest reading when it writes a row (one attribute read).

It never disturbs the run: any failure inside it stops it with at most one GpuAnalyzeWarning;
NVML or /proc being absent is not a failure (those fields are just not measured). It is started
when the trace opens (never in a forked DataLoader worker, which opens no trace) and joined at
teardown.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.record import host_readers as R
from analyzer.record.notify import warn
from gpuanalyze.ingest.trace.host_sample import HostSample, encode_host_sample

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def cpu_quota_cores(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """This process's cgroup CPU quota in cores (v2 ``cpu.max``, else v1 CFS), None when unlimited.
    The file is looked for at the process's own cgroup path, then at the root (inside a container
    the process sees its own cgroup as the root)."""
    v2, v1 = R.cgroup_paths(_read(proc / "self" / "cgroup"))
    if v2 is not None:
        for base in (cgroup_root / v2.lstrip("/"), cgroup_root):
            text = _read(base / "cpu.max")
            if text is not None:
                return R.cpu_max_cores(text)
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        root = cgroup_root / mount
        for base in ((root / v1.lstrip("/")) if v1 else root, root):
            quota = _read(base / "cpu.cfs_quota_us")
            if quota is not None:
                return R.cfs_quota_cores(quota, _read(base / "cpu.cfs_period_us"))
    return None


def affinity() -> frozenset[int] | None:
    """The CPUs this process may run on."""
    getter = getattr(os, "sched_getaffinity", None)
    return frozenset(getter(0)) if getter is not None else None


@dataclass(slots=True)
class _Counters:
    """One reading of the cumulative counters (and the levels read with them); a sample is the
    difference of two."""

    mono_ns: int
    host: R.CpuTicks | None
    mine: R.CpuTicks | None
    """Ticks of the CPUs in the affinity mask."""
    running: int | None
    load: float | None
    own: R.ProcStat | None
    children: dict[int, R.ProcStat]
    switches: int | None


def _rate(now: float | None, before: float | None, seconds: float) -> float | None:
    return None if now is None or before is None else max(0.0, now - before) / seconds


def _nice_share(now: R.CpuTicks | None, before: R.CpuTicks | None) -> float | None:
    """Share of the ticks between two readings that were busy at a positive nice value."""
    if now is None or before is None or now.total <= before.total:
        return None
    return min(1.0, max(0.0, (now.nice - before.nice) / (now.total - before.total)))


def _busy_share(now: R.CpuTicks | None, before: R.CpuTicks | None) -> float | None:
    """Busy share of the ticks between two readings."""
    if now is None or before is None or now.total <= before.total:
        return None
    return min(1.0, max(0.0, (now.busy - before.busy) / (now.total - before.total)))


class SystemSampler:
    """Start with ``start()``, take readings with ``take()`` (None when nothing new), ``stop()`` at the end."""

    def __init__(self, *, interval_s: float = 1.0, gpu_uuid: str | None = None, proc: Path = PROC) -> None:
        assert interval_s > 0
        self.interval_s = interval_s
        self.gpu_uuid = gpu_uuid
        self._proc = proc
        self._cpus = affinity()
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._page = int(os.sysconf("SC_PAGE_SIZE")) if hasattr(os, "sysconf") else 4096
        self._autogroup = R.flag(_read(proc / "sys" / "kernel" / "sched_autogroup_enabled"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: tuple[int, str] = (0, "")
        self._taken = 0
        self._gpu: Any = None
        self._nvml: Any = None
        self.error: BaseException | None = None
        self.samples = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (only where /proc exists: elsewhere nothing is sampled)."""
        if self._thread is not None or not (self._proc / "self" / "stat").exists():
            return
        self._thread = threading.Thread(target=self._run, name="gpuanalyze-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread; safe to call more than once."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def take(self) -> str | None:
        """The latest reading as trace JSON if not yet taken (the training thread's only cost)."""
        seq, text = self._latest
        if seq == self._taken:
            return None
        self._taken = seq
        return text

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._open_gpu()
            before = self._counters()
            while not self._stop.wait(self.interval_s):
                now = self._counters()
                sample = self._sample(before, now)
                before = now
                self.samples += 1
                self._latest = (self.samples, encode_host_sample(sample))
        except Exception as exc:  # noqa: BLE001 - the sampler must never disturb the run
            self.error = exc
            warn(f"gpuanalyze: the system sampler stopped ({type(exc).__name__}: {exc}); no more host readings")
        finally:
            self._close_gpu()

    def _counters(self) -> _Counters:
        proc = self._proc
        stat = _read(proc / "stat") or ""
        children = {}
        for pid in self._children():
            child = R.proc_stat(_read(proc / str(pid) / "stat"))
            if child is not None:
                children[pid] = child
        return _Counters(
            mono_ns=time.monotonic_ns(),
            host=R.cpu_ticks(stat),
            mine=R.cpu_ticks(stat, self._cpus) if self._cpus is not None else R.cpu_ticks(stat),
            running=R.procs_running(stat),
            load=R.load_avg_1m(_read(proc / "loadavg")),
            own=R.proc_stat(_read(proc / "self" / "stat")),
            children=children,
            switches=R.involuntary_switches(_read(proc / "self" / "status")),
        )

    def _children(self) -> list[int]:
        """Child processes of every thread of this process (DataLoader workers, compile workers)."""
        task = self._proc / "self" / "task"
        try:
            tids = list(task.iterdir())
        except OSError:
            return []
        pids: list[int] = []
        for tid in tids:
            pids += R.child_pids(_read(tid / "children"))
        return pids

    def _sample(self, before: _Counters, now: _Counters) -> HostSample:
        seconds = max(1e-9, (now.mono_ns - before.mono_ns) / 1e9)
        ticks = self._tick * seconds
        host, mine = _busy_share(now.host, before.host), _busy_share(now.mine, before.mine)
        niced = _nice_share(now.mine, before.mine)
        cpus = len(self._cpus) if self._cpus is not None else (os.cpu_count() or 1)
        own, was = now.own, before.own
        kids = now.children
        worker_ticks = sum(
            max(0, c.cpu_ticks - (before.children[p].cpu_ticks if p in before.children else 0)) for p, c in kids.items()
        )
        return HostSample(
            unix_ns=time.time_ns(),
            interval_s=seconds,
            cpu_util_pct=None if host is None else 100.0 * host,
            busy_cores=None if mine is None else cpus * mine,
            niced_cores=None if niced is None else cpus * niced,
            nice=own.nice if own is not None and -20 <= own.nice <= 19 else None,
            autogroup=self._autogroup,
            run_queue=None if now.running is None else max(0, now.running - 1),  # less the sampler itself
            load_avg=now.load,
            process_cpu_cores=_rate(own.cpu_ticks if own else None, was.cpu_ticks if was else None, ticks),
            workers_cpu_cores=worker_ticks / ticks if kids else None,
            workers=len(kids),
            rss_bytes=own.rss_pages * self._page if own is not None else None,
            workers_rss_bytes=sum(c.rss_pages for c in kids.values()) * self._page if kids else None,
            involuntary_switches_per_s=_rate(now.switches, before.switches, seconds),
            **self._gpu_fields(),
        )

    # -- NVML ------------------------------------------------------------------------------------
    def _open_gpu(self) -> None:
        """The run's GPU in NVML, when pynvml imports, the driver answers and the GPU is known."""
        if self.gpu_uuid is None:
            return
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no driver: the GPU is not sampled
            return
        self._nvml = pynvml
        try:
            self._gpu = pynvml.nvmlDeviceGetHandleByUUID(self.gpu_uuid)
        except Exception:  # noqa: BLE001 - an unknown uuid: the GPU is not sampled
            self._gpu = None

    def _gpu_fields(self) -> dict[str, Any]:
        nvml, gpu = self._nvml, self._gpu
        if gpu is None:
            return {}

        def ask(call: Any, *args: Any) -> Any:
            try:
                return call(gpu, *args)
            except Exception:  # noqa: BLE001 - a query this GPU does not support is not measured
                return None

        util = ask(nvml.nvmlDeviceGetUtilizationRates)
        memory = ask(nvml.nvmlDeviceGetMemoryInfo)
        power = ask(nvml.nvmlDeviceGetPowerUsage)
        return {
            "gpu_util_pct": float(util.gpu) if util is not None else None,
            "gpu_mem_used_bytes": int(memory.used) if memory is not None else None,
            "gpu_power_w": power / 1000.0 if power is not None else None,
            "gpu_temp_c": _float(ask(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)),
            "gpu_sm_clock_mhz": _float(ask(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)),
            "gpu_mem_clock_mhz": _float(ask(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)),
        }

    def _close_gpu(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # ending anyway
                self._nvml.nvmlShutdown()
            self._nvml = self._gpu = None


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None
