"""A CPU run's sampled window measures, per step, the time in matmul ops (nested ones counted once) and the op time
outside the optimizer (ingest/cpu_ops.py)."""

import numpy as np
import pytest

from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.cpu_ops import cpu_op_fields


def _ops(events: list[tuple[str, float, float]], tid: int = 1) -> HostOps:
    names = tuple(dict.fromkeys(n for n, _, _ in events))
    return HostOps(
        np.array([s for _, s, _ in events], dtype=np.float64),
        np.array([e for _, _, e in events], dtype=np.float64),
        np.full(len(events), tid, dtype=np.int64),
        np.array([names.index(n) for n, _, _ in events], dtype=np.int32),
        names,
    )


def _step(dispatch_us: float, per_sample_us: float, samples: int, gap_us: float) -> list[tuple[str, float, float]]:
    """A step of known costs: every op pays ``dispatch_us`` of its own time; 10 view ops (dispatch only) and 10
    aten::linear wrapping an aten::addmm of dispatch + per-sample work, Python gaps between them, then an
    optimizer step with ops of its own."""
    ev, t = [], 0.0
    for _ in range(10):
        ev.append(("aten::view", t, t + dispatch_us))
        t += dispatch_us + gap_us
        work = dispatch_us + per_sample_us * samples
        ev.append(("aten::linear", t, t + work + dispatch_us))
        ev.append(("aten::addmm", t + dispatch_us / 2, t + dispatch_us / 2 + work))  # nested: counted once
        t += work + dispatch_us + gap_us
    ev.append(("Optimizer.step#SGD.step", t, t + 500.0))
    ev.append(("aten::add_", t + 10.0, t + 400.0))
    return ev


def test_the_window_separates_matmul_and_op_time_outside_the_optimizer():
    ops = _ops(_step(dispatch_us=5.0, per_sample_us=2.0, samples=32, gap_us=20.0))
    f = cpu_op_fields(ops, 0.0, 1e6)
    assert f["cpu_matmul_ms"] == pytest.approx(10 * (5.0 + 64.0) / 1e3)
    assert f["cpu_op_ms"] == pytest.approx(10 * 5.0 / 1e3 + 10 * (69.0 + 5.0) / 1e3)  # the optimizer's ops left out
    assert "cpu_dispatch_ms" not in f  # no longer written
    assert f["cpu_softmax_ms"] == 0.0 and f["cpu_bmm_ms"] == 0.0


def test_only_ops_that_started_in_the_step_count():
    ops = _ops(_step(dispatch_us=5.0, per_sample_us=2.0, samples=8, gap_us=20.0))
    assert cpu_op_fields(ops, 1e6, 2e6) == {}
    assert cpu_op_fields(HostOps.empty(), 0.0, 1.0) == {}
    first = cpu_op_fields(ops, 0.0, 30.0)  # the first view, and the first addmm from 27.5 us, clipped at the end
    assert first["cpu_matmul_ms"] == pytest.approx(2.5 / 1e3)
