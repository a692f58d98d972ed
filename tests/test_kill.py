"""A run killed with SIGKILL mid-training leaves a readable trace holding every step that had
reached the disk before the kill (the writer flushes every second or every 1000 steps)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

from analyzer import analyze
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import ROOT, rows_on_disk

CHILD = textwrap.dedent("""
    import sys, torch
    import analyzer
    from tests.scenarios.loops import LoopConfig, make_loop
    torch.set_num_threads(1)  # steps at the loader's pace however loaded the box is (loops.one_thread)
    model, opt, loader = make_loop(LoopConfig(steps=50, batch=8, features=32, sample_cost_s=0.002))
    with analyzer.profile(model, out=sys.argv[1], kernel_windows=False):
        while True:
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad()
""")


@pytest.mark.slow
def test_sigkill_leaves_a_readable_incomplete_trace(tmp_path):
    out = tmp_path / "killed.arrow"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], env=env)
    try:
        deadline = time.monotonic() + 120
        seen = 0
        while time.monotonic() < deadline and seen < 120:  # several flushes, however loaded the box is
            time.sleep(0.2)
            seen = rows_on_disk(out)
        assert seen >= 120, "the child did not train"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    trace = load_trace(out)
    assert not trace.complete
    steps = trace.frame.get_column(S.STEP).to_list()
    assert len(steps) >= seen and steps[:seen] == list(range(seen)), "a step that was on disk before the kill is lost"
    report = analyze(out)
    assert report.bottleneck == "data_loading" and not report.complete
    assert any("incomplete" in n or "cut off" in n for n in report.notes)
