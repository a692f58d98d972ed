"""`bench dataloader` always ends: Ctrl-C, a dead worker, a small /dev/shm, and a kill -9 of the main process.

The subprocess tests run `gpuanalyze bench dataloader` in its own session (``start_new_session``),
so the signals sent to its process group never reach the test runner.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from gpuanalyze.kernels import shm
from gpuanalyze.kernels.loader_workers import death_message, sigint_deferred

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux's /proc")
BENCH = [sys.executable, "-m", "analyzer", "bench", "dataloader", "--backend", "cpu", "--quick"]
runner = CliRunner()


def _segments(pid: int) -> list[Path]:
    return sorted(shm.shm_dir().glob(f"{shm.PREFIX}{pid}-*"))


def _group(pgid: int) -> list[tuple[int, str]]:
    """Live (not zombie) processes of a process group, with their command lines."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append((int(stat.parent.name), cmd))
    return out


def _workers(pgid: int) -> list[int]:
    return [pid for pid, cmd in _group(pgid) if "spawn_main" in cmd]


def _wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _start(tmp_path: Path, args: list[str] = BENCH) -> subprocess.Popen[str]:
    env = dict(os.environ, GPUANALYZE_CEILINGS=str(tmp_path / "ceilings.json"), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        args, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"gpuanalyze bench hung: still running {timeout} s after the signal") from None


# -- fast: the pieces ------------------------------------------------------------------------------


