"""One reading of the system sampler: what the host, this process and its GPU were doing.

Stored as JSON in the trace's ``system`` column on the first row written after the reading
(null on the other rows), so a killed run keeps every reading up to its last flush, and decoded
with type and range checks like every other value read from a trace. Rates cover the reading's
``interval_s``; None is "not measured" (no /proc, no NVML, no GPU).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

_Float = Annotated[float, msgspec.Meta(ge=0.0, le=1e15)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=1 << 62)]
_Pct = Annotated[float, msgspec.Meta(ge=0.0, le=100.0)]


class HostSample(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One system-sampler reading (about one a second)."""

    unix_ns: _Count
    """When the reading was taken."""
    interval_s: Annotated[float, msgspec.Meta(gt=0.0, le=1e6)]
    """The time the rates below cover (since the previous reading)."""
    cpu_util_pct: _Pct | None = None
    """Host-wide CPU utilisation (every online CPU, not idle nor iowait)."""
    busy_cores: _Float | None = None
    """Cores' worth of busy time on the CPUs this process may run on (its affinity mask)."""
    niced_cores: _Float | None = None
    """Of ``busy_cores``, user time at a positive nice value (``/proc/stat``'s nice column): low-priority work."""
    nice: Annotated[int, msgspec.Meta(ge=-20, le=19)] | None = None
    """This process's nice value."""
    autogroup: bool | None = None
    """The kernel groups processes by session for scheduling (``sched_autogroup_enabled``): nice then ranks
    processes within a session only."""
    run_queue: _Count | None = None
    """Threads running or ready to run on the host (``procs_running``), the sampler's own excluded."""
    load_avg: _Float | None = None
    """The host's 1-minute load average."""
    process_cpu_cores: _Float | None = None
    """Cores' worth of CPU time this process used (all its threads)."""
    workers_cpu_cores: _Float | None = None
    """Cores' worth of CPU time its child processes (DataLoader workers) used."""
    workers: _Count | None = None
    """Child processes alive at the reading."""
    rss_bytes: _Count | None = None
    """This process's resident memory."""
    workers_rss_bytes: _Count | None = None
    """Its child processes' resident memory (shared pages counted in each)."""
    involuntary_switches_per_s: _Float | None = None
    """Times per second this process was preempted (a sign of CPU contention)."""
    gpu_util_pct: _Pct | None = None
    """NVML: share of the interval a kernel ran on the GPU."""
    gpu_mem_used_bytes: _Count | None = None
    gpu_power_w: _Float | None = None
    gpu_temp_c: Annotated[float, msgspec.Meta(ge=-100.0, le=300.0)] | None = None
    gpu_sm_clock_mhz: _Float | None = None
    gpu_mem_clock_mhz: _Float | None = None


_DECODER = msgspec.json.Decoder(HostSample)
_ENCODER = msgspec.json.Encoder()


def encode_host_sample(sample: HostSample) -> str:
    return _ENCODER.encode(sample).decode()


def decode_host_sample(text: str) -> HostSample:
    """Raises msgspec.ValidationError / DecodeError on a malformed value."""
    return _DECODER.decode(text)
