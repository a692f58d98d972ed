"""Hostile or wrong SQLite input to the Nsight Systems importer: one line, no traceback, nothing written."""

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.errors import TraceError
from gpuanalyze.ingest.sources import load_any, load_nsys
from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from tests.nsys_fixtures import Export, build_export

runner = CliRunner()


def _files(path):
    """The directory's names, and the file's bytes and mtime (not read through a link: /dev/zero never ends)."""
    names = sorted(p.name for p in path.parent.iterdir())
    return names, None if path.is_symlink() else (path.read_bytes(), path.stat().st_mtime_ns)


def _one_line_error(path):
    before = _files(path)
    result = runner.invoke(app, [str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert _files(path) == before  # nothing written to the file or beside it (no journal, no WAL, no lock)
    return result.output


def test_an_sqlite_database_that_is_not_an_export(tmp_path):
    path = tmp_path / "app.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    assert "not an Nsight Systems export" in _one_line_error(path)


def test_a_file_that_is_not_sqlite(tmp_path):
    path = tmp_path / "r.sqlite"
    path.write_bytes(b"\x00" * 4096)
    assert "not an SQLite file" in _one_line_error(path)


def test_a_corrupt_page(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(steps=200))
    data = bytearray(path.read_bytes())
    data[4096 * 2 : 4096 * 6] = b"\xa5" * (4096 * 4)
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError):
        load_any(path)
    _one_line_error(path)


def test_a_header_that_claims_four_billion_pages(tmp_path):
    path = build_export(tmp_path / "r.sqlite")
    data = bytearray(path.read_bytes())
    data[28:32] = (0xFFFFFFFF).to_bytes(4, "big")  # the in-header database size, in pages
    data[92:96] = data[24:28]  # "version-valid-for" = the change counter: SQLite trusts that size
    path.write_bytes(bytes(data))
    assert "malformed" in _one_line_error(path)


def test_a_table_that_claims_billions_of_rows_is_read_by_what_it_holds(tmp_path):
    # sqlite_stat1 (ANALYZE's row counts) claims 5 billion kernels and the rowids run to 2**62: nothing is sized
    # from either, so the import reads the rows there are
    path = build_export(tmp_path / "r.sqlite", Export(steps=3))
    conn = sqlite3.connect(path)
    conn.execute("ANALYZE")
    conn.execute("UPDATE sqlite_stat1 SET stat = '5000000000' WHERE tbl = 'CUPTI_ACTIVITY_KIND_KERNEL'")
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = rowid + (1 << 62)")
    conn.commit()
    conn.close()
    before = _files(path)
    assert load_any(path).frame.height == 3
    assert _files(path) == before


def test_a_link_to_dev_zero_is_never_read(tmp_path):
    link = tmp_path / "r.sqlite"
    link.symlink_to("/dev/zero")
    assert "not a regular file" in _one_line_error(link)


def test_a_huge_string_is_cut_in_sql(tmp_path):
    e = Export(kernel_name="k" * (MAX_NAME_CHARS * 50))
    t = load_any(build_export(tmp_path / "r.sqlite", e))
    assert t.frame.height == 3  # imported; the name reached Python cut to MAX_NAME_CHARS


def test_a_value_beyond_sqlites_heap_limit_is_one_error(tmp_path, monkeypatch):
    from gpuanalyze.ingest.nsys import db as nsys_db

    monkeypatch.setattr(nsys_db, "SQLITE_HEAP_LIMIT", 8 << 20)
    path = build_export(tmp_path / "r.sqlite", Export(kernel_name="k" * (24 << 20)))
    with pytest.raises(TraceError, match="more than SQLite's 8 MiB"):
        load_any(path)
    conn = sqlite3.connect(":memory:")  # the process's limit is back as it was
    assert conn.execute("PRAGMA hard_heap_limit").fetchone()[0] == 0


def test_text_where_numbers_belong_is_skipped(tmp_path):
    path = build_export(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon'")
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = 'x' WHERE rowid = 1")
    conn.commit()
    conn.close()
    t = load_any(path)  # the copies still make the rank
    assert t.frame.height == 3


def test_more_rows_than_the_limit_is_one_error(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(steps=50))
    with pytest.raises(TraceError, match="more than 20 device, runtime and phase events"):
        load_nsys(path, ReadLimits(max_kept_events=20))


def test_an_export_with_nothing_to_analyse(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(tables=()))
    assert "no CUDA activity, runtime calls or NVTX ranges" in _one_line_error(path)


def test_nvtx_only_capture_is_an_unknown_report_saying_what_is_missing(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(tables=("nvtx",)))
    result = runner.invoke(app, [str(path), "--json"])  # before: refused (exit 2, no JSON)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["bottleneck"] == "unknown" and not data["findings"]
    assert "only 3 NVTX ranges" in data["confidence_reason"] and "no GPU activity" in data["confidence_reason"]


@pytest.mark.slow
def test_a_300_mb_string_is_refused_in_bounded_memory(tmp_path):
    import subprocess
    import sys

    path = build_export(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE StringIds SET value = ? WHERE value LIKE 'void%'", ("k" * 300_000_000,))
    conn.commit()
    conn.close()
    code = (
        "import sys\n"
        "from gpuanalyze.ingest.sources import load_any\n"
        "from analyzer.errors import TraceError\n"
        "try:\n    load_any(sys.argv[1])\nexcept TraceError as e:\n    print('refused:', e)\n"
        "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert "refused:" in out and "256 MiB" in out
    assert int(out.split()[-1]) / 1024 <= 600
