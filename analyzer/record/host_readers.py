"""Linux's own accounts of CPU, memory and limits, parsed from the text of /proc and cgroup files.

Pure functions of file text (tests feed them fixture strings: cgroup v1, v2, ``max``, absent),
so the sampler thread only reads files and calls these. Anything unparsable is None: a reading
that cannot be trusted is not a reading.
"""

from __future__ import annotations

from dataclasses import dataclass


def cpu_max_cores(text: str | None) -> float | None:
    """cgroup v2 ``cpu.max`` (``"<quota_us> <period_us>"`` or ``"max <period_us>"``): the quota in
    cores, None when unlimited or unreadable."""
    if not text:
        return None
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    try:
        quota = int(fields[0])
        period = int(fields[1]) if len(fields) > 1 else 100_000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cfs_quota_cores(quota_text: str | None, period_text: str | None) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``: the quota in cores; -1 means unlimited."""
    if not quota_text or not period_text:
        return None
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_paths(text: str | None) -> tuple[str | None, str | None]:
    """``/proc/self/cgroup``: this process's cgroup v2 path and its v1 ``cpu`` controller path."""
    v2 = v1 = None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path.strip()
        elif "cpu" in controllers.split(","):
            v1 = path.strip()
    return v2, v1


@dataclass(frozen=True, slots=True)
class CpuTicks:
    """Clock ticks from ``/proc/stat`` over a set of CPUs: busy (not idle nor iowait) and total."""

    busy: int
    total: int
    nice: int = 0
    """Of the busy ticks, user time at a positive nice value (the ``nice`` column): low-priority work."""


def cpu_ticks(text: str, cpus: frozenset[int] | None = None) -> CpuTicks | None:
    """``/proc/stat``: summed over ``cpus`` (the per-CPU lines), or the ``cpu`` total line when None."""
    busy = total = nice = 0
    seen = False
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *values = line.split()
        if cpus is None:
            if name != "cpu":
                continue
        elif name == "cpu" or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        try:
            ticks = [int(v) for v in values[:8]]  # user nice system idle iowait irq softirq steal
        except ValueError:
            return None
        if len(ticks) < 4:
            return None
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        busy += sum(ticks) - idle
        total += sum(ticks)
        nice += ticks[1]
        seen = True
    return CpuTicks(busy, total, nice) if seen else None


def procs_running(text: str) -> int | None:
    """``/proc/stat``'s ``procs_running``: threads running or ready to run on the whole host."""
    for line in text.splitlines():
        if line.startswith("procs_running "):
            value = line.split()[1]
            return int(value) if value.isdigit() else None
    return None


def load_avg_1m(text: str | None) -> float | None:
    """``/proc/loadavg``: the 1-minute load average."""
    if not text:
        return None
    try:
        value = float(text.split()[0])
    except (ValueError, IndexError):
        return None
    return value if value >= 0 else None


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says of one process."""

    ppid: int
    cpu_ticks: int
    """utime + stime, in clock ticks."""
    rss_pages: int
    nice: int = 0
    """The process's nice value (-20 to 19; field 19)."""


def proc_stat(text: str | None) -> ProcStat | None:
    """``/proc/<pid>/stat``; the command name (field 2) may hold spaces and parentheses."""
    if not text:
        return None
    close = text.rfind(")")
    if close < 0:
        return None
    fields = text[close + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15, nice 19, rss 24
    try:
        return ProcStat(
            ppid=int(fields[1]),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            rss_pages=int(fields[21]),
            nice=int(fields[16]),
        )
    except (ValueError, IndexError):
        return None


def involuntary_switches(text: str | None) -> int | None:
    """``/proc/<pid>/status``'s ``nonvoluntary_ctxt_switches``: times the process was preempted."""
    for line in (text or "").splitlines():
        if line.startswith("nonvoluntary_ctxt_switches:"):
            value = line.split(":", 1)[1].strip()
            return int(value) if value.isdigit() else None
    return None


def child_pids(text: str | None) -> list[int]:
    """``/proc/<pid>/task/<tid>/children``: space-separated pids."""
    return [int(p) for p in (text or "").split() if p.isdigit()]


def flag(text: str | None) -> bool | None:
    """A /proc/sys switch ("0" or "1"); None when it was not read or says something else."""
    value = (text or "").strip()
    return {"0": False, "1": True}.get(value)


#: CPU flags (``/proc/cpuinfo``) of native bf16 arithmetic: AVX512_BF16 (VDPBF16PS) and AMX_BF16 tiles.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def bf16_flags(text: str | None) -> str | None:
    """The native bf16 flags of the first CPU in ``/proc/cpuinfo``, comma-joined ('' none); None when unread."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            have = set(value.split())
            return ",".join(f for f in BF16_FLAGS if f in have)
    return None
