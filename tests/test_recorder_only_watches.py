"""The recorder only watches, in every recording mode: nothing of the run is called again, no random generator is
touched, and closing the profile costs no more than a fetch (docs/robustness.md, "Only watching").

tests/scenarios/watch_only.py runs the same loop unprofiled and under each mode; everything it prints must be the
same as unprofiled: a background thread's torch random draws (the replays once wrapped their work in
``torch.random.fork_rng``, which restored the global generator after a second: the thread drew values again), the
calls of an op the user registered in the ``aten`` namespace (the sample replay called it again), the reads of a
dict-subclass sample and the user collate's calls (the collate replay at exit read the samples again), and the
losses, bit for bit. The profile's close, with samples of 20,000 strings each, takes no replay time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
# Each case runs the scenario in a process of its own (16-22 s each at load 4): the slow tier's.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scenarios" / "watch_only.py"


def _run(tmp: Path, mode: str, *, launcher: list[str] | None = None, **extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "ingest")]), **extra}
    env.pop("GPUANALYZE_RUN", None)
    command = [*(launcher or []), sys.executable, str(SCRIPT), mode, str(tmp / f"{mode}.arrow")]
    done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith("{"))
    return json.loads(line)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory.mktemp("plain"), "plain")


def _same_as_plain(got: dict[str, Any], plain: dict[str, Any]) -> None:
    assert got["losses"] == plain["losses"]  # bit-identical
    assert (got["op"], got["reads"], got["collate"]) == (plain["op"], plain["reads"], plain["collate"])
    n = min(len(got["drawn"]), len(plain["drawn"]))
    assert n > 10
    assert got["drawn"][:n] == plain["drawn"][:n]  # the thread's stream, draw for draw
    assert len(set(got["drawn"])) == len(got["drawn"])  # nothing drawn twice
    # closing the profile is a flush, not a replay: well under a few fetches of the 20,000-string samples
    assert got["exit_s"] < 5 * got["fetch_s"] + 0.3, (got["exit_s"], got["fetch_s"])


@pytest.mark.parametrize("mode", ["profile", "windows"])
def test_analyzer_profile_changes_nothing_the_run_does(tmp_path: Path, plain: dict[str, Any], mode: str) -> None:
    _same_as_plain(_run(tmp_path, mode), plain)


def test_gpuanalyze_run_with_windows_changes_nothing_the_run_does(tmp_path: Path, plain: dict[str, Any]) -> None:
    launcher = [sys.executable, "-m", "analyzer.run", "--kernel-windows", "--out", str(tmp_path / "out"), "--"]
    got = _run(tmp_path, "plain", launcher=launcher, GPUANALYZE_WINDOW_FIRST="3")
    assert list((tmp_path / "out").glob("*.arrow")), "the automatic profile wrote no trace"
    _same_as_plain(got, plain)
