"""Hostile Arrow and naming inputs: Arrow encodings that decode to far more than the file
holds (null-typed columns of a huge length, dictionaries sharing one large value, run-end encoding,
views, zstd and LZ4 bodies, huge metadata), names that made matching quadratic or hide text, out of
range timestamps, secrets on recorded command lines, an Nsight Systems export of 20,000 GPU processes,
and a directory of thousands of ranks."""

from __future__ import annotations

import json
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.ipc_guard import DEFAULT_LIMITS
from gpuanalyze.ingest.trace.runinfo import RunInfo
from tests.conftest import make_row
from tests.kineto_fixtures import two_step_trace
from tests.nsys_fixtures import Export, build_export

#: Invisible characters: TAG letters (hidden text), soft hyphen, Hangul fillers, invisible times.
INVISIBLE = "\U000e0068\U000e0069\xad\u3164\u115f\u1160\uffa0\u2062\u180e\ufe0f"
#: A token planted in command lines: no output may show it (tests/test_hostile_corpus.py).
SECRET = "hf_" + "Planted0Secret" * 3
STATS = json.dumps({"gpu_span_ms": 1.0, "gpu_busy_ms": 0.5, "kernel_count": 3, "top_kernels": []})

Add = Callable[..., None]


def _meta(run: bytes = b"{}") -> dict[bytes, bytes]:
    return {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: S.FORMAT_VERSION.encode(), S.META_RUN: run}


def _write(
    path: Path,
    batch: pa.RecordBatch,
    *,
    compression: str | None = None,
    meta: dict[bytes, bytes] | None = None,
    end: bytes = b'{"status":"ok"}',
) -> Path:
    schema = batch.schema.with_metadata(meta or _meta())
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema, options=opts) as w:
        w.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
        w.write_batch(pa.RecordBatch.from_pylist([], schema=schema), custom_metadata={S.END_KEY: end})
    return path


def _plain(n: int, **columns: Any) -> pa.RecordBatch:
    rows = [make_row(i, wall=20.0, busy=5.0, data=1.0) for i in range(n)]
    table = pa.Table.from_pylist(rows, schema=S.arrow_schema(RunInfo()))
    arrays = {f.name: table.column(f.name).combine_chunks() for f in S.FIELDS}
    arrays.update(columns)
    return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))


def _nsys_with_secrets(path: Path) -> Path:
    """An Nsight Systems export whose profiled command (META_DATA_CAPTURE) holds secrets."""
    build_export(path, Export(steps=4))
    with sqlite3.connect(path) as conn:
        args = ["train.py", "--hf-token", SECRET, f"--api-key={SECRET}", f"WANDB_API_KEY={SECRET}", SECRET]
        conn.executemany(
            "INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
            [(f"PROCESS_0:ARGUMENT_{i + 1}", a) for i, a in enumerate(args)],
        )
    return path


