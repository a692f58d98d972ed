"""Idle owners (ingest/idle_owners.py): each owner from a small Kineto trace built to the documented behaviour of
the API it stands for, the sum property on synthetic and real traces, and the verdicts that follow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.analysis.owners import owned_consistency
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


def _fp32_doc(name: str, **top: Any) -> dict[str, Any]:
    doc = _doc(
        _steps(
            4,
            lambda lo, c: [
                ev("cuda_runtime", "hipLaunchKernel", lo + 10, 5, correlation=c + 1),
                ev("kernel", "Cijk_Ailk_Bljk_SB_MT64x64", lo + 20, 9000, stream=7, correlation=c + 1),
            ],
        ),
        name,
        (9, 4),
    )
    doc.update(top)
    return doc


@pytest.mark.parametrize(
    ("name", "top", "warp"),
    [("", {"roctracer_version": 4.1}, None), ("", {}, 64), ("AMD Instinct MI300X", {}, None)],
)
def test_an_amd_gfx_version_is_never_read_as_a_cuda_compute_capability(tmp_path, name, top, warp):
    """ROCm puts the GFX version (MI300X: 9.4) in computeMajor/Minor; with an empty name it must not read as Hopper
    (FP8 advice would follow): told by what only ROCm writes (roctracer keys, 64-wide wavefronts)."""
    doc = _fp32_doc(name, **top)
    if warp is not None:
        for p in doc["deviceProperties"]:
            p["warpSize"] = warp
    k = parse_kineto(write(tmp_path / "amd.json", doc))
    if name:  # the name alone already says AMD: capabilities may stay, the machine tables ignore them
        assert k.compute_capabilities in (None, ("9.4",))
    else:
        assert k.compute_capabilities is None
        assert any("GFX version" in n for n in k.notes)
    r = analyze(tmp_path / "amd.json")
    words = " ".join(" ".join((f.summary, *f.recommendations)) for f in r.findings).lower()
    assert "fp8" not in words and "hopper" not in words


def test_a_cuda_device_keeps_its_compute_capability(tmp_path):
    doc = _fp32_doc("")
    for p in doc["deviceProperties"]:
        p["warpSize"] = 32
    assert parse_kineto(write(tmp_path / "nv.json", doc)).compute_capabilities == ("9.4",)
    r = analyze(tmp_path / "nv.json")  # the control: read as CUDA 9.x, the advice is Hopper's
    assert "fp8" in " ".join(" ".join(f.recommendations) for f in r.findings).lower()


def test_launches_without_kernel_records_are_missing_activity_not_a_cpu_run(tmp_path):
    """Runtime calls recorded, no device activity: CUPTI's records are missing; the verdict says so (never
    'CPU-only', never a host verdict)."""
    events = _steps(
        4,
        lambda lo, c: [
            ev("cpu_op", "aten::mm", lo + 5, 200),
            ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
        ],
    )
    path = write(tmp_path / "nokernels.json", _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0)))
    trace = import_kineto(parse_kineto(path))
    assert trace.run.unrecorded_launches == 4
    assert not any("CPU-only" in n for n in trace.notes)
    r = analyze(path)
    assert r.bottleneck == "unknown"
    assert "device activity is missing" in r.confidence.reason
    sync_only = _steps(4, lambda lo, c: [ev("cuda_runtime", "cudaDeviceSynchronize", lo + 5, 20)])
    synced = import_kineto(parse_kineto(write(tmp_path / "sync.json", _doc(sync_only, "", None))))
    assert synced.run.unrecorded_launches is None  # a CPU run calling torch.cuda.synchronize() enqueues nothing
    cpu = write(tmp_path / "cpu.json", _doc(_steps(4, lambda lo, c: [ev("cpu_op", "aten::mm", lo + 5, 200)]), "", None))
    assert import_kineto(parse_kineto(cpu)).run.unrecorded_launches is None


def test_allocations_in_every_step_are_churn_not_warm_up(tmp_path):
    """cudaFree/cudaMalloc in each of 6 steps (fewer than the 10 a steady run needs): not first allocations but
    churn, so the steps are judged (sync, allocator_churn), not called warm-up."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        return [
            ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 20, 5000, stream=7, correlation=c + 1),
            ev("cuda_runtime", "cudaFree", lo + 5100, 3000),
            ev("cuda_runtime", "cudaMalloc", lo + 8150, 1000),
            ev("cuda_runtime", "cudaLaunchKernel", lo + 9200, 5, correlation=c + 2),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 9220, 700, stream=7, correlation=c + 2),
        ]

    events = _steps(6, body)
    stats = _owners(tmp_path, events)
    assert all(s.idle_owner_allocator_ms > 2.5 for s in stats)
    r = analyze(write(tmp_path / "churn.json", _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert "warm-up" not in r.confidence.reason
    assert (r.bottleneck, r.findings[0].cause) == ("sync", "allocator_churn")
    one = _steps(6, lambda lo, c: body(lo, c) if c == 0 else body(lo, c)[:2] + body(lo, c)[4:])
    first = analyze(write(tmp_path / "first.json", _doc(one, "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert first.metrics.kernels is not None and first.metrics.kernels.startup_steps == 1  # first allocations


def test_graph_replay_that_outlives_the_host_is_queued_work_not_batch_size(tmp_path):
    """One cudaGraphLaunch per step replays 40 kernels (all with the launch's correlation id); the host returns at
    once and idles while they run. Gaps between replayed kernels were queued before they began: `queued`, never
    dispatch, and the verdict is not `batch_size`."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        out = [ev("cuda_runtime", "cudaGraphLaunch", lo + 10, 20, correlation=c + 1)]
        for j in range(40):
            out.append(ev("kernel", "ampere_bf16_s16816gemm", lo + 50 + j * 240, 200, stream=7, correlation=c + 1))
        return out

    events = _steps(6, body)
    stats = _owners(tmp_path, events)
    assert _ms(stats, "queued") == pytest.approx(6 * 39 * 0.040, rel=1e-6)  # every gap between replayed kernels
    assert _ms(stats, "launch") < 0.05 * sum(s.window_idle_ms for s in stats)
    r = analyze(write(tmp_path / "graph.json", _doc(events, "NVIDIA A100-SXM4-40GB", (8, 0))))
    assert r.bottleneck != "batch_size"


def test_an_async_2d_copy_to_pageable_memory_blocks_the_host(tmp_path):
    """cudaMemcpy2DAsync into pageable memory is synchronous to the host (CUDA API sync behaviour): the device
    record says Pageable, and the idle while the host sits in the call is the sync's."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        return [
            ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 20, 2000, stream=7, correlation=c + 1),
            ev("cpu_op", "aten::copy_", lo + 2030, 7000),
            ev("cuda_runtime", "cudaMemcpy2DAsync", lo + 2040, 6900, correlation=c + 2),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", lo + 8900, 20, stream=7, correlation=c + 2),
        ]

    stats = _owners(tmp_path, _steps(6, body))
    assert _ms(stats, "sync") >= 0.8 * sum(s.window_idle_ms for s in stats)


def test_cpu_ops_that_launch_nothing_own_the_idle_and_their_steps_are_counted(tmp_path):
    """The host inside a CPU op that launches no device work while the GPU waits (CPU-side preprocessing or
    metrics) is host/cpu_work; in every other step only: half the steps show it, and the finding says so."""

    def body(every: int):
        def step(lo: float, c: int) -> list[dict[str, Any]]:
            out = [
                ev("cuda_runtime", "cudaLaunchKernel", lo + 10, 5, correlation=c + 1),
                ev("kernel", "ampere_bf16_s16816gemm", lo + 20, 2000, stream=7, correlation=c + 1),
            ]
            if (c // 1000) % every == 0:
                out.append(ev("cpu_op", "aten::index", lo + 2100, 5900))
            return out

        return step

    doc = _doc(_steps(12, body(1)), "NVIDIA A100-SXM4-40GB", (8, 0))
    r = analyze(write(tmp_path / "all.json", doc))
    f = r.findings[0]
    assert (r.bottleneck, f.cause) == ("host", "cpu_work"), (r.bottleneck, f.cause)
    assert f.consistency == 1.0
    half = analyze(write(tmp_path / "half.json", _doc(_steps(12, body(2)), "NVIDIA A100-SXM4-40GB", (8, 0))))
    # every other analysed step shows it (the rest of the idle is host work no call covers: host/untraced)
    assert half.bottleneck == "host"
    assert 0.4 <= (owned_consistency(half.metrics.kernels, ("cpu_ops",), 0.1) or 0.0) <= 0.6
