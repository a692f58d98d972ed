"""Idle owners (ingest/idle_owners.py): each owner from a small Kineto trace built to the documented behaviour of
the API it stands for, the sum property on synthetic and real traces, and the verdicts that follow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.analysis.owners import owned_consistency
from analyzer.api import analyze
from gpuanalyze.ingest.kineto.parse import parse_kineto
from gpuanalyze.ingest.nsys.load import load_nsys_ranks
from gpuanalyze.ingest.timeline.idle_owners import _during, _take, _take_quiet
from gpuanalyze.ingest.timeline.intervals import intersect, merge_sorted, minus, outside, segments, union
from gpuanalyze.ingest.timeline.runtime_calls import BLOCKING, OTHER, call_class
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from gpuanalyze.ingest.trace import schema as S
from tests.capture_fixtures import DEVICE, HTOD, PAGEABLE, Nsys, launch
from tests.conftest import SHARED, shared_kineto
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
    trace = shared_kineto(path)
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


# -- owners by behaviour, read from timestamps (issue 36) --------------------------------------------------------


def test_every_api_family_blocks_by_its_documented_behaviour():
    """CUDA runtime, driver and HIP: every *Synchronize and every copy without Async blocks the host; an Async copy
    blocks only to or from pageable memory, read from its record or from when it returns."""
    for name in ("cuCtxSynchronize", "cuEventSynchronize", "hipDeviceSynchronize", "cuMemcpyHtoD_v2", "hipMemcpyDtoH"):
        assert call_class(name) == BLOCKING, name
    for name in ("cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "hipMemcpyAsync", "cuLaunchKernel", "hipMemset"):
        assert call_class(name) == OTHER, name


def _one_window(tmp_path: Path, events: list[dict[str, Any]]) -> S.KernelStats:
    (stats,) = _owners(tmp_path, events)
    return stats


def test_a_host_back_from_a_blocking_copy_that_records_nothing_is_untraced_not_sync(tmp_path):
    """A blocking cudaMemcpy returns when its copy is done; the 600 s of CPU work after it (nothing recorded) are the
    host's, not the copy's: host_idle, never sync (issue 36, item 3)."""
    events = [
        *launch(0, 1, 10, 1000),
        ev("cuda_runtime", "cudaMemcpy", 1100, 2000, correlation=2),
        ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 2900, 190, stream=7, correlation=2),
        *launch(600_003_200, 3, 600_003_210, 1000),
    ]
    s = _one_window(tmp_path, events)
    assert s.idle_owner_host_idle_ms >= 600_000 - 1
    assert s.idle_owner_sync_ms == pytest.approx(1.81)  # in the call while the GPU idled: 1100..2900, 3090..3100 us


def test_a_copy_that_waits_while_the_host_sits_in_a_sync_is_not_launch_latency(tmp_path):
    """cudaMemcpyAsync returns in 10 us; its copy runs 42.6 ms later while the host sits in cudaStreamSynchronize:
    the host waited for that work, not for a launch (issue 36, item 5)."""
    events = [
        *launch(0, 1, 10, 100),
        ev("cpu_op", "aten::to", 150, 42_600),
        ev("cuda_runtime", "cudaMemcpyAsync", 160, 10, correlation=2),
        ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 42_700, 20, stream=7, correlation=2),
        ev("cuda_runtime", "cudaStreamSynchronize", 180, 42_545),
    ]
    s = _one_window(tmp_path, events)
    assert s.idle_owner_sync_ms >= 42.5 and s.idle_owner_launch_ms < 0.1


@pytest.mark.parametrize("record", ["gpu_memcpy", "kernel"])
def test_a_493_ms_synchronous_copy_is_sync_whatever_runs_the_copy(tmp_path, record):
    """hipMemcpyWithStream is synchronous: the host sits in it 493 ms while the GPU idles, whether the copy is a
    copy record or a blit kernel (then the call is no kernel launch to be read as module loading)."""
    name = "Memcpy DtoH (Device -> Host)" if record == "gpu_memcpy" else "__amd_rocclr_copyBuffer"
    events = [
        ev("cuda_runtime", "hipLaunchKernel", 0, 5, correlation=1),
        ev("kernel", "Cijk_Ailk_Bljk_SB_MT64x64", 10, 1000, stream=7, correlation=1),
        ev("cuda_runtime", "hipMemcpyWithStream", 1100, 493_000, correlation=2),
        ev(record, name, 493_900, 150, stream=7, correlation=2),
    ]
    s = _one_window(tmp_path, events)
    assert s.idle_owner_sync_ms >= 492.5 and s.idle_owner_launch_ms < 0.1 and s.idle_owner_module_loading_ms == 0


def test_an_async_copy_that_returns_when_its_copy_ends_blocked(tmp_path):
    """HIP's copy records say Host, not Pageable or Pinned: a hipMemcpyAsync that returns only when its copy has
    completed behaved as a copy to pageable memory does (blocking), so the idle while the host sat in it is sync."""
    events = [
        *launch(0, 1, 10, 1000),
        ev("cuda_runtime", "hipMemcpyAsync", 1020, 5000, correlation=2),
        ev("gpu_memcpy", "Memcpy DtoH (Device -> Host)", 5900, 115, stream=7, correlation=2),
        *launch(6100, 3, 6110, 1000),
    ]
    s = _one_window(tmp_path, events)
    assert s.idle_owner_sync_ms == pytest.approx(4.89, abs=0.01) and s.idle_owner_launch_ms < 0.1


def _allocating(every_step: bool) -> list[dict[str, Any]]:
    """Six steps; a 300 ms context-creating cudaMalloc in the first only, or a cuMemAlloc in every step."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        alloc = []
        if every_step:
            alloc = [ev("cuda_runtime", "cuMemAlloc_v2", lo + 100, 2000)]
        elif c == 0:
            alloc = [ev("cuda_runtime", "cudaMalloc", lo + 100, 300_000)]
        t = lo + 100 + (alloc[0]["dur"] if alloc else 0) + 50
        return [*alloc, *launch(t, c + 1, t + 20, 2000)]

    return _steps(6, body, step_us=400_000.0)


