"""Idle owners (ingest/idle_owners.py): each owner from a small Kineto trace built to the documented behaviour of
the API it stands for, the sum property on synthetic and real traces, and the verdicts that follow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.api import analyze
from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.kineto import parse_kineto
from gpuanalyze.ingest.kineto_import import import_kineto
from gpuanalyze.ingest.runtime_calls import BLOCKING, OTHER, call_class
from tests.conftest import SHARED
from tests.kineto_fixtures import ev, write
from tests.mechanism_fixtures import _doc

EXTERNAL = SHARED / "external_traces"


def _owners(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> list[S.KernelStats]:
    trace = import_kineto(parse_kineto(write(tmp_path / name, _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0)))))
    return [S.decode_kernel_stats(x) for x in trace.frame.get_column(S.KERNEL_STATS).to_list() if x]


def _ms(stats: list[S.KernelStats], owner: str) -> float:
    return sum(getattr(s, S.owner_field(owner)) for s in stats)


def _steps(n: int, body: Any, step_us: float = 10_000.0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i in range(n):
        lo = i * step_us
        events.append(ev("user_annotation", f"ProfilerStep#{i + 20}", lo, step_us))
        events += body(lo, 1000 * i)
    return events


def test_api_families_not_exact_names_decide_what_blocks():
    for name in ("cudaMemcpy", "cudaMemcpy2D", "hipMemcpyWithStream", "cuMemcpyDtoH_v2", "cuStreamSynchronize"):
        assert call_class(name) == BLOCKING, name
    for name in ("cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaLaunchKernel", "cudaStreamWaitEvent"):
        assert call_class(name) == OTHER, name


def test_a_synchronous_copy_not_on_any_list_owns_the_idle_it_causes(tmp_path):
    """hipMemcpyWithStream is synchronous: the host waits in it while the GPU has nothing to run."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        return [
            ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 20, 2000, stream=7, correlation=c + 1),
            ev("cpu_op", "aten::to", lo + 2030, 7000),
            ev("cuda_runtime", "hipMemcpyWithStream", lo + 2040, 6900, correlation=c + 2),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", lo + 8900, 10, stream=7, correlation=c + 2),
        ]

    stats = _owners(tmp_path, _steps(6, body))
    idle = sum(s.window_idle_ms for s in stats)
    assert _ms(stats, "sync") >= 0.8 * idle
    r = analyze(write(tmp_path / "v.json", _doc(_steps(6, body), "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert (r.bottleneck, r.findings[0].cause) == ("sync", "host_sync")


def test_a_sync_on_a_busy_gpu_owns_only_the_gap_it_leaves(tmp_path):
    """A host waiting in cudaStreamSynchronize while a long kernel runs is not a stall: only the drained gap
    after it, until the next launch, is the sync's."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        return [
            ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 20, 9700, stream=7, correlation=c + 1),
            ev("cuda_runtime", "cudaStreamSynchronize", lo + 30, 9695),
        ]

    stats = _owners(tmp_path, _steps(6, body))
    assert _ms(stats, "sync") < 0.2 * sum(s.sync_api_ms for s in stats)
    r = analyze(write(tmp_path / "v.json", _doc(_steps(6, body), "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert r.bottleneck != "sync"


def test_a_long_first_launch_is_module_loading_and_the_step_is_warm_up(tmp_path):
    """A launch call of hundreds of ms while the GPU idles loads the kernel's module (lazy loading)."""
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 500_000),
        ev("cuda_runtime", "cudaLaunchKernel", 100, 497_000, correlation=1),
        ev("kernel", "ampere_bf16_s16816gemm", 497_200, 2000, stream=7, correlation=1),
    ]
    stats = _owners(tmp_path, events)
    assert _ms(stats, "module_loading") >= 0.9 * stats[0].window_idle_ms
    r = analyze(write(tmp_path / "v.json", _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert r.bottleneck == "unknown" and not r.findings and "record more steps" in r.confidence.reason


def test_graph_capture_launches_that_run_nothing_are_a_capture_window(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#3", 0, 20_000),
        ev("cuda_runtime", "cudaLaunchKernel", 50, 5, correlation=1),
        ev("kernel", "ampere_bf16_s16816gemm", 60, 100, stream=7, correlation=1),
        ev("cuda_runtime", "cudaStreamBeginCapture", 200, 5),
        *[ev("cuda_runtime", "cudaLaunchKernel", 300 + 30 * i, 20, correlation=10 + i) for i in range(546)],
        ev("cuda_runtime", "cudaStreamEndCapture", 19_000, 50),
        ev("cuda_runtime", "cudaLaunchKernel", 19_900, 5, correlation=2),
        ev("kernel", "ampere_bf16_s16816gemm", 19_910, 50, stream=7, correlation=2),
    ]
    stats = _owners(tmp_path, events)
    assert _ms(stats, "graph_capture") >= 0.9 * stats[0].window_idle_ms
    r = analyze(write(tmp_path / "v.json", _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert r.bottleneck == "unknown" and "graph capture" in r.confidence.reason


def test_a_dataloader_wait_owns_the_idle_and_allocator_churn_is_named(tmp_path):
    def body(lo: float, c: int) -> list[dict[str, Any]]:
        return [
            ev("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", lo, 4000),
            ev("cuda_runtime", "cudaMalloc", lo + 4100, 300),
            ev("cuda_runtime", "cudaLaunchKernel", lo + 4500, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 4510, 5400, stream=7, correlation=c + 1),
        ]

    stats = _owners(tmp_path, _steps(12, body))
    assert _ms(stats, "data_loader") == pytest.approx(12 * 4.0, rel=0.05)
    assert _ms(stats, "allocator") == pytest.approx(12 * 0.3, rel=0.05)


def test_work_queued_ahead_is_not_the_hosts(tmp_path):
    """Kernels launched before a gap began: the GPU waited on a dependency, not on the host."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        out = []
        for j in range(4):
            out += [
                ev("cuda_runtime", "cudaLaunchKernel", lo + 1 + j, 0.5, correlation=c + j + 1),
                ev("kernel", "ampere_bf16_s16816gemm", lo + 100 + j * 2400, 1500, stream=7, correlation=c + j + 1),
            ]
        return out

    stats = _owners(tmp_path, _steps(6, body))
    gaps = sum(s.window_idle_ms for s in stats)
    assert _ms(stats, "queued") >= 0.5 * gaps


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["kernel", "cuda_runtime", "cpu_op", "user_annotation"]),
            st.sampled_from(["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMalloc", "aten::mm", "gemm"]),
            st.floats(0, 50_000),
            st.floats(0, 5_000),
            st.integers(1, 8),
        ),
        min_size=2,
        max_size=40,
    )
)
def test_owners_add_up_to_each_steps_idle_time(tmp_path_factory, raw):
    events = [
        ev("user_annotation", "ProfilerStep#1", 0, 20_000),
        ev("user_annotation", "ProfilerStep#2", 20_000, 30_000),
    ]
    events.append(ev("kernel", "gemm", 5, 10, stream=7, correlation=99))
    for cat, name, ts, dur, corr in raw:
        if cat == "kernel":
            events.append(ev("kernel", "ampere_bf16_s16816gemm", ts, dur, stream=7, correlation=corr))
        elif cat == "cuda_runtime":
            events.append(ev("cuda_runtime", name, ts, dur, correlation=corr))
        else:
            events.append(ev(cat, name, ts, dur))
    stats = _owners(tmp_path_factory.mktemp("p"), events)
    for s in stats:
        total = sum(getattr(s, S.owner_field(o)) for o in S.IDLE_OWNERS)
        assert s.owners and total == pytest.approx(s.window_idle_ms, abs=1e-6)


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
@pytest.mark.parametrize("path", sorted(EXTERNAL.rglob("*.json.gz")) if EXTERNAL.is_dir() else [], ids=lambda p: p.name)
def test_every_idle_interval_of_every_real_trace_has_an_owner(path):
    trace = import_kineto(parse_kineto(path))
    for text in trace.frame.get_column(S.KERNEL_STATS).to_list():
        if not text:
            continue
        s = S.decode_kernel_stats(text)
        total = sum(getattr(s, S.owner_field(o)) for o in S.IDLE_OWNERS)
        assert s.owners and total == pytest.approx(s.window_idle_ms, rel=1e-6, abs=1e-6)
