"""Nsight Systems SQLite exports import to the same trace rows as a Kineto trace: synthetic exports to the
documented schema, across the versions' table and column sets."""

import gc
import json
import os
import sqlite3

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.errors import TraceError
from gpuanalyze.ingest.nsys.load import WINDOW_NOTE, is_nsys_path, load_nsys_ranks
from gpuanalyze.ingest.sources import load_any, load_nsys
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import make_row, write_trace
from tests.nsys_fixtures import Export, build_export, global_pid

runner = CliRunner()


def _col(trace, name):
    return trace.frame.get_column(name).to_list()


def test_two_processes_with_gpu_rows_are_two_ranks_with_their_steps(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite", Export(pids=(4242, 4243))))
    assert t.run.world_size == 2 and sorted(set(_col(t, S.RANK))) == [0, 1]
    assert _col(t, S.STEP) == [0, 1, 2, 0, 1, 2]
    assert t.run.gpu_name == "NVIDIA H100 80GB HBM3" and t.run.compute_capabilities == ("9.0",)
    assert t.run.source == "nsys:r.sqlite" and t.run.device == "cuda"
    assert any("2 processes with GPU activity" in n for n in t.notes)


def test_step_rows_carry_kernels_pageable_copies_and_blocking_syncs(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite"))
    assert _col(t, S.WALL_MS) == pytest.approx([9.0] * 3)
    assert _col(t, S.GPU_BUSY_MS) == pytest.approx([5.2] * 3)  # the 5 ms kernel and the 0.2 ms copy
    # cudaStreamSynchronize_v3020 (0.5 ms: blocking by family) and the 5 us cudaMemcpyAsync of pageable memory
    assert _col(t, S.SYNC_MS) == pytest.approx([0.505] * 3)
    assert _col(t, S.H2D_MS) == pytest.approx([0.2] * 3)
    stats = S.decode_kernel_stats(_col(t, S.KERNEL_STATS)[0])
    assert stats.elementwise_ms == pytest.approx(5.0) and stats.memcpy_h2d_ms == pytest.approx(0.2)


def test_start_times_are_on_utc_from_the_session_start(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite"))
    assert _col(t, S.START_UNIX_NS)[0] == 1_700_000_000_000_000_000 + 100_000_000


def test_old_schema_without_enum_tables_imports_the_same(tmp_path):
    new = load_any(build_export(tmp_path / "new.sqlite"))
    old = load_any(build_export(tmp_path / "old.sqlite", Export(old_meta=True, enums=False)))
    for col in (S.WALL_MS, S.GPU_BUSY_MS, S.H2D_MS, S.SYNC_MS):
        assert _col(old, col) == pytest.approx(_col(new, col))
    assert any("Nsight Systems 2022.1.3.3" in n for n in old.notes)
    assert any("Nsight Systems 2025.5.2.266 (command: python train.py)" in n for n in new.notes)


def test_nvtx_names_through_string_ids_give_the_same_steps(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite", Export(text_id=True)))
    assert _col(t, S.STEP) == [0, 1, 2]


def test_newer_kernel_columns_are_ignored(tmp_path):
    e = Export(extra_kernel_columns=("greenContextId", "graphId", "clusterX", "qmdPreexitDone"))
    assert load_any(build_export(tmp_path / "r.sqlite", e)).frame.height == 3


def test_without_a_gpu_table_the_model_is_unknown_and_said(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite", Export(gpu_table=False)))
    assert t.run.gpu_name is None and any("no TARGET_INFO_GPU" in n for n in t.notes)


def test_copies_alone_make_a_rank(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite", Export(tables=("memcpy", "runtime", "nvtx"))))
    assert t.frame.height == 3 and _col(t, S.H2D_MS) == pytest.approx([0.2] * 3)


def test_without_step_ranges_the_capture_is_cut_by_its_runtime_calls_and_says_so(tmp_path):
    """No NVTX step ranges and no CPU ops: the loop's iterations are found in its runtime calls (each step copies
    its input, launches, syncs); with one step there is no loop: one window, said so."""
    t = load_any(build_export(tmp_path / "r.sqlite", Export(step_name=None)))
    assert t.frame.height == 3 and t.run.profiler_steps == 0
    assert any("3 iterations found" in n for n in t.notes)
    one = load_any(build_export(tmp_path / "one.sqlite", Export(steps=1, step_name=None)))
    assert one.frame.height == 1 and WINDOW_NOTE in one.notes


def test_step_range_names_the_step_ranges(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(step_name="train_step {}"))
    assert not any("NVTX ranges named" in n for n in load_any(path).notes)  # not a known step name
    t = load_nsys(path, step_range="train_step")
    assert _col(t, S.STEP) == [0, 1, 2] and any("NVTX ranges named 'train_step'" in n for n in t.notes)
    with pytest.raises(TraceError, match=r"no NVTX range named 'train'.*'train_step 0'"):
        load_nsys(path, step_range="train")


def test_our_own_step_and_phase_ranges_give_steps_and_phases(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(step_name="gpuanalyze:step#{}", phases=True))
    t = load_any(path)
    assert _col(t, S.STEP) == [0, 1, 2]
    assert _col(t, S.FORWARD_MS) == pytest.approx([5.9] * 3)


def test_a_restarted_step_keeps_its_last_range(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(step_name="gpuanalyze:step#{}"))
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
        "SELECT start - 1000, start - 500, 59, text, globalTid FROM NVTX_EVENTS WHERE text = 'gpuanalyze:step#1'"
    )
    conn.commit()
    conn.close()
    t = load_any(path)
    assert _col(t, S.STEP) == [0, 1, 2] and _col(t, S.WALL_MS) == pytest.approx([9.0] * 3)


def test_profiler_steps_win_over_our_own(tmp_path):
    path = build_export(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
        "SELECT start, end, 59, 'gpuanalyze:step#7', globalTid FROM NVTX_EVENTS"
    )
    conn.commit()
    conn.close()
    assert _col(load_any(path), S.STEP) == [0, 1, 2]


def test_one_trace_per_rank_before_they_are_merged(tmp_path):
    ranks = load_nsys_ranks(build_export(tmp_path / "r.sqlite", Export(pids=(9, 3))))
    assert [r.run.rank for r in ranks] == [0, 1] and [r.frame.height for r in ranks] == [3, 3]


def test_the_import_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(pids=(1, 2)))
    assert gc.isenabled()
    load_nsys_ranks(path)
    assert gc.isenabled()
    with pytest.raises(TraceError, match="no NVTX range named 'nope'"):
        load_nsys_ranks(path, step_range="nope")
    assert gc.isenabled()
    gc.disable()
    try:
        load_nsys_ranks(path)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_import_never_writes_to_the_export(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(pids=(1, 2)))
    path.chmod(0o444)
    tmp_path.chmod(0o555)  # no journal or lock file could be created beside it either
    try:
        before, mtime = path.read_bytes(), path.stat().st_mtime_ns
        load_any(path)
        assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]
    finally:
        tmp_path.chmod(0o755)


def test_sqlite_files_are_told_by_header_or_suffix(tmp_path):
    path = build_export(tmp_path / "capture")
    assert is_nsys_path(path) and is_nsys_path(tmp_path / "x.nsys-rep") and is_nsys_path(tmp_path / "y.sqlite")
    assert not is_nsys_path(tmp_path / "t.json.gz")


def test_cli_imports_and_analyses_an_export(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(pids=(1, 2)))
    out = tmp_path / "r.arrow"
    result = runner.invoke(app, ["import", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "6 step(s)" in result.output
    data = json.loads(runner.invoke(app, [str(out), "--json"]).output)
    assert data["ranks"] == 2 and data["steps"] == 6
    direct = json.loads(runner.invoke(app, [str(path), "--json"]).output)
    assert direct["ranks"] == 2 and direct["run"]["source"] == "nsys:r.sqlite"


def test_cli_step_range_is_for_nsys_captures_only(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(step_name="iter{}"))
    result = runner.invoke(app, ["import", str(path), "-o", str(tmp_path / "o.arrow"), "--step-range", "iter"])
    assert result.exit_code == 0 and "3 step(s)" in result.output
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    args = ["import", str(tmp_path / "t.json"), "-o", str(tmp_path / "p.arrow"), "--step-range", "x"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--step-range is for Nsight Systems" in result.output


def test_a_report_without_nsys_on_path_names_the_export_command(tmp_path, monkeypatch):
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really")
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(app, [str(report)])
    assert result.exit_code == 2
    assert "nsys export --type sqlite" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_fleet_reads_exports_beside_other_traces(tmp_path):
    root = tmp_path / "fleet"
    root.mkdir()
    build_export(root / "capture.sqlite", Export(pids=(1, 2)))
    write_trace(root / "own.arrow", [make_row(i, wall=20.0) for i in range(30)])
    result = runner.invoke(app, ["fleet", str(root), "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    runs = {r["run"]: r for r in json.loads(result.output)["runs"]}
    assert set(runs) == {"capture.sqlite", "own.arrow"}
    assert runs["capture.sqlite"]["ranks"] == 2 and runs["capture.sqlite"]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_analyse_with_a_step_range_and_export_a_chrome_trace(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(step_name="iter{}"))
    data = json.loads(runner.invoke(app, [str(path), "--step-range", "iter", "--json"]).output)
    assert data["steps"] == 3
    result = runner.invoke(app, [str(path), "--step-range", "nope"])
    assert result.exit_code == 2 and "no NVTX range named 'nope'" in result.output
    out = tmp_path / "r.json.gz"
    assert runner.invoke(app, ["export", str(path), "--chrome-trace", str(out)]).exit_code == 0 and out.stat().st_size


def test_ranks_come_from_gpu_rows_not_from_the_process_list(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(pids=(10, 11), step_name=None))
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
    conn.executemany("INSERT INTO PROCESSES VALUES (?, ?, 'python')", [(global_pid(p), p) for p in range(100, 150)])
    launcher = global_pid(99) | 99  # torchrun: runtime calls, no GPU rows
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1000, 900000000, 0, ?, 1, 1, 0, NULL)", (launcher,))
    conn.commit()
    conn.close()
    t = load_any(path)
    assert t.run.world_size == 2 and max(_col(t, S.WALL_MS)) < 50  # the launcher's 900 ms call is not a rank's


def test_nvtx_marks_are_not_ranges(tmp_path):
    path = build_export(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE NVTX_EVENTS SET eventType = 34 WHERE text = 'ProfilerStep#1'")  # NvtxMark
    conn.commit()
    conn.close()
    assert _col(load_any(path), S.STEP) == [0, 2]


def test_a_directory_of_one_export_is_a_run_of_one_rank(tmp_path):
    build_export(tmp_path / "a.sqlite")
    result = runner.invoke(app, [str(tmp_path), "--json"])
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["ranks"] == 1 and data["steps"] == 3
    assert any("1 Nsight Systems capture(s), one rank each" in n and "else rank 0 in" in n for n in data["notes"])


def test_an_nvtx_text_that_looks_like_a_string_id_is_its_own_name(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(step_name="{}"))  # ranges named "0", "1", "2"
    assert _col(load_nsys(path, step_range="1"), S.STEP) == [0]


def _fake_nsys(bin_dir, body):
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def test_a_report_is_exported_by_nsys_into_a_temporary_directory(tmp_path, monkeypatch):
    export = build_export(tmp_path / "made.sqlite", Export(pids=(1, 2)))
    # nsys export --type sqlite --output OUT REPORT: this one copies a ready export to OUT
    _fake_nsys(tmp_path / "bin", f'while [ "$1" != "--output" ]; do shift; done; cp {export} "$2"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"a report")
    data = json.loads(runner.invoke(app, [str(report), "--json"]).output)
    assert data["ranks"] == 2 and data["run"]["source"] == "nsys:run.nsys-rep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "made.sqlite", "run.nsys-rep"]


def test_a_failing_nsys_export_is_one_line(tmp_path, monkeypatch):
    _fake_nsys(tmp_path / "bin", "echo 'ERROR: cannot open the report' >&2; exit 3\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    report = tmp_path / "run.qdrep"
    report.write_bytes(b"a report")
    result = runner.invoke(app, [str(report)])
    assert result.exit_code == 2 and "nsys export failed (exit 3: ERROR: cannot open the report)" in result.output


def test_the_html_report_of_an_export(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(pids=(1, 2)))
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "NVIDIA H100 80GB HBM3" in out.read_text()


def test_an_export_without_a_metadata_table_imports_and_says_its_version_is_unknown(tmp_path):
    new = load_any(build_export(tmp_path / "new.sqlite"))
    old = load_any(build_export(tmp_path / "old.sqlite", Export(no_meta=True, enums=False)))
    assert _col(old, S.SYNC_MS) == pytest.approx(_col(new, S.SYNC_MS))
    assert any("names no nsys version" in n for n in old.notes)
    assert any("an Nsight Systems export of unknown version" in n for n in old.notes)


def test_an_export_layout_without_the_columns_read_is_refused_in_one_line(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(no_meta=True, time_columns=("startTime", "endTime")))
    result = runner.invoke(app, [str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "an export layout this importer does not read" in result.output
    assert "CUPTI_ACTIVITY_KIND_KERNEL has no start, end" in result.output
    assert "nsys export --type sqlite" in result.output


def test_large_ranks_are_read_one_at_a_time_and_small_ones_together(tmp_path, monkeypatch):
    import gpuanalyze.ingest.nsys.events as nsys_events
    from gpuanalyze.ingest.nsys.db import NsysDb
    from gpuanalyze.ingest.nsys.events import NsysEvents
    from gpuanalyze.ingest.nsys.meta import read_meta
    from gpuanalyze.ingest.trace.byte_source import ReadLimits

    path = build_export(tmp_path / "r.sqlite", Export(pids=(10, 11)))
    for group_rows, read_with_rank_0 in ((6, {10}), (12, {10, 11})):  # each rank has 6 GPU rows
        monkeypatch.setattr(nsys_events, "GROUP_ROWS", group_rows)
        with NsysDb(path) as db:
            events = NsysEvents(db, read_meta(db), ReadLimits(), None)
            events.step_kind()
            ranks = events.traces()
            first = next(ranks)
            assert first.rank == 0 and set(events.calls) == read_with_rank_0  # rank 1's rows read yet, or not
            second = next(ranks)
            assert second.rank == 1 and 11 in events.calls
            assert first.gpu.start.size == second.gpu.start.size == 6
