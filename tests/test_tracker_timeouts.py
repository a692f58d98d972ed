"""Tracker calls against a server that never answers: a short timeout, one line, and no temporary
file left behind (nor when the command is terminated while it waits)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLES

SAMPLE = SAMPLES / "cpu_data_loading.arrow"
_PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("", "ingest", "kernels"))


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers (a hung tracker server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    for c in held:
        c.close()
    sock.close()


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUANALYZE_", "WANDB_", "MLFLOW_"))}
    return env | {"PYTHONPATH": _PYTHONPATH, "TMPDIR": str(tmp)} | extra


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install 'gpuanalyze[{module}]')")


def test_wandb_gets_a_short_init_timeout_unless_the_user_sets_one(monkeypatch):
    from analyzer.track.wandb_log import INIT_TIMEOUT_S, init_timeout

    monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    assert init_timeout() == INIT_TIMEOUT_S <= 10
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "120")
    assert init_timeout() == 120.0
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "soon")
    assert init_timeout() == INIT_TIMEOUT_S


@pytest.mark.slow  # a CLI subprocess killed mid-request: end to end
def test_a_terminated_tracker_call_removes_its_temporary_report(tmp_path, silent_server):
    _needs("mlflow")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "analyzer", str(SAMPLE), "--log", "mlflow"],
        env=_env(tmp, MLFLOW_TRACKING_URI=silent_server, MLFLOW_HTTP_REQUEST_TIMEOUT="60"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.glob("gpuanalyze-log-*/*.html")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        assert list(tmp.glob("gpuanalyze-log-*")), "the tracker call never started"
        time.sleep(0.5)  # inside mlflow's request now
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert b"Traceback" not in err
    assert list(tmp.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_a_hung_tracker_server_is_one_line_soon_and_leaves_no_temporary_file(tmp_path, silent_server, tracker):
    _needs(tracker)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    extra = (
        {"MLFLOW_TRACKING_URI": silent_server}
        if tracker == "mlflow"
        else {
            "WANDB_BASE_URL": silent_server,
            "WANDB_API_KEY": "a" * 40,
            "WANDB_MODE": "online",
            "WANDB_DIR": str(tmp_path),
            "WANDB_SILENT": "true",
        }
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "analyzer", str(SAMPLE), "--log", tracker],
        env=_env(tmp, **extra),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gpuanalyze: error:")]
    assert len(errors) == 1 and f"--log {tracker}" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert took < 45, f"{tracker} held the command {took:.0f} s"
    assert list(tmp.iterdir()) == []
