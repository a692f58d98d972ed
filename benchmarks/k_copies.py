"""A capture K times longer: its timeline repeated K times back to back, read like a longer capture of the same run.

    python benchmarks/k_copies.py ../shared/nsys_traces/nsysai_mfu_train_2gpu_before.sqlite 100 /tmp/x100.sqlite
    python benchmarks/k_copies.py TRACE.pt.trace.json.gz 40 /tmp/x40.json       # Kineto (.json or .json.gz in)

- Nsight Systems SQLite export: every row of every table with a ``start`` or ``timestamp`` column (activity,
  runtime, NVTX, synchronisation, OS runtime rows) copied K-1 times, copy i shifted by i times the capture's
  span (its first event's start to its last event's end); every ``correlationId`` shifted by i times (the
  largest + 1), so a launch still finds its kernel and ids stay unique; strings, threads, processes and
  metadata kept once; ``ANALYSIS_DETAILS`` (the session) made long enough to hold every copy.
- Kineto JSON: every timed event repeated the same way (``ts``), ``id``, ``args.correlation``,
  ``args.External id`` (and the other id arguments) shifted, ``ProfilerStep#N`` renumbered after the last step
  of the copy before; metadata events (``ph: M``) and the document's other keys kept once. Written streaming.

Tests import ``repeat_nsys`` and ``repeat_kineto`` (tests/test_k_copies.py).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import msgspec

ID_ARGS = ("correlation", "External id", "Record function id", "Fwd thread id", "Sequence number")
_TIME_COLUMNS = ("start", "end", "timestamp")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _timed_tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Table -> its columns, for the tables whose rows have a time (``start`` or ``timestamp``)."""
    out = {}
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({_quote(name)})")]
        if "start" in cols or "timestamp" in cols:
            out[name] = cols
    return out


def repeat_nsys(src: Path, dst: Path, k: int) -> Path:
    """``dst``: the export ``src`` with its timeline repeated ``k`` times (module docstring)."""
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    tables = _timed_tables(conn)
    lo, hi, corr = None, None, 0
    for t, cols in tables.items():
        first = "start" if "start" in cols else "timestamp"
        last = "end" if "end" in cols else first
        a, b = conn.execute(f"SELECT min({first}), max({last}) FROM {_quote(t)}").fetchone()
        lo = a if lo is None or (a is not None and a < lo) else lo
        hi = b if hi is None or (b is not None and b > hi) else hi
        if "correlationId" in cols:
            corr = max(corr, conn.execute(f"SELECT max(correlationId) FROM {_quote(t)}").fetchone()[0] or 0)
    if lo is None or hi is None:
        raise SystemExit(f"{src}: no timed rows to repeat")
    span, corr_step = hi - lo, corr + 1
    for t, cols in tables.items():
        (rows,) = conn.execute(f"SELECT max(rowid) FROM {_quote(t)}").fetchone()
        if rows is None:
            continue
        names = ", ".join(_quote(c) for c in cols)
        for i in range(1, k):
            shifted = [
                f"{_quote(c)} + {i * span}"
                if c in _TIME_COLUMNS
                else f"{_quote(c)} + {i * corr_step}"
                if c == "correlationId"
                else _quote(c)
                for c in cols
            ]
            conn.execute(
                f"INSERT INTO {_quote(t)} ({names}) SELECT {', '.join(shifted)} FROM {_quote(t)} WHERE rowid <= ?",
                (rows,),
            )
    if "ANALYSIS_DETAILS" in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(ANALYSIS_DETAILS)")}
        for c in ("duration", "stopTime"):
            if c in cols:
                conn.execute(f"UPDATE ANALYSIS_DETAILS SET {c} = {c} + ?", ((k - 1) * span,))
    conn.commit()
    conn.close()
    return dst


def one_process(path: Path) -> list[int]:
    """Every process with GPU work relabelled, in place, onto the lowest one's pid (``globalPid`` and the pid bits
    of ``globalTid``; OS thread ids are unique, so the threads stay apart): the same capture, read as one process
    holding every event. Returns the pids that were merged."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = OFF")
    pid = "((globalPid >> 24) & 16777215)"
    pids = sorted(r[0] for r in conn.execute(f"SELECT DISTINCT {pid} FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    if len(pids) > 1:
        into, others = pids[0] << 24, ", ".join(str(p) for p in pids[1:])
        for t, cols in _timed_tables(conn).items():
            for c in ("globalPid", "globalTid"):
                if c in cols:
                    conn.execute(
                        f"UPDATE {_quote(t)} SET {c} = ({c} & ~(16777215 << 24)) | {into} "
                        f"WHERE (({c} >> 24) & 16777215) IN ({others})"
                    )
    conn.commit()
    conn.close()
    return pids


def _read_json(src: Path) -> dict[str, Any]:
    raw = gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes()
    doc = msgspec.json.decode(raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def _shift_event(e: dict[str, Any], i: int, span: float, ids: int, args_step: int, steps: int) -> dict[str, Any]:
    d = dict(e)
    d["ts"] = d["ts"] + i * span
    if isinstance(d.get("id"), int):
        d["id"] += i * ids
    args = d.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(a), int) for a in ID_ARGS):
        d["args"] = {a: v + i * args_step if a in ID_ARGS and isinstance(v, int) else v for a, v in args.items()}
    name = d.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
        d["name"] = f"ProfilerStep#{int(name[13:]) + i * steps}"
    return d


def repeat_kineto(src: Path, dst: Path, k: int) -> Path:
    """``dst`` (JSON, gzipped when it ends in .gz): the Kineto trace ``src`` repeated ``k`` times (docstring)."""
    doc = _read_json(src)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), int | float)]
    once = [e for e in events if e.get("ph") == "M" or not isinstance(e.get("ts"), int | float)]
    lo = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - lo
    ids = max([e["id"] for e in events if isinstance(e.get("id"), int)] + [0]) + 1
    args = [v for e in events for a, v in (e.get("args") or {}).items() if a in ID_ARGS and isinstance(v, int)]
    args_step = max([*args, 0]) + 1
    names = [n for e in timed if isinstance(n := e.get("name"), str) and n.startswith("ProfilerStep#")]
    numbers = [int(n[13:]) for n in names if n[13:].isdigit()]
    steps = max(numbers) + 1 if numbers else 0
    enc = msgspec.json.Encoder()
    head = enc.encode(doc)[:-1] + (b', "traceEvents": [' if doc else b'{"traceEvents": [')
    with gzip.open(dst, "wb", compresslevel=1) if dst.suffix == ".gz" else open(dst, "wb") as fh:
        fh.write(head)
        fh.write(b",\n".join(enc.encode(e) for e in once))
        sep = b",\n" if once else b""
        for i in range(k):
            fh.write(sep + b",\n".join(enc.encode(_shift_event(e, i, span, ids, args_step, steps)) for e in timed))
            sep = b",\n"
        fh.write(b"]}")
    return dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("k", type=int)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.out.exists():
        sys.exit(f"{args.out} exists; choose another output path")
    with open(args.source, "rb") as fh:
        sqlite = fh.read(16) == b"SQLite format 3\x00"
    (repeat_nsys if sqlite else repeat_kineto)(args.source, args.out, args.k)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {args.k} copies of {args.source.name}")


if __name__ == "__main__":
    main()
