"""`.ci/run`'s busy-loop option: with CI_BUSY=1 one busy loop runs beside the tiers and ends, by its PID,
when the script does; without it, none."""

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

CI = (ROOT / ".ci" / "run").read_text()


def _busy_block() -> str:
    (block,) = re.findall(r'^if \[ "\$\{CI_BUSY:-0\}" = 1 \]; then\n.*?^fi\n', CI, re.MULTILINE | re.DOTALL)
    return block


def _run(busy: str) -> tuple[str, str]:
    script = _busy_block() + 'echo "pid=${busy_pid:-none}"; ps -o stat=,args= -p "${busy_pid:-0}" || true\n'
    env = {**os.environ, "CI_BUSY": busy}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout, re.search(r"pid=(\S+)", done.stdout).group(1)


@pytest.mark.slow  # spawns processes (the marker's definition, pyproject.toml)
def test_ci_busy_runs_one_busy_loop_and_ends_it_by_its_pid():
    out, pid = _run("1")
    assert "while True: pass" in out  # running while the script ran
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # SIGTERMed by the EXIT trap
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()  # ended with the script
    assert CI.index(_busy_block()) < CI.index('python -m pytest -q -n 2 -m "not slow"')  # beside both tiers


def test_without_ci_busy_there_is_no_busy_loop():
    out, pid = _run("0")
    assert pid == "none" and "while True" not in out
