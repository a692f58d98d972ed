"""Host contention as evidence: a contended run says so and its confidence drops; the gate says when
the two runs' hosts differed; host facts that were assumed are said to be assumed."""

from __future__ import annotations

from analyzer.analysis.contention import contention
from analyzer.analysis.host_facts import host_facts
from analyzer.analysis.thresholds import CONTENDED_SCALE
from analyzer.api import analyze, load_compared
from analyzer.planning.compare import compare
from analyzer.planning.cost import CostInputs
from analyzer.planning.gate import GateOptions
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.host_sample import encode_host_sample
from gpuanalyze.ingest.trace.runinfo import RunInfo
from tests.conftest import make_row, write_trace
from tests.kineto_fixtures import ev, write
from tests.test_host_facts import sample

QUIET = {"run_queue": 1, "load_avg": 0.5, "busy_cores": 1.0}
CONTENDED = {"run_queue": 7, "load_avg": 6.5, "busy_cores": 2.0, "process_cpu_cores": 0.6, "workers_cpu_cores": 0.0}


def _trace(path, readings, wall=20.0):
    rows = []
    for i in range(40):
        row = make_row(i, wall=wall + (i % 3) * 0.1, data=1.0, fwd=8.0, bwd=8.0, opt=1.0)
        if i < 12:
            row[S.SYSTEM] = encode_host_sample(sample(i, **readings))
        rows.append(row)
    return write_trace(path, rows, run={"cpu_count": 2, "host_cpus": 2})


def test_a_contended_run_says_so_and_its_confidence_drops(tmp_path):
    quiet = analyze(_trace(tmp_path / "quiet.arrow", QUIET))
    loaded = analyze(_trace(tmp_path / "loaded.arrow", CONTENDED))
    assert quiet.bottleneck == loaded.bottleneck
    assert not any("contended host" in n for n in quiet.notes)
    (note,) = [n for n in loaded.notes if "contended host" in n]
    assert "7.0 runnable threads on 2 CPUs" in note and "fair share ~29%" in note and "used 0.6 cores" in note
    assert loaded.confidence.value <= round(quiet.confidence.value * CONTENDED_SCALE, 3)
    assert "contended host" in loaded.confidence.reason


def test_no_readings_is_unknown_not_quiet():
    assert contention(host_facts(RunInfo(cpu_count=2)), RunInfo(cpu_count=2)) is None


def test_assumed_host_facts_are_said_to_be_assumed(tmp_path):
    events = [ev("cpu_op", "aten::mm", 0, 10)]
    for n in range(12):
        t0 = 10_000 * n
        events += [
            ev("user_annotation", f"ProfilerStep#{n}", t0, 10_000),
            ev("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 8000),
            ev("cpu_op", "aten::mm", t0 + 8100, 1500),
            ev("cuda_runtime", "cudaLaunchKernel", t0 + 8150, 5, correlation=n + 1),
            ev("kernel", "ampere_bf16_s16816gemm", t0 + 8200, 1500, stream=7, correlation=n + 1),
        ]
    props = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 40 * 10**9}]
    report = analyze(write(tmp_path / "imported.json", {"traceEvents": events, "deviceProperties": props}))
    assert report.bottleneck == "data_loading"
    assert any("assumed (4), not measured" in n for n in report.notes), report.notes
    from typer.testing import CliRunner

    from analyzer.cli import app

    shown = " ".join(CliRunner().invoke(app, [str(tmp_path / "imported.json"), "--width", "1000"]).output.split())
    assert "assumed free to this job" in shown and "were free to this job" not in shown  # the advice too
    native = analyze(_trace(tmp_path / "native.arrow", QUIET))
    assert not any("not measured" in n for n in native.notes)


def test_the_gate_says_when_the_hosts_differed_and_whether_the_slowdown_is_beyond_it(tmp_path):
    before = _trace(tmp_path / "before.arrow", QUIET)
    within = _trace(tmp_path / "within.arrow", CONTENDED, wall=24.0)  # +20%, fewer free cores
    gate = GateOptions(fail_if_slower_pct=5)
    loaded = [load_compared(p, CostInputs(), None) for p in (before, within)]
    result = compare(loaded, gate)
    host = [d for d in result.differences if d.startswith("host:")]
    assert host and "BEFORE 2.0 of 2 cores free" in host[0] and "AFTER" in host[0]
    assert any("within that" in d for d in host), host
    same = compare([load_compared(p, CostInputs(), None) for p in (before, before)], gate)
    assert not any(d.startswith("host:") for d in same.differences)


def test_the_gate_says_a_contended_after_when_before_has_no_readings(tmp_path):
    """A short BEFORE the sampler never read (the new user's 1 s twin) and a contended AFTER: the gate
    cannot compare the hosts, but says AFTER was contended (before: only 'unknown')."""
    rows = [make_row(i, wall=20.0 + (i % 3) * 0.1, data=1.0, fwd=8.0, bwd=8.0, opt=1.0) for i in range(40)]
    before = write_trace(tmp_path / "before.arrow", rows, run={"cpu_count": 2, "host_cpus": 2})
    after = _trace(tmp_path / "after.arrow", CONTENDED, wall=60.0)
    loaded = [load_compared(p, CostInputs(), None) for p in (before, after)]
    host = [d for d in compare(loaded, GateOptions(fail_if_slower_pct=5)).differences if d.startswith("host:")]
    assert "BEFORE has no system readings" in host[0]
    assert "AFTER was recorded on a contended host (7.0 runnable threads on 2 CPUs" in host[1]
    assert "rerun both on one quiet host" in host[1]
    ungated = compare([load_compared(p, CostInputs(), None) for p in (before, after)])
    assert not any("contended" in d for d in ungated.differences)  # said for a gate's verdict
