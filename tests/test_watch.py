"""`gpuanalyze watch`: a live view of a trace while it is written."""

import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.run.live import snapshot, trace_files
from gpuanalyze.ingest.trace.runinfo import EndInfo
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions
from tests.conftest import ROOT, as_run, make_row, write_trace

runner = CliRunner()
_PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("", "ingest", "kernels"))

SLOW_RUN = textwrap.dedent("""
    import sys, time, torch
    import analyzer
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with analyzer.profile(model, out=sys.argv[1], flush_interval_s=0.2) as prof:
        for step in range(int(sys.argv[2])):
            with prof.data():
                time.sleep(0.05)
                x, y = torch.randn(8, 16), torch.randn(8, 1)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
""")


def test_a_live_trace_is_still_being_written_until_it_is_closed(tmp_path):
    path = tmp_path / "t.arrow"
    writer = TraceWriter(path=path, run=as_run(None), options=WriterOptions(fsync=False))
    writer.open()
    for i in range(30):
        writer.add(make_row(i, wall=20.0, data=15.0, fwd=2.0, bwd=2.0, opt=1.0))
    writer.flush()
    live = snapshot(path)
    assert live.live and not live.complete and not live.ended
    assert live.steps == 30 and live.ranks == 1
    assert dict(live.rolling_ms)["data_wait_ms"] == pytest.approx(15.0)
    assert any("still being written" in n for n in live.notes)
    assert live.bottleneck == "data_loading"
    writer.close(EndInfo(status="ok"))
    done = snapshot(path)
    assert done.complete and done.ended and done.end_status == "ok"


def test_a_directory_is_watched_as_its_newest_run(tmp_path):
    assert trace_files(tmp_path) == [] and not snapshot(tmp_path).ended  # nothing written yet: wait
    write_trace(tmp_path / "trace.arrow", [make_row(i) for i in range(4)], run={"start_unix_ns": 1})
    for rank in (0, 1):
        run = {"world_size": 2, "rank": rank, "run_id": "b", "start_unix_ns": 2}
        write_trace(tmp_path / f"trace.rank{rank}.arrow", [make_row(i, rank=rank) for i in range(4)], run=run)
    assert [p.name for p in trace_files(tmp_path)] == ["trace.rank0.arrow", "trace.rank1.arrow"]
    assert snapshot(tmp_path).ranks == 2


def test_watching_a_finished_trace_prints_the_report_and_ends(tmp_path):
    path = write_trace(tmp_path / "t.arrow", [make_row(i, wall=20.0, data=15.0) for i in range(30)])
    result = runner.invoke(app, ["watch", str(path)])
    assert result.exit_code == 0, result.output
    assert "finished (ok)" in result.output and "DATA LOADING" in result.output


def test_watching_a_file_that_is_not_a_trace_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "notes.arrow").write_text("not a trace")
    result = runner.invoke(app, ["watch", str(tmp_path / "notes.arrow")])
    assert result.exit_code == 2 and "gpuanalyze: error:" in result.output


@pytest.mark.slow
def test_watch_in_a_terminal_follows_a_run_and_ends_with_it_or_on_ctrl_c(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    pytest.importorskip("torch")
    trace = tmp_path / "run.arrow"
    script = tmp_path / "slow_run.py"
    script.write_text(SLOW_RUN)
    env = {**os.environ, "PYTHONPATH": _PYTHONPATH}
    training = subprocess.Popen([sys.executable, str(script), str(trace), "110"], env=env)
    try:
        deadline = time.monotonic() + 60
        while not trace.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

        def watch():
            return pexpect.spawn(
                sys.executable,
                ["-m", "analyzer", "watch", str(trace), "--interval", "0.5"],
                env=env,
                dimensions=(60, 120),
                timeout=60,
                encoding="utf-8",
            )

        first = watch()  # Ctrl-C: the watcher ends cleanly, the run goes on
        first.expect("still being written")
        first.expect(r"\d+ steps")
        first.sendintr()
        first.expect("stopped watching; the run goes on")
        first.expect(pexpect.EOF)
        first.close()
        assert first.exitstatus == 0 and "Traceback" not in (first.before or "")
        assert training.poll() is None

        second = watch()  # to the end of the run: the final report, then exit 0
        second.expect("still being written")
        second.expect("verdict so far")
        second.expect(r"finished \(ok\)", timeout=90)
        second.expect("DATA LOADING")
        second.expect(pexpect.EOF)
        second.close()
        assert second.exitstatus == 0
        assert training.wait(timeout=60) == 0
    finally:
        if training.poll() is None:
            training.kill()


def _live_writer(path, rows=30, **row):
    writer = TraceWriter(path=path, run=as_run(None), options=WriterOptions(fsync=False))
    writer.open()
    for i in range(rows):
        writer.add(make_row(i, **row))
    writer.flush()
    return writer


def test_a_replaced_path_is_said_and_the_file_first_opened_still_shown(tmp_path):
    from analyzer.run.live import Watch

    path = tmp_path / "t.arrow"
    writer = _live_writer(path, 30, wall=20.0, data=15.0)
    watch = Watch(path)
    try:
        first = watch.snapshot()
        assert first.steps == 30 and not any("replaced" in n for n in first.notes)
        other = write_trace(tmp_path / "other.arrow", [make_row(i) for i in range(7)])
        other.replace(path)  # another run's trace now sits at the watched path
        second = watch.snapshot()
        assert second.steps == 30 and second.live  # still the file watch opened, its writer still on
        assert any("replaced or removed" in n and str(path) in n for n in second.notes)
        path.unlink()  # removed altogether: still shown
        assert watch.snapshot().steps == 30
        writer.close(EndInfo(status="ok"))
        done = watch.snapshot()
        assert done.complete and done.ended and done.steps == 30
    finally:
        watch.close()
        writer.close(EndInfo(status="ok"))


@pytest.mark.slow  # a watch subprocess following a live writer: end to end
def test_watch_piped_writes_a_line_as_the_run_goes_and_says_a_replacement(tmp_path):
    path = tmp_path / "t.arrow"
    writer = _live_writer(path, 30, wall=20.0, data=15.0)
    env = {**os.environ, "PYTHONPATH": _PYTHONPATH}
    proc = subprocess.Popen(
        [sys.executable, "-m", "analyzer", "watch", str(path), "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, "")], daemon=True).start()
    try:
        first = lines.get(timeout=60)  # before the run ends: a pipe is not held until the end
        assert "30 steps" in first and "still being written" in first, first
        write_trace(tmp_path / "other.arrow", [make_row(i) for i in range(7)]).replace(path)
        seen = [first]
        while "replaced" not in seen[-1]:
            seen.append(lines.get(timeout=60))
        writer.close(EndInfo(status="ok"))
        assert proc.wait(timeout=120) == 0
        time.sleep(0.2)
        while not lines.empty():
            seen.append(lines.get())
        out, err = "".join(seen), proc.stderr.read()
    finally:
        writer.close(EndInfo(status="ok"))
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "30 steps on 1 rank(s)" in out and "finished (ok)" in out
    assert not re.search(r"(?<!\d)7 steps on", out)  # never the other run's trace
