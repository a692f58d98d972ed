"""Nothing of a trial is left running: its tree, setsid children and orphans included, is killed and reaped."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyzer.run import trial_reap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SPAWNER = """
import subprocess, sys
sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
a = subprocess.Popen(sleeper, start_new_session=True)  # leaves the group and the session
b = subprocess.Popen(sleeper)
open(sys.argv[1], "w").write(f"{a.pid} {b.pid}")
"""


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" in status.read_text().lower()
    except OSError:
        return True


def test_a_setsid_grandchild_whose_parent_exited_is_killed_and_reaped(tmp_path):
    pids = tmp_path / "pids"
    with trial_reap.subreaper() as reaping:
        assert reaping
        root = subprocess.Popen([sys.executable, "-c", SPAWNER, str(pids)], process_group=0)
        tree = trial_reap.Tree(root.pid)
        assert root.wait(timeout=60) == 0  # the root is gone; its children are orphans, re-parented to us
        left = [int(p) for p in pids.read_text().split()]
        assert not any(_gone(p) for p in left)
        tree.kill()
    deadline = time.monotonic() + 30
    while not all(_gone(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(not Path(f"/proc/{p}").exists() for p in left)  # killed and reaped, not zombies


def test_a_tree_that_left_nothing_kills_nothing():
    root = subprocess.Popen([sys.executable, "-c", "pass"], process_group=0)
    tree = trial_reap.Tree(root.pid)
    root.wait(timeout=60)
    tree.kill()
    assert tree.seen == set()
