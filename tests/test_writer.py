import time
from pathlib import Path

import pytest

from analyzer.errors import GpuAnalyzeError
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions
from tests.conftest import make_row


def _writer(path: Path, **opts) -> TraceWriter:
    return TraceWriter(path=path, run=RunInfo(host="x"), options=WriterOptions(**opts))


def _add_and_wait(w: TraceWriter, n: int, timeout_s: float = 3.0) -> None:
    """Queue n rows, then wait (bounded) until the background thread has written them."""
    for i in range(n):
        w.add(make_row(i))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and w.rows_written < n:
        time.sleep(0.02)


def test_rows_reach_disk_within_the_flush_interval_without_close(tmp_path):
    w = _writer(tmp_path / "t.arrow", flush_interval_s=0.2, flush_every_steps=1000)
    w.open()
    _add_and_wait(w, 5)
    trace = load_trace(tmp_path / "t.arrow")  # read while the writer is still open
    assert trace.frame.height == 5
    assert not trace.complete
    w.close(EndInfo(status="ok"))
    assert load_trace(tmp_path / "t.arrow").complete


def test_every_n_steps_triggers_a_write(tmp_path):
    w = _writer(tmp_path / "t.arrow", flush_interval_s=60, flush_every_steps=3)
    w.open()
    _add_and_wait(w, 3)
    assert w.rows_written == 3
    w.close(EndInfo(status="ok"))


def test_flush_returns_only_when_every_queued_row_is_on_disk(tmp_path):
    """``flush`` racing the background thread (a 0.5 ms interval makes them meet often): the rows
    the thread had taken but not yet written must be on disk, in order, when ``flush`` returns.
    Before the fix, about 2 reads in 5 right after ``flush`` missed rows."""
    w = _writer(tmp_path / "t.arrow", flush_interval_s=0.0005, fsync=False)
    w.open()
    short = []
    for i in range(300):
        w.add(make_row(i))
        time.sleep(0.0004)
        w.flush()
        if w.rows_written != i + 1:
            short.append(i)
    w.close(EndInfo(status="ok"))
    assert short == []
    steps = load_trace(tmp_path / "t.arrow").frame.get_column(S.STEP).to_list()
    assert steps == list(range(300))


def test_end_marker_holds_the_status(tmp_path):
    w = _writer(tmp_path / "t.arrow")
    w.open()
    w.add(make_row(0))
    w.close(EndInfo(status="exception", exception="ValueError: boom"))
    trace = load_trace(tmp_path / "t.arrow")
    assert trace.complete and trace.end.exception == "ValueError: boom"


def test_never_opens_an_existing_file(tmp_path):
    path = tmp_path / "t.arrow"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        _writer(path).open()
    assert path.read_bytes() == b"precious"


def test_a_failing_disk_is_reported_once_and_never_raised(tmp_path):
    w = TraceWriter(path=tmp_path / "t.arrow", run=RunInfo())
    w.open()
    w._file.close()  # the disk goes away under the writer
    w.add(make_row(0))
    w.flush()
    first = w.error
    w.add(make_row(1))
    w.close(EndInfo(status="ok"))  # never raises
    assert isinstance(first, ValueError) and w.error is first


def test_items_queued_for_later_become_rows_on_the_writers_thread(tmp_path):
    w = TraceWriter(path=tmp_path / "t.arrow", run=RunInfo(), to_row=lambda i: make_row(i))
    w.open()
    w.add_later(0)
    w.add(make_row(1))  # a ready row between two items keeps its place
    w.add_later(2)
    w.close(EndInfo(status="ok"))
    trace = load_trace(tmp_path / "t.arrow")
    assert trace.complete and trace.frame.get_column(S.STEP).to_list() == [0, 1, 2]


def test_a_row_that_cannot_be_built_stops_the_rows_but_not_the_file(tmp_path):
    def to_row(i: int) -> dict:
        if i == 2:
            raise RuntimeError("bad row")
        return make_row(i)

    w = TraceWriter(path=tmp_path / "t.arrow", run=RunInfo(), to_row=to_row)
    w.open()
    for i in range(4):
        w.add_later(i)
    w.flush()
    w.add_later(4)
    w.close(EndInfo(status="profiler_error", error="RuntimeError: bad row"))
    assert isinstance(w.row_error, RuntimeError) and w.error is None
    trace = load_trace(tmp_path / "t.arrow")
    assert trace.frame.get_column(S.STEP).to_list() == [0, 1]  # none from the bad one on
    assert trace.complete and trace.end.status == "profiler_error"


def test_options_are_validated():
    with pytest.raises(GpuAnalyzeError, match="flush_interval_s"):
        WriterOptions(flush_interval_s=0)
    with pytest.raises(GpuAnalyzeError, match="flush_every_steps"):
        WriterOptions(flush_every_steps=0)


def test_a_live_writer_is_told_apart_from_a_dead_one(tmp_path):
    from gpuanalyze.ingest.trace.reader import ENDED_NOTE, LIVE_NOTE
    from gpuanalyze.ingest.trace.writer import is_being_written

    path = tmp_path / "t.arrow"
    w = _writer(path, flush_interval_s=0.2)
    w.open()
    _add_and_wait(w, 3)
    assert is_being_written(path)
    assert load_trace(path).notes[0] == LIVE_NOTE  # not "the run ended without closing it"
    w._release_lock()  # what the kernel does when the writing process dies
    assert not is_being_written(path)
    assert load_trace(path).notes[0] == ENDED_NOTE
    w.close(EndInfo(status="ok"))
    closed = load_trace(path)
    assert closed.complete and not any("incomplete" in n or "still being" in n for n in closed.notes)


def test_a_killed_writer_releases_its_lock(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from gpuanalyze.ingest.trace.writer import is_being_written
    from tests.conftest import ROOT

    path = tmp_path / "t.arrow"
    code = (
        "import sys, time; from gpuanalyze.ingest.trace.writer import TraceWriter; "
        "from gpuanalyze.ingest.trace.runinfo import RunInfo; "
        "w = TraceWriter(path=__import__('pathlib').Path(sys.argv[1]), run=RunInfo()); w.open(); "
        "print('open', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "open"
        assert is_being_written(path)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert not is_being_written(path)
    assert load_trace(path).notes[0].startswith("trace is incomplete")
