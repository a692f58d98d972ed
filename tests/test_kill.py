"""A run killed with SIGKILL mid-training leaves a readable trace missing at most ~1 s of steps."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

from analyzer import analyze
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.reader import load_trace
from tests.conftest import ROOT

CHILD = textwrap.dedent("""
    import sys, time, torch
    import analyzer
    from tests.scenarios.loops import LoopConfig, make_loop
    model, opt, loader = make_loop(LoopConfig(steps=50, batch=8, features=32, sample_cost_s=0.002))
    with analyzer.profile(model, out=sys.argv[1]):
        step = 0
        while True:
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad()
                print(step, time.time(), flush=True)
                step += 1
""")


@pytest.mark.slow
def test_sigkill_leaves_a_readable_incomplete_trace(tmp_path):
    out = tmp_path / "killed.arrow"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            lines.append(line.split())
            if len(lines) >= 150:  # well past several flush intervals
                break
        kill_time = time.time()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    assert len(lines) >= 150, "the child did not train"
    trace = load_trace(out)
    assert not trace.complete
    recorded = set(trace.frame.get_column(S.STEP).to_list())
    settled = [int(step) for step, t in lines if float(t) < kill_time - 1.5]
    assert settled and set(settled) <= recorded, "a step finished more than a second before the kill is missing"
    report = analyze(out)
    assert report.bottleneck == "data_loading" and not report.complete
    assert any("incomplete" in n for n in report.notes)