def test_too_small_shm_is_one_clear_failure_before_any_worker_starts(monkeypatch):
    monkeypatch.setenv(shm.FREE_BYTES_ENV, str(10 * 2**20))
    before = set(shm.shm_dir().glob(f"{shm.PREFIX}{os.getpid()}-*"))
    result = runner.invoke(app, ["bench", "dataloader", "--backend", "cpu", "--quick"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    slots = max(8, 2 * (os.cpu_count() or 1))
    assert text.count("FAILED") == 1
    assert f"FAILED dataloader: {shm.shm_dir()} has 10.0 MiB free but the loader's {slots} batch slots need" in text
    assert "--shm-size" in text and "Traceback" not in text
    assert set(shm.shm_dir().glob(f"{shm.PREFIX}{os.getpid()}-*")) == before
    assert multiprocessing.active_children() == []


def test_segment_reserves_its_space_and_unlinks():
    seg = shm.Segment(2**20, what="test slots")
    assert seg.path.name.startswith(f"{shm.PREFIX}{os.getpid()}-") and seg.path.stat().st_size == 2**20
    assert seg.path.stat().st_blocks * 512 >= 2**20  # allocated now, not on first touch
    seg.map[:4] = b"abcd"
    seg.close()
    assert not seg.path.exists()
    seg.close()  # idempotent


def test_shm_hook_must_be_a_byte_count(monkeypatch):
    monkeypatch.setenv(shm.FREE_BYTES_ENV, "lots")
    with pytest.raises(GpuAnalyzeError, match="byte count"):
        shm.Segment(4096, what="x")


def test_stale_segments_of_dead_owners_are_removed_and_live_ones_kept(tmp_path):
    dead_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it
    stale = tmp_path / f"{shm.PREFIX}{dead_pid}-abc123"
    live = tmp_path / f"{shm.PREFIX}{os.getpid()}-abc123"
    other = tmp_path / "gpuanalyze-loader-notapid"
    for p in (stale, live, other):
        p.write_bytes(b"x")
    assert shm.remove_stale_segments(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and other.exists()


def test_death_messages_name_the_signal_and_the_likely_cause(tmp_path):
    bus = death_message(1, 42, -signal.SIGBUS, tmp_path)
    assert bus.startswith("data-loader worker 1 (pid 42) died of SIGBUS") and "shared memory" in bus
    assert "OOM" in death_message(0, 7, -signal.SIGKILL, tmp_path)
    assert "exited with status 3" in death_message(0, 7, 3, tmp_path)
    assert death_message(0, 7, 0, tmp_path).endswith("exited before the run ended")


def test_a_ctrl_c_during_cleanup_is_delivered_after_it():
    done = []
    with pytest.raises(KeyboardInterrupt), sigint_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler has run by now: held back
        done.append(True)
    assert done == [True]


# -- slow: real runs, real signals -------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_after_workers_s(tmp_path_factory) -> float:
    """How long a quick run lasts once its workers are up, on this machine now (~1.2 s idle): the
    shortest of three, as the first run (cold caches) is the slowest and a moment of 0.8 of it
    fell after the run had ended on a loaded machine."""
    lengths = []
    for _ in range(3):
        proc = _start(tmp_path_factory.mktemp("calibrate"))
        _wait_for(lambda: len(_workers(proc.pid)) >= (os.cpu_count() or 1), 60, "the loader workers")  # noqa: B023
        t0 = time.monotonic()
        _finish(proc, timeout=60)
        assert proc.returncode == 0
        lengths.append(time.monotonic() - t0)
    return min(lengths)


@pytest.mark.slow
@pytest.mark.parametrize("moment", [0.0, 0.05, 0.2, 0.4, 0.6, 0.8])
def test_ctrl_c_to_the_process_group_ends_the_run_promptly(tmp_path, moment, run_after_workers_s):
    """SIGINT to the whole group (what a terminal sends) at different moments of a quick run (as a
    fraction of its length once its workers are up): the worker compile, each measured phase. The run
    ends with exit 130, no worker left and no shared memory."""
    delay = moment * run_after_workers_s
    for _attempt in range(4):
        tmp = tmp_path / f"try{_attempt}"
        tmp.mkdir()
        proc = _start(tmp)
        try:
            # all workers started: past the few milliseconds per worker in which main ignores SIGINT
            _wait_for(lambda: len(_workers(proc.pid)) >= (os.cpu_count() or 1), 60, "the loader workers")  # noqa: B023
            time.sleep(delay)
            t0 = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            out, err = _finish(proc, timeout=10)
            ended = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        if not (tmp / "ceilings.json").exists():
            break
        # the run had saved its results before the signal came (a run can be faster than the calibrated
        # one on a machine whose load changes): that moment was past the run's end, so try earlier
        assert "nothing saved" not in err, (out, err)
        delay /= 2
    else:
        pytest.fail(f"every run had ended before the signal (last delay {delay:.2f} s)")
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert err.strip().splitlines()[-1] == "gpuanalyze: interrupted; nothing saved"
    assert "Traceback" not in err
    assert ended < 3.0, f"took {ended:.2f} s to end after Ctrl-C"  # ~0.2-0.7 s idle; slack for a loaded box
    _wait_for(lambda: not _group(proc.pid), 5, "the workers to exit")
    assert _segments(proc.pid) == []


@pytest.mark.slow
def test_a_killed_worker_is_reported_within_seconds(tmp_path):
    proc = _start(tmp_path)
    try:
        worker = _wait_for(lambda: _workers(proc.pid), 60, "a loader worker")[0]
        time.sleep(0.3)
        t0 = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        out, err = _finish(proc, timeout=10)
        ended = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, (out, err)
    assert f"data-loader worker 0 (pid {worker}) died of SIGKILL" in " ".join(out.split())
    assert "Traceback" not in out + err
    assert ended < 3.0, f"took {ended:.2f} s to notice the dead worker"
    _wait_for(lambda: not _group(proc.pid), 5, "the other workers to exit")
    assert _segments(proc.pid) == []


@pytest.mark.slow
def test_kill_9_leaves_no_worker_and_the_next_run_removes_the_segment(tmp_path, monkeypatch):
    proc = _start(tmp_path, [a for a in BENCH if a != "--quick"])
    try:
        _wait_for(lambda: len(_workers(proc.pid)) >= 1, 60, "the loader workers")
        segment = _wait_for(lambda: _segments(proc.pid), 10, "the shared-memory segment")[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # an orphan notices only once started (~2 s: spawn, numba, compile); this checks that it exits
    _wait_for(lambda: not _group(proc.pid), 30, "the orphaned workers to exit")
    if not segment.exists():
        # the owner had no chance to remove it, but another gpuanalyze run on this host may have (its own sweep of
        # dead owners' segments, as below): put the dead owner's segment back to test the sweep
        segment.write_bytes(b"\0" * 4096)
    monkeypatch.setenv("GPUANALYZE_CEILINGS", str(tmp_path / "ceilings.json"))
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    assert not segment.exists()
    assert "removed 1 shared-memory segment(s)" in " ".join(result.output.split())


@pytest.mark.slow
def test_a_stalled_worker_stops_the_run_after_the_timeout():
    """A worker that stops answering (SIGSTOP here) ends the run with an error after ``timeout_s``."""
    import threading

    from gpuanalyze.kernels.backend import select
    from gpuanalyze.kernels.loader import LoaderConfig, run_loader

    stopped: list[int] = []

    def stop_the_worker() -> None:
        pid = _wait_for(lambda: _children_spawned(os.getpid()), 60, "the loader worker")[0]
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)

    threading.Thread(target=stop_the_worker, daemon=True).start()
    cfg = LoaderConfig(workers=1, batches=10**6, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(GpuAnalyzeError, match="sent nothing for 1 s"):
        run_loader(select("cpu"), quick=True, config=cfg)
    assert stopped and time.monotonic() - t0 < 60
    _wait_for(lambda: not Path(f"/proc/{stopped[0]}").exists() or "Z" in _state(stopped[0]), 5, "the worker killed")
    assert _segments(os.getpid()) == []


def _children_spawned(parent: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and b"spawn_main" in cmd and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