def _stats_sized(size: int) -> str:
    """Kernel statistics of about ``size`` bytes of JSON (a top list of 1 KB names)."""
    top = [{"name": f"k{i}" + "n" * 990, "total_ms": 1.0, "count": 2} for i in range(size // 1020)]
    return json.dumps({"gpu_span_ms": 1.0, "gpu_busy_ms": 0.5, "kernel_count": 3, "top_kernels": top})


#: One row's kernel statistics (~4.2 KB) and how many rows of it decode to just under the guard's floor
#: (each row's string and its 4-byte offset count: ipc_guard).
SIZED = _stats_sized(4200)
JUST_UNDER = int(0.95 * DEFAULT_LIMITS.min_allowance / (len(SIZED) + 4))


def _stats_named(name: str) -> str:
    top = [{"name": name, "total_ms": 1.0, "count": 2}]
    return json.dumps({"gpu_span_ms": 1.0, "gpu_busy_ms": 0.5, "kernel_count": 3, "top_kernels": top})


def _kineto_named(path: Path, name: str, device: str = "H100") -> Path:
    doc = two_step_trace()
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["name"] = name
    doc["deviceProperties"][0]["name"] = device
    path.write_text(json.dumps(doc))
    return path


def _body_claims_more(path: Path) -> Path:
    """A valid trace whose first record batch claims a body far beyond the end of the file."""
    _write(path, _plain(12))
    data = bytearray(path.read_bytes())
    # the schema message, then the first batch message: patch its flatbuffer's bodyLength
    (length,) = struct.unpack_from("<i", data, 4)
    at = 8 + length
    (blen,) = struct.unpack_from("<i", data, at + 4)
    meta = bytes(data[at + 8 : at + 8 + blen])
    root = struct.unpack_from("<I", meta, 0)[0]
    vtable = root - struct.unpack_from("<i", meta, root)[0]
    off = struct.unpack_from("<H", meta, vtable + 4 + 2 * 3)[0]
    struct.pack_into("<q", data, at + 8 + root + off, 1 << 40)
    path.write_bytes(bytes(data))
    return path


def add_cases(d: Path, add: Add) -> None:
    """Append this round's inputs through ``add(name, cls, make)`` (corpus.build's)."""
    n_null = 400_000_000
    add(
        "arrow_null_typed_400m_rows.arrow",
        "arrow",
        lambda p: _write(
            p, pa.RecordBatch.from_arrays([pa.nulls(n_null) for _ in S.FIELDS], [f.name for f in S.FIELDS])
        ),
    )
    add("arrow_null_typed_optional.arrow", "arrow", lambda p: _write(p, _plain(30, gpu_busy_ms=pa.nulls(30))))
    shared = "k" * 200_000
    add(
        "arrow_dictionary_shared_200kb.arrow",
        "arrow",
        lambda p: _write(
            p,
            _plain(
                20_000,
                kernel_stats=pa.DictionaryArray.from_arrays(pa.array([0] * 20_000, pa.int32()), pa.array([shared])),
            ),
        ),
    )
    add(
        "arrow_dictionary_small.arrow",
        "arrow",
        lambda p: _write(
            p, _plain(30, kernel_stats=pa.DictionaryArray.from_arrays(pa.array([0] * 30, pa.int8()), pa.array([STATS])))
        ),
    )
    add(
        "arrow_run_end_encoded.arrow",
        "arrow",
        lambda p: _write(
            p, _plain(1000, wall_ms=pa.RunEndEncodedArray.from_arrays(pa.array([1000], pa.int32()), [20.0]))
        ),
    )
    add(
        "arrow_string_view.arrow",
        "arrow",
        lambda p: _write(p, _plain(30, kernel_stats=pa.array([STATS] * 30, pa.string_view()))),
    )
    for codec in ("zstd", "lz4"):
        add(
            f"arrow_{codec}_bomb.arrow",
            "arrow",
            lambda p, c=codec: _write(p, _plain(4000, kernel_stats=pa.array(["x" * 100_000] * 4000)), compression=c),
        )
        add(  # valid kernel statistics that decode to just under the guard's floor: admitted, bounded in memory
            f"arrow_{codec}_just_under_the_allowance.arrow",
            "memory",
            lambda p, c=codec: _write(
                p, _plain(JUST_UNDER, kernel_stats=pa.array([SIZED] * JUST_UNDER)), compression=c
            ),
        )
        add(
            f"arrow_{codec}_honest.arrow",
            "arrow",
            lambda p, c=codec: _write(p, _plain(300, kernel_stats=pa.array([STATS] * 300)), compression=c),
        )
    add(
        "arrow_huge_run_metadata.arrow",
        "arrow",
        lambda p: _write(p, _plain(30), meta=_meta(json.dumps({"argv": "a" * 8_000_000}).encode())),
    )
    add(
        "arrow_huge_tags.arrow",
        "arrow",
        lambda p: _write(p, _plain(30), meta={**_meta(), S.META_TAGS: json.dumps({"k": "v" * 8_000_000}).encode()}),
    )
    add(
        "arrow_huge_end_marker.arrow",
        "arrow",
        lambda p: _write(p, _plain(30), end=json.dumps({"status": "ok", "exception": "e" * 8_000_000}).encode()),
    )
    add(
        "arrow_shared_large_values_plain.arrow",
        "arrow",
        lambda p: _write(p, _plain(40, kernel_stats=pa.array([_stats_named("n" * 200_000)] * 40))),
    )
    add("arrow_body_claims_1tb.arrow", "arrow", _body_claims_more)
    for label, start in (("max", 2**63 - 1), ("min", -(2**63))):
        add(
            f"arrow_start_{label}_int64.arrow",
            "absurd",
            lambda p, s=start: _write(p, _plain(20, start_unix_ns=pa.array([s] * 20, pa.int64()))),
        )

    # -- names: quadratic matching, hidden text -------------------------------------------------------
    add("kineto_name_1mb_triton.json", "names", lambda p: _kineto_named(p, "triton_m" * 131_072))
    add("kineto_name_200k_digits.json", "names", lambda p: _kineto_named(p, "1" * 200_000 + "cudnn"))
    add("kineto_name_void_template.json", "names", lambda p: _kineto_named(p, "void <lambda>(int)"))
    add(
        "kineto_invisible_names.json",
        "names",
        lambda p: _kineto_named(p, f"sgemm{INVISIBLE}_kernel", device=f"H100{INVISIBLE}"),
    )
    add(
        "arrow_name_1mb_triton.arrow",
        "names",
        lambda p: _write(p, _plain(30, kernel_stats=pa.array([_stats_named("triton_m" * 131_072)] + [None] * 29))),
    )
    add(
        "arrow_invisible_everywhere.arrow",
        "names",
        lambda p: _write(
            p,
            _plain(30, kernel_stats=pa.array([_stats_named(f"k{INVISIBLE}")] * 30)),
            meta=_meta(json.dumps({"gpu_name": f"A100{INVISIBLE}", "host": INVISIBLE}).encode()),
        ),
    )
    add(f"path{INVISIBLE}.json", "names", lambda p: _kineto_named(p, "sgemm"))

    # -- secrets on command lines, a host's worth of GPU processes -------------------------------------
    argv = f"python t.py --hf-token {SECRET} --api-key={SECRET} WANDB_API_KEY={SECRET}"
    add(
        "arrow_secrets_in_argv.arrow",
        "terminal",
        lambda p: _write(p, _plain(30), meta=_meta(json.dumps({"argv": argv}).encode())),
    )
    add("nsys_secrets_in_command.sqlite", "terminal", _nsys_with_secrets)
    add(
        "nsys_20000_processes.sqlite",
        "memory",
        lambda p: build_export(p, Export(pids=tuple(range(100, 20_100)), steps=1, tables=("kernel",), gpu_table=False)),
    )

    # -- scale: thousands of tiny ranks ---------------------------------------------------------------
    def many_ranks(p: Path, n: int = 3000) -> Path:
        p.mkdir()
        for r in range(n):
            (p / f"rank{r}.json").write_text(json.dumps(two_step_trace(rank=r, world=n), separators=(",", ":")))
        return p

    add("dir_3000_kineto_ranks", "scale", many_ranks)