def test_a_first_allocation_is_start_up_and_a_repeated_one_is_churn(tmp_path):
    first = _owners(tmp_path, _allocating(False), "first.json")
    assert first[0].idle_owner_device_setup_ms == pytest.approx(300.0) and _ms(first, "allocator") == 0
    churn = _owners(tmp_path, _allocating(True), "churn.json")
    assert all(s.idle_owner_allocator_ms == pytest.approx(2.0) for s in churn)
    assert _ms(churn, "device_setup") == 0


def test_a_capture_begun_and_never_ended_holds_only_until_work_runs_again(tmp_path):
    """A stray cudaStreamBeginCapture: launches into a capturing stream are recorded, not run; kernels that run after
    it were not captured, so the capture region ends there (issue 37, item 6)."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        out = launch(lo + 10, c + 1, lo + 20, 2000) + launch(lo + 4000, c + 2, lo + 4010, 2000)
        return out + ([ev("cuda_runtime", "cudaStreamBeginCapture", lo + 2100, 5)] if c == 0 else [])

    stats = _owners(tmp_path, _steps(6, body))
    assert _ms(stats, "graph_capture") == pytest.approx(1.9, abs=0.01)  # 2100 us to the next launch at 4000 us
    assert _ms(stats, "launch") + _ms(stats, "host_idle") >= 0.9 * sum(s.window_idle_ms for s in stats[1:])


def test_a_gpu_busy_copying_says_so_in_its_busy_split(tmp_path):
    """Each 10 ms step maps 512 MB to the device and back (pageable): 96% of the GPU's busy time is copies; a kernel
    running beside a copy is compute, an all-reduce alone communication."""

    def body(lo: float, c: int) -> list[dict[str, Any]]:
        return [
            ev("cuda_runtime", "cudaMemcpy", lo + 10, 4810, correlation=c + 1),
            ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", lo + 20, 4800, stream=7, correlation=c + 1),
            *launch(lo + 4830, c + 2, lo + 4840, 200),
            ev("cuda_runtime", "cudaMemcpy", lo + 5050, 4810, correlation=c + 3),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", lo + 5060, 4800, stream=7, correlation=c + 3),
        ]

    stats = _owners(tmp_path, _steps(4, body))
    for s in stats:
        assert s.copy_busy_ms / s.gpu_busy_ms == pytest.approx(9.6 / 9.8, abs=1e-6)
        assert s.memcpy_pageable_ms == pytest.approx(9.6) and s.memcpy_h2d_ms == pytest.approx(4.8)
    mixed = [
        ev("user_annotation", "ProfilerStep#1", 0, 2000),
        ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 1000, stream=8, correlation=1),
        *launch(0, 2, 500, 1000),
        ev("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 1600, 300, stream=9, correlation=3),
    ]
    (s,) = _owners(tmp_path, mixed, "mixed.json")
    assert (s.compute_ms, s.copy_busy_ms, s.non_compute_ms - s.copy_busy_ms) == pytest.approx((1.0, 0.5, 0.3))


def test_a_driver_api_async_copy_from_pageable_memory_blocks(tmp_path):
    """cuMemcpyHtoDAsync from pageable memory (an Nsight Systems capture of a driver-API program): the driver stages
    the buffer before the call returns (CUDA driver API, "API synchronization behavior"), so the host sits in it
    while the GPU idles: sync, and blocking host time (sync_api_ms), its copy H2D and pageable."""
    cap = Nsys()
    for i in range(3):
        t = i * 40 * 1_000_000
        cap.kernel(t, t + 10_000, 2_000_000)
        cap.copy(t + 3 * 1_000_000, 27_000_000, t + 29_900_000, 100_000, HTOD, PAGEABLE, DEVICE, "cuMemcpyHtoDAsync_v2")
        cap.call(t + 30_010_000, 9_000_000, "cuCtxSynchronize")
    (t,) = load_nsys_ranks(cap.write(tmp_path / "d.sqlite"))
    stats = [S.decode_kernel_stats(x) for x in t.frame.get_column(S.KERNEL_STATS).to_list() if x]
    assert sum(s.idle_owner_sync_ms for s in stats) >= 3 * 26.8
    assert sum(s.idle_owner_launch_ms for s in stats) < 0.1
    assert all(s.memcpy_pageable_ms == pytest.approx(0.1) and s.memcpy_h2d_ms == pytest.approx(0.1) for s in stats)
    assert sum(s.sync_api_ms for s in stats) >= 3 * 27


_spans = st.lists(st.tuples(st.integers(0, 80), st.integers(0, 12)), max_size=30)


def _segs(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([a for a, _ in spans], dtype=np.float64)
    return segments(s, s + np.array([d for _, d in spans], dtype=np.float64))


@settings(max_examples=300, deadline=None)
@given(waiting=_spans, ops=_spans, calls=_spans)
def test_launch_owner_taken_in_two_steps_equals_taking_the_union_at_once(waiting, ops, calls):
    """The launch owner is taken from the ops that launched, then from the calls overlapping what is left (held and
    merged alone): exactly what intersecting with their union took, and the same time left for the next owners."""
    w, launching = _segs(waiting), _segs(ops)
    cs = np.array([a for a, _ in calls], dtype=np.float64)
    ce = cs + np.array([d for _, d in calls], dtype=np.float64)
    everything = union(launching, segments(cs, ce))
    owned: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    left = _take(owned, w, "launch", launching)
    left = _take(owned, left, "launch", _during(left, cs, ce))
    for got, want in ((union(owned["launch"]), union(intersect(w, everything))), (left, minus(w, everything))):
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def _raw(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array(sorted(a for a, _ in spans), dtype=np.float64)
    return s, s + np.array([d for _, d in sorted(spans)], dtype=np.float64)


def _lists(seg: tuple[np.ndarray, np.ndarray]) -> tuple[list[float], list[float]]:
    return seg[0].tolist(), seg[1].tolist()


@settings(max_examples=300, deadline=None)
@given(
    busy=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 3)), max_size=20),
    threads=st.lists(st.tuples(_spans, _spans), min_size=1, max_size=3),
    calls=_spans,
)
def test_owners_taken_thread_by_thread_are_the_owners_of_the_threads_union(busy, threads, calls):
    """launch from each thread's launching ops that overlap what still waits, then the calls, then cpu_ops from each
    thread's quiet ops: the very segments (cpu_ops and what is left, piece for piece; launch once merged) that taking
    the union of every thread's ops at once gave. What waits has pieces that touch where a zero-length kernel ran."""
    s, e = _raw(busy)
    w = outside(0.0, 100.0, merge_sorted(s, e))  # zero-length busy segments split the idle into touching pieces
    cs, ce = _raw(calls)
    launching = [_segs(a) for a, _ in threads]
    quiet = [_segs(b) for _, b in threads]
    at_once: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    left = _take(at_once, w, "launch", union(*launching))
    left = _take(at_once, left, "launch", _during(left, cs, ce))
    left = _take(at_once, left, "cpu_ops", union(*quiet))
    by_thread: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    rest, held = w, []
    for (a, b), (c, d) in zip(launching, quiet, strict=True):
        rest = _take(by_thread, rest, "launch", _during(rest, a, b))
        held.append(_during(rest, c, d))
    rest = _take(by_thread, rest, "launch", _during(rest, cs, ce))
    rest = _take_quiet(by_thread, rest, held)
    assert _lists(union(by_thread["launch"])) == _lists(union(at_once["launch"]))
    assert _lists(by_thread["cpu_ops"]) == _lists(at_once["cpu_ops"])
    assert _lists(rest) == _lists(left)
