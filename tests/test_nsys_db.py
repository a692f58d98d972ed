"""An export left in WAL mode is read as SQLite reads it, with its write-ahead log, and nothing is written beside
the user's file (an immutable open ignores the log; a read-only one needs a -shm file beside it)."""

from __future__ import annotations

import shutil
import sqlite3

from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.sources import load_nsys
from tests.nsys_fixtures import Export, build_export

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def _wal_export(tmp_path):
    """A 3-step export whose 6-step rows are all in its write-ahead log (its writer still had it open when it was
    copied: the main file is the stale 3-step one)."""
    live = tmp_path / "live"
    live.mkdir()
    path = build_export(live / "cap.sqlite", Export(steps=3))
    full = build_export(tmp_path / "full.sqlite", Export(steps=6))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.execute("ATTACH DATABASE ? AS full", (str(full),))
    for (table,) in conn.execute("SELECT name FROM full.sqlite_master WHERE type='table'").fetchall():
        conn.execute(f"DELETE FROM main.{table}")
        conn.execute(f"INSERT INTO main.{table} SELECT * FROM full.{table}")
    conn.commit()
    out = tmp_path / "user"
    out.mkdir()
    for name in ("cap.sqlite", "cap.sqlite-wal"):
        shutil.copyfile(live / name, out / name)
    conn.close()
    return out / "cap.sqlite"


def _state(directory):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def test_a_wal_export_is_read_with_its_log_and_nothing_is_written_beside_it(tmp_path):
    path = _wal_export(tmp_path)
    stale = sqlite3.connect(path.as_uri() + "?mode=ro&immutable=1", uri=True)
    assert stale.execute(f"SELECT count(*) FROM {KERNELS}").fetchone() == (3,)  # what was read before
    stale.close()
    before = _state(path.parent)
    with NsysDb(path) as db:
        assert db.small(f"SELECT count(*) FROM {KERNELS}") == [(6,)]
    trace = load_nsys(path)
    assert trace.frame.height == 6
    assert _state(path.parent) == before  # no -shm, no lock, the log and the export untouched


def test_an_export_without_a_log_is_opened_in_place(tmp_path):
    path = build_export(tmp_path / "cap.sqlite", Export(steps=3))
    (tmp_path / "cap.sqlite-wal").write_bytes(b"")  # an empty log holds nothing to read
    with NsysDb(path) as db:
        assert db._copy is None and db.small(f"SELECT count(*) FROM {KERNELS}") == [(3,)]
