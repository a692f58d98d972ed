"""Blocking calls: pageable copies are host sync; the blocking op and its caller are named in stats, finding and advice.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import analyze
from gpuanalyze.ingest.kineto.parse import parse_kineto
from tests import mechanism_fixtures as F
from tests.conftest import SHARED, shared_report
from tests.kineto_fixtures import ev, write

EXTERNAL = SHARED / "external_traces"


# -- a host blocked in copies to pageable memory is host sync --------------------------------------


def test_pageable_device_to_host_copies_are_host_sync(tmp_path):
    r = analyze(write(tmp_path / "t.json", F.pageable_copy_trace()))
    # before: cudaMemcpyAsync was not a sync call, so the 146 ms per step read as batch_size/host_overhead
    assert (r.bottleneck, r.findings[0].cause) == ("sync", "host_sync")
    assert r.metrics.share["sync_ms"] == pytest.approx(146 / 200, abs=1e-3)
    advice = " ".join(r.findings[0].recommendations)
    assert "pageable" in advice and "non_blocking=True" in advice and "device-to-host" in advice


# -- the blocking call's op and caller -------------------------------------------------------------


def _blocking(path):
    from gpuanalyze.ingest.timeline.kernel_stats import StepKernels

    k = parse_kineto(path)
    return k, StepKernels(k)


def test_blocking_copy_names_its_op_and_caller_in_the_step_stats(tmp_path):
    k, sk = _blocking(write(tmp_path / "t.json", F.pageable_copy_trace()))
    # before: KernelStats counted the 146 ms in sync_api_ms but could not say where it came from
    (b,) = sk.stats(0, 200_000).blocking_ops
    assert (b.op, b.caller, b.call, b.count) == ("aten::to", "metrics", "cudaMemcpyAsync", 1)
    assert b.total_ms == pytest.approx(146.0)
    # the outermost op (what the Python code called), not its inner aten::copy_
    assert k.blocking.names[k.blocking.op[0]] == "aten::to"


def test_blocking_calls_without_cpu_ops_have_no_names(tmp_path):
    _, sk = _blocking(write(tmp_path / "t.json", F.pageable_copy_trace(cpu_ops=False)))
    (b,) = sk.stats(0, 200_000).blocking_ops
    assert (b.op, b.caller, b.call) == ("", "", "cudaMemcpyAsync")
    r = analyze(write(tmp_path / "u.json", F.pageable_copy_trace(cpu_ops=False)))
    assert (r.bottleneck, r.findings[0].cause) == ("sync", "host_sync")


def test_hostile_nesting_and_threads_stay_linear_and_bounded(tmp_path):
    import time

    from gpuanalyze.ingest.trace.byte_source import ReadLimits

    def doc(n: int) -> dict:
        events = [ev("user_annotation", "ProfilerStep#0", 0, 10 * n + 10)]
        for i in range(n):  # n nested ops on one thread, then n threads with one op and one sync each
            events.append(ev("cpu_op", f"op{i}", i, 10 * n + 10 - 2 * i))
        for i in range(n):
            o = ev("cpu_op", "aten::item", 5 * n + i, 1)
            c = ev("cuda_runtime", "cudaStreamSynchronize", 5 * n + i, 0.5)
            o["tid"] = c["tid"] = 1000 + i
            events += [o, c]
        events.append(ev("cuda_runtime", "cudaDeviceSynchronize", 9 * n, 1))
        return {"traceEvents": events}

    times = []
    for n in (2_000, 16_000):
        path = write(tmp_path / f"h{n}.json", doc(n))
        t0 = time.perf_counter()
        k = parse_kineto(path)
        times.append(time.perf_counter() - t0)
        b = k.blocking
        names = [b.names[i] for i in b.op]
        assert names[:n] == ["aten::item"] * n and names[n] == "op0"
    assert times[1] < 8 * 8 * times[0] + 1.0  # 8x the events: about 8x the time, far from 64x
    # the kept CPU ops count toward max_kept_events: past it they are dropped with a note, the trace still imports
    k = parse_kineto(write(tmp_path / "small.json", doc(200)), ReadLimits(max_kept_events=500))
    assert k.blocking.op.size == 0 or (k.blocking.op < 0).all()
    assert any("not attributed" in n for n in k.notes), k.notes


def test_host_sync_finding_names_the_op_and_caller(tmp_path):
    import json

    from analyzer.render.json_report import render_json

    r = analyze(write(tmp_path / "t.json", F.pageable_copy_trace()))
    f = r.findings[0]
    assert (r.bottleneck, f.cause) == ("sync", "host_sync")
    site = (
        "146.0 ms per step in `aten::to` -> cudaMemcpyAsync (a copy the host blocks in) called from "
        "record_function('metrics')"
    )
    assert site in f.summary, f.summary
    assert site in f.recommendations[0] and "non_blocking=True" in f.recommendations[0], f.recommendations
    (b,) = json.loads(render_json(r))["kernels"]["blocking_ops"]
    assert (b["op"], b["caller"], b["call"], b["count"]) == (
        "aten::to",
        "metrics",
        "cudaMemcpyAsync",
        r.metrics.kernels.steps,
    )
    # without CPU ops: the same finding, nothing named
    bare = analyze(write(tmp_path / "u.json", F.pageable_copy_trace(cpu_ops=False))).findings[0]
    assert "most of it" not in bare.summary and "record_function" not in " ".join(bare.recommendations)


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_external_h100_sync_on_a_busy_gpu_is_not_a_stall():
    """Host time in cudaStreamSynchronize while the GPU runs costs nothing: sync is credited by the idle it owns."""
    r = shared_report(EXTERNAL / "tracelens/h100_owlv2.json.gz")
    owned = r.metrics.kernels.totals_ms["idle_owner_sync_ms"]
    blocked = r.metrics.share["sync_ms"] * r.metrics.step_mean_ms
    assert owned < 0.5 * blocked, (owned, blocked)
    assert not any(f.cause == "host_sync" for f in r.findings)


def test_an_explicit_synchronize_gets_synchronize_advice_with_its_caller(tmp_path):
    doc = F.pageable_copy_trace()
    for e in doc["traceEvents"]:  # torch.cuda.synchronize() under record_function("timing"): no aten op around it
        if e["name"] == "cudaMemcpyAsync":
            e["name"] = "cudaDeviceSynchronize"
        elif e["name"] == "metrics":
            e["name"] = "timing"
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "cpu_op"]
    f = analyze(write(tmp_path / "t.json", doc)).findings[0]
    assert "in cudaDeviceSynchronize called from record_function('timing')" in f.summary, f.summary
    assert "drop the synchronize" in f.recommendations[0], f.recommendations


def test_the_call_named_is_the_one_that_left_the_gpu_idle_not_the_longest_wait(tmp_path):
    """A synchronize waiting on a long kernel blocks the host longer than a `.item()` copy does, but only the copy
    leaves the GPU idle: the finding names the copy, with the GPU idle it owns."""
    from tests.mechanism_fixtures import _doc

    events = []
    for i in range(6):
        lo, c = i * 10_000.0, 1000 * i
        events += [
            ev("user_annotation", f"ProfilerStep#{i + 20}", lo, 10_000.0),
            ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 20, 5000, stream=7, correlation=c + 1),
            ev("user_annotation", "timing", lo + 25, 5000),
            ev("cuda_runtime", "cudaDeviceSynchronize", lo + 30, 4990),
            ev("cpu_op", "aten::item", lo + 5100, 3100),
            ev("cuda_runtime", "cudaMemcpy", lo + 5110, 3080, correlation=c + 2),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", lo + 8170, 10, stream=7, correlation=c + 2),
        ]
    r = analyze(write(tmp_path / "t.json", _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))))
    top = r.metrics.kernels.blocking_ops[0]
    assert (top.op, top.call) == ("aten::item", "cudaMemcpy"), r.metrics.kernels.blocking_ops
    wait = next(b for b in r.metrics.kernels.blocking_ops if b.call == "cudaDeviceSynchronize")
    assert wait.total_ms > top.total_ms and wait.idle_ms < 0.1 * top.idle_ms
    steps = r.metrics.kernels.steps
    assert top.idle_ms / steps > 3.0  # the copy's wait, and the gap it drained up to the next launch
    f = next(f for f in r.findings if f.cause == "host_sync")
    assert "`aten::item` -> cudaMemcpy" in f.summary and "the GPU idle" in f.summary, f.summary
