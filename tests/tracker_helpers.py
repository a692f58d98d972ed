"""Reading back what a tracker stored: an MLflow file store, a W&B offline run directory."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_BLOCK = 32768


def wandb_records(run_file: Path) -> list[Any]:
    """The records of an offline run's ``run-<id>.wandb`` (LevelDB log framing of protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, chunks, pending = 7, [], b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            pos += (_BLOCK - pos % _BLOCK) % _BLOCK
            continue
        chunk, pos = data[pos : pos + length], pos + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
    out = []
    for chunk in chunks:
        record = pb.Record()
        record.ParseFromString(chunk)
        out.append(record)
    return out


def wandb_summary(run_dir: Path) -> dict[str, Any]:
    """The run summary as stored (later updates win)."""
    (run_file,) = run_dir.glob("run-*.wandb")
    summary: dict[str, Any] = {}
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary[item.key] = json.loads(item.value_json)
    return summary


def wandb_artifacts(run_dir: Path) -> list[str]:
    (run_file,) = run_dir.glob("run-*.wandb")
    return [r.artifact.name for r in wandb_records(run_file) if r.WhichOneof("record_type") == "artifact"]
