"""`gpuanalyze watch`: a live view of a trace while it is written."""

import os
import subprocess
import sys
import textwrap
import time

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.run.live import snapshot, trace_files
from gpuanalyze.ingest.runinfo import EndInfo
from gpuanalyze.ingest.writer import TraceWriter, WriterOptions
from tests.conftest import ROOT, as_run, make_row, write_trace

runner = CliRunner()

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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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
