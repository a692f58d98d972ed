"""Property tests: on any trace, shares stay in [0, 1], projections stay within [what remains the
limit, the current step] and never below zero, and no supporting evidence fails its own test."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import analyze
from analyzer.analysis.metrics import WAITS
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row

SETTINGS = settings(
    max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

fraction = st.floats(0.0, 1.0)
step = st.fixed_dictionaries(
    {
        "wall": st.floats(0.05, 5000.0),
        "data": fraction,
        "fwd": fraction,
        "bwd": fraction,
        "opt": fraction,
        "sync": fraction,
        "busy": st.none() | st.floats(0.0, 1.2),  # above 1: a GPU busier than the step (clamped by the reader)
        "cpu": st.none() | fraction,
    }
)


def _row(i, s):
    wall = s["wall"]
    parts = {k: s[k] for k in ("data", "fwd", "bwd", "opt", "sync")}
    total = sum(parts.values()) or 1.0
    scale = wall / total if total > 1 else wall  # phases add up to at most the step
    p = {k: v * scale for k, v in parts.items()}
    busy = None if s["busy"] is None else s["busy"] * wall
    cpu = None if s["cpu"] is None else s["cpu"] * p["data"]
    return make_row(i, wall=wall, busy=busy, data_cpu=cpu, **p)


@SETTINGS
@given(
    steps=st.lists(step, min_size=1, max_size=30),
    workers=st.none() | st.integers(0, 8),
    cores=st.none() | st.integers(1, 64),
    gpu_mem=st.booleans(),
)
def test_shares_projections_and_evidence_stay_honest(trace_factory, steps, workers, cores, gpu_mem):
    gpu = steps[0]["busy"] is not None
    rows = [_row(i, s | {"busy": (s["busy"] or 0.5) if gpu else None}) for i, s in enumerate(steps)]
    if gpu_mem and gpu:
        for r in rows:
            r[S.PEAK_MEM_BYTES] = 10**9
    run = {"cpu_count": cores, "gpu_memory_bytes": 8 * 10**9 if gpu_mem and gpu else None, "param_dtype": "float32"}
    r = analyze(trace_factory(rows, run=run, end=EndInfo(status="ok", loader_workers=workers)))
    m = r.metrics
    for share in (
        *[v for v in m.share.values() if v is not None],
        *m.effective.values(),
        m.gpu_util or 0.0,
        m.idle_unexplained or 0.0,
    ):
        assert 0.0 <= share <= 1.0
    assert 0.0 <= r.confidence.value <= 1.0
    wall = m.step_mean_ms
    for f in r.findings:
        p = f.projection
        assert 0.0 <= f.share <= 1.0 and 0.0 <= f.confidence.value <= 1.0
        assert 0.0 <= p.step_ms <= p.current_ms and p.current_ms == wall
        assert p.saved_ms > 0
        # a range around the point; advice at medium or high confidence is not slower at its high end
        assert p.low_ms is not None and p.high_ms is not None and 0.0 <= p.low_ms <= p.step_ms <= p.high_ms
        if f.confidence.level != "low":
            assert p.high_ms < p.current_ms, (f.bottleneck, f.cause, p)
        assert all(e.passed for e in f.supporting) and not any(e.passed for e in f.contrary)
        busy = m.busy_mean_ms or 0.0
        waits = sum(m.effective[w] for w in WAITS) * wall
        if f.bottleneck == "data_loading":
            assert p.step_ms >= min(busy, wall) - 1e-9
        if f.bottleneck == "kernels":
            assert p.step_ms >= wall - busy - 1e-9
        if f.bottleneck == "host":
            assert p.step_ms >= wall - waits - 1e-9
    if r.bottleneck == "none":
        assert all(e.passed for e in r.health)
    if r.stability is not None and r.stability.value is not None and r.stability.value < 0.8:
        assert r.confidence.level != "high"
