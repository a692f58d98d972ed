"""A trace cut short by a full disk says so: not "killed or crashed"."""

from __future__ import annotations

import errno
import os

import msgspec
from typer.testing import CliRunner

from analyzer.cli import app
from gpuanalyze.ingest.trace import reader
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions
from tests.conftest import make_row, write_trace

runner = CliRunner()


def test_a_writer_that_meets_a_full_disk_closes_the_trace_as_disk_full(tmp_path, monkeypatch):
    path = tmp_path / "t.arrow"
    writer = TraceWriter(path=path, run=msgspec.convert({}, RunInfo), options=WriterOptions(fsync=True))
    writer.open()
    for i in range(30):
        writer.add(make_row(i, wall=20.0, data=15.0))
    writer.flush()
    real_fsync = os.fsync
    failing = {"on": True}

    def no_space(fd):
        if failing["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr("gpuanalyze.ingest.trace.writer.os.fsync", no_space)
    for i in range(30, 40):
        writer.add(make_row(i, wall=20.0, data=15.0))
    writer.flush()  # the batch reaches the page cache, fsync fails: the disk is full
    assert isinstance(writer.error, OSError)
    failing["on"] = False  # the marker fits in what cutting the failed batch freed
    writer.close(EndInfo(status="profiler_error", steps=40))
    trace = load_trace(path)
    assert trace.end is not None and trace.end.status == "disk_full"
    assert trace.frame.height == 30  # the batch the disk could not take is cut
    assert any("the disk filled" in n for n in trace.notes)
    result = runner.invoke(app, [str(path), "--width", "200"])
    assert result.exit_code == 0, result.output
    assert "incomplete: the disk filled" in result.output and "killed" not in result.output
    assert '"end_status": "disk_full"' in runner.invoke(app, [str(path), "--json"]).output


def test_an_unclosed_trace_on_a_full_file_system_says_the_disk_filled(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "t.arrow", [make_row(i, wall=20.0, data=15.0) for i in range(30)])
    data = path.read_bytes()
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(data[: len(data) - 300])  # no end marker: the run could not close it

    class Full:
        f_bavail, f_frsize = 0, 4096

    monkeypatch.setattr(reader.os, "statvfs", lambda _p: Full())
    trace = load_trace(cut)
    assert trace.notes[0].startswith("trace is incomplete: the disk filled")
    monkeypatch.undo()
    assert "crash, kill or OOM" in load_trace(cut).notes[0]  # with space left it reads as killed or crashed
