"""What an Nsight Systems export says about itself and its machine: the nsys version, the profiled command,
the GPUs, and where its clock sits in UTC.

- version and command (redacted, redact.py): ``META_DATA_EXPORT`` + ``META_DATA_CAPTURE`` (2024.2 on) or
  ``EXPORT_META_DATA`` (up to 2023.1), name/value rows (``EXPORT_PRODUCT_VERSION``, ``PROCESS_0:COMMAND``,
  ``PROCESS_0:ARGUMENT_<i>``);
- GPUs: ``TARGET_INFO_GPU`` (id, name, totalMemory, smCount, computeMajor/computeMinor, cuDevice); missing in
  some exports (then the model is unknown, said in a note); ``TARGET_INFO_CUDA_DEVICE`` (2025 on: gpuId, cudaId,
  pid, and numMultiprocessors in some) maps a process's CUDA device number (its kernels' ``deviceId``) to the
  GPU's ``id`` (a rank with ``CUDA_VISIBLE_DEVICES=3`` sees GPU 3 as device 0), and gives the SM count where
  ``TARGET_INFO_GPU`` is missing;
- place in the job: ``RANK`` and ``WORLD_SIZE`` in the profiled process's environment (its
  ``PROCESS_0:ENVIRONMENT_VARIABLE`` rows; torchrun sets both for ``torchrun ... nsys profile -o report.%q{RANK}
  python train.py``); no other variable is read;
- clock: ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is UTC at the session's start; its ``systemClockNs``
  (2025 on) is the same instant on the event clock; older exports count events from the session's start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.trace.redact import redact_argv

_META_TABLES = ("META_DATA_EXPORT", "META_DATA_CAPTURE", "EXPORT_META_DATA")
_MAX_ARGS = 64
_MAX_GPUS = 256
#: Most ranks a process's WORLD_SIZE is believed for (a larger one is not a world size).
MAX_WORLD = 1 << 20
_PLACE = re.compile(r'(RANK|WORLD_SIZE)="?(\d{1,9})"?')


@dataclass(frozen=True, slots=True)
class NsysGpu:
    """One GPU of TARGET_INFO_GPU (or of TARGET_INFO_CUDA_DEVICE alone)."""

    device: int | None
    """The CUDA device number (cuDevice, else id): the deviceId of its kernels."""
    gpu_id: int | None
    """TARGET_INFO_GPU.id (TARGET_INFO_CUDA_DEVICE.gpuId)."""
    name: str | None
    memory: int | None
    sms: int | None
    capability: str | None
    """'major.minor'."""

    def props(self) -> dict[str, object]:
        """Kineto's deviceProperties entry for this GPU (capture_meta.device_props reads it)."""
        out: dict[str, object] = {}
        if self.name:
            out["name"] = self.name
        if self.memory:
            out["totalGlobalMem"] = self.memory
        if self.sms:
            out["numSms"] = self.sms
        if self.capability:
            major, minor = self.capability.split(".")
            out["computeMajor"], out["computeMinor"] = int(major), int(minor)
        return out


@dataclass(frozen=True, slots=True)
class NsysMeta:
    version: str | None
    command: str | None
    gpus: tuple[NsysGpu, ...]
    epoch_ns: int | None
    """Add to an event's timestamp (ns) for UTC nanoseconds since 1970; None when the export has no start time."""
    cuda_devices: dict[tuple[int, int], tuple[int | None, int | None]] = field(default_factory=dict)
    """(pid, CUDA device number) -> (GPU id, SM count) from TARGET_INFO_CUDA_DEVICE."""
    place: tuple[int, int] | None = None
    """(RANK, WORLD_SIZE) the profiled process ran with, where both are set and 0 <= RANK < WORLD_SIZE."""


def _int(value: object, hi: int = 1 << 62) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < hi else None


def _text(value: object, limit: int = 256) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _pairs(db: NsysDb) -> dict[str, str]:
    out: dict[str, str] = {}
    for table in _META_TABLES:
        if db.has(table, "name", "value"):
            rows = db.small(f"SELECT substr(name, 1, 128), substr(value, 1, 512) FROM {table}", limit=8192)
            out.update({str(k): str(v) for k, v in rows if k is not None and v is not None})
    return out


def _command(pairs: dict[str, str]) -> str | None:
    cmd = pairs.get("PROCESS_0:COMMAND")
    if cmd is None:
        return None
    args = [pairs[f"PROCESS_0:ARGUMENT_{i}"] for i in range(_MAX_ARGS) if f"PROCESS_0:ARGUMENT_{i}" in pairs]
    return " ".join(redact_argv([cmd, *args]))[:1024]


def _gpus(db: NsysDb) -> tuple[NsysGpu, ...]:
    cols = db.columns("TARGET_INFO_GPU")
    if not cols:
        return ()
    wanted = ("cuDevice", "id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor")
    select = ", ".join(c if c in cols else "NULL" for c in wanted)
    out = []
    for cu, gid, name, memory, sms, major, minor in db.small(f"SELECT {select} FROM TARGET_INFO_GPU", limit=_MAX_GPUS):
        cap = None
        if (ma := _int(major, 100)) is not None and (mi := _int(minor, 100)) is not None:
            cap = f"{ma}.{mi}"
        device = _int(cu, 1 << 20)
        out.append(
            NsysGpu(
                device=device if device is not None else _int(gid, 1 << 20),
                gpu_id=_int(gid, 1 << 20),
                name=_text(name),
                memory=_int(memory, 1 << 50) or None,
                sms=_int(sms, 1 << 20) or None,
                capability=cap,
            )
        )
    return tuple(out)


def _cuda_devices(db: NsysDb) -> dict[tuple[int, int], tuple[int | None, int | None]]:
    cols = db.columns("TARGET_INFO_CUDA_DEVICE")
    if not {"cudaId", "pid"} <= cols:
        return {}
    select = ", ".join(c if c in cols else "NULL" for c in ("pid", "cudaId", "gpuId", "numMultiprocessors"))
    out: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    for pid, cuda, gpu, sms in db.small(f"SELECT {select} FROM TARGET_INFO_CUDA_DEVICE", limit=_MAX_GPUS * 64):
        p, c = _int(pid, 1 << 24), _int(cuda, 1 << 20)
        if p is not None and c is not None:
            out[(p, c)] = (_int(gpu, 1 << 20), _int(sms, 1 << 20) or None)
    return out


def _epoch(db: NsysDb) -> int | None:
    cols = db.columns("TARGET_INFO_SESSION_START_TIME")
    if "utcEpochNs" not in cols:
        return None
    clock = "systemClockNs" if "systemClockNs" in cols else "0"
    rows = db.small(f"SELECT utcEpochNs, {clock} FROM TARGET_INFO_SESSION_START_TIME", limit=1)
    if not rows:
        return None
    utc, at = _int(rows[0][0]), _int(rows[0][1])
    return None if utc is None or at is None else utc - at


def _place(db: NsysDb) -> tuple[int, int] | None:
    """(RANK, WORLD_SIZE) of the profiled process's environment; only those two variables are read."""
    got: dict[str, int] = {}
    for table in _META_TABLES:
        if db.has(table, "name", "value"):
            sql = (
                f"SELECT substr(value, 1, 32) FROM {table} WHERE name = 'PROCESS_0:ENVIRONMENT_VARIABLE' "
                "AND (value LIKE 'RANK=%' OR value LIKE 'WORLD_SIZE=%')"
            )
            for (value,) in db.small(sql, limit=16):
                if isinstance(value, str) and (m := _PLACE.fullmatch(value)):
                    got[m[1]] = int(m[2])
    rank, world = got.get("RANK"), got.get("WORLD_SIZE")
    return (rank, world) if rank is not None and world is not None and rank < world <= MAX_WORLD else None


def read_meta(db: NsysDb) -> NsysMeta:
    pairs = _pairs(db)
    return NsysMeta(
        version=_text(pairs.get("EXPORT_PRODUCT_VERSION"), 64),
        command=_command(pairs),
        gpus=_gpus(db),
        epoch_ns=_epoch(db),
        cuda_devices=_cuda_devices(db),
        place=_place(db),
    )


def gpu_for(meta: NsysMeta, device: int | None, pid: int | None = None) -> NsysGpu | None:
    """The GPU of a process's CUDA device number: through TARGET_INFO_CUDA_DEVICE where it lists the process,
    else by cuDevice; the only GPU when the export lists one; None otherwise. Without TARGET_INFO_GPU, a GPU
    that TARGET_INFO_CUDA_DEVICE gives the SM count of (no name)."""
    gpus = meta.gpus
    mapped = meta.cuda_devices.get((pid, device)) if pid is not None and device is not None else None
    if mapped is None and pid is not None and device is None:  # a rank without a device id: its only device
        own = [v for (p, _), v in meta.cuda_devices.items() if p == pid]
        mapped = own[0] if len(own) == 1 else None
    if mapped is not None:
        for g in gpus:
            if mapped[0] is not None and g.gpu_id == mapped[0]:
                return g
        if not gpus and mapped[1] is not None:
            return NsysGpu(device=device, gpu_id=mapped[0], name=None, memory=None, sms=mapped[1], capability=None)
    for g in gpus:
        if device is not None and g.device == device:
            return g
    return gpus[0] if len(gpus) == 1 else None
