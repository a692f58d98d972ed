"""How a capture is cut (ingest/capture_windows.py): set-up, the steps that are judged, teardown; each from a small
capture built to the documented behaviour of what it records (tests/capture_fixtures.py). Verdict-free: the
windows, the set-up and teardown parts, and the owners of the judged steps."""

from __future__ import annotations

from typing import Any

import pytest

from gpuanalyze.ingest.kineto.parse import parse_kineto
from gpuanalyze.ingest.nsys.load import load_nsys_ranks
from gpuanalyze.ingest.timeline.capture_windows import API_CALLS, UNTRACED
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace
from tests.capture_fixtures import kineto, launch, whole_process
from tests.kineto_fixtures import ev, write


def _stats(t: Trace) -> list[S.KernelStats]:
    return [S.decode_kernel_stats(x) for x in t.frame.get_column(S.KERNEL_STATS).to_list() if x]


def _parts(outside: S.OutsideSteps | None) -> dict[str, float]:
    assert outside is not None
    return {p.name: p.ms for p in outside.parts}


@pytest.mark.parametrize("ranges", [True, False], ids=["nvtx-steps", "no-step-ranges"])
def test_a_whole_process_capture_judges_only_its_steps(tmp_path, ranges):
    """``nsys profile python train.py``: 10 s of imports and dataset building before the first CUDA call and 2 s
    of teardown after the last, nothing recorded in either. With NVTX step ranges or without (the iterations of
    its runtime calls: a copy in, a kernel, a sync), the 20 steps are judged and nothing else."""
    (t,) = load_nsys_ranks(whole_process(ranges).write(tmp_path / "w.sqlite"))
    assert t.frame.height == 20
    walls = t.frame.get_column(S.WALL_MS).to_list()
    # 20 steps of 2 ms (found ones end with the last GPU work, 0.43 ms early), no set-up or teardown in any of them
    assert 39.5 <= sum(walls) <= 40.0
    setup = _parts(t.run.setup)
    assert t.run.setup is not None and t.run.setup.ms == pytest.approx(10_000.0, abs=0.1)
    assert setup[UNTRACED] == pytest.approx(10_000.0 - 290.0, abs=0.1) and setup["cudaMalloc"] == pytest.approx(290.0)
    assert t.run.teardown is not None and t.run.teardown.ms == pytest.approx(2000.0, abs=0.5)
    assert _parts(t.run.teardown)[UNTRACED] == pytest.approx(t.run.teardown.ms, abs=0.01)
    assert all(s.idle_owner_device_setup_ms == 0 and s.idle_owner_allocator_ms == 0 for s in _stats(t))


def _compile_first_call() -> dict[str, Any]:
    """A Kineto trace recorded with only CUDA activity around a torch.compile first call: no CPU ops, so Inductor's
    compilation shows only as gaps. A context-creating cudaMalloc, 4 s of compiling the forward graph, its 30
    kernels; 3 s of compiling the backward graph, its 30 kernels; nothing after."""
    events = [ev("cuda_runtime", "cudaMalloc", 0, 250_000)]
    corr = 0
    for start in (4_250_000.0, 7_300_000.0):
        for j in range(30):
            corr += 1
            t = start + j * 100
            events += launch(t, corr, t + 20, 60)
    return kineto(events)


def test_a_runtime_only_compile_call_has_its_set_up_apart_and_untraced_gaps(tmp_path):
    t = import_kineto(parse_kineto(write(tmp_path / "c.json", _compile_first_call())))
    (s,) = _stats(t)
    assert t.frame[S.WALL_MS][0] == pytest.approx(3052.98)  # from the first launch to the end of the last kernel
    assert t.frame[S.START_UNIX_NS][0] == 4_250_000 * 1000  # the window starts at the first launch
    setup = _parts(t.run.setup)
    assert setup["cudaMalloc"] == pytest.approx(250.0) and setup[UNTRACED] == pytest.approx(4000.0)
    # the backward graph's compile inside the window: host work the trace does not show, never CPU ops or sync
    assert s.idle_owner_host_idle_ms >= 3000.0 and s.idle_owner_cpu_ops_ms == 0 and s.idle_owner_sync_ms == 0
    assert s.host_before_gpu_ms == pytest.approx(0.0, abs=0.01)


def _sgd_after_set_up(iterations: int = 40) -> dict[str, Any]:
    """A step-less capture: two cudaFree calls that create the context (1 s), then ``iterations`` SGD steps of a
    small MLP on data already on the GPU: forward ops, a backward pass (autograd ops on their own thread), a foreach
    optimizer step; no copy, no sync, no DataLoader."""
    events = [ev("cuda_runtime", "cudaFree", 100, 260_000), ev("cuda_runtime", "cudaFree", 260_200, 739_800)]
    corr, t = 0, 1_000_000.0
    for _ in range(iterations):
        for op, dur in (("aten::linear", 80), ("aten::relu", 30), ("aten::linear", 80), ("aten::mse_loss", 60)):
            corr += 1
            events += [ev("cpu_op", op, t, dur), *launch(t + 10, corr, t + 20, 40)]
            t += dur + 20
        corr += 1
        bwd = ev("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", t, 200)
        bwd["tid"] = 2
        events += [bwd, *launch(t + 10, corr, t + 20, 150)]
        t += 220
        corr += 1
        events += [ev("cpu_op", "aten::_foreach_add_", t, 100), *launch(t + 10, corr, t + 20, 50)]
        t += 300
    return kineto(events)


def test_a_long_set_up_then_forty_sgd_steps_are_forty_steps(tmp_path):
    """Without ProfilerStep, after 1 s of context set-up: the 40 iterations are found (each runs a backward pass and
    an optimizer step), and the set-up is reported apart, with its cudaFree calls."""
    t = import_kineto(parse_kineto(write(tmp_path / "sgd.json", _sgd_after_set_up())))
    assert t.frame.height == 40 and any("40 iterations found" in n for n in t.notes)
    setup = _parts(t.run.setup)
    assert setup["cudaFree"] == pytest.approx(1000.0, abs=0.5)
    assert all(s.idle_owner_device_setup_ms == 0 and s.idle_owner_allocator_ms == 0 for s in _stats(t))


def test_a_capture_with_steps_reports_what_lies_outside_them(tmp_path):
    """ProfilerStep windows: the host work before the first (a CPU op, a runtime call, untraced time) and after the
    last is set-up and teardown, by name, adding up to their length."""
    events = [
        ev("cpu_op", "aten::randn", 0, 3000),
        ev("cuda_runtime", "cudaStreamCreate", 4000, 1000),
        ev("cuda_runtime", "cudaGetDeviceCount", 5500, 500),
        ev("user_annotation", "ProfilerStep#0", 10_000, 5000),
        *launch(10_100, 1, 10_200, 4000),
        ev("cpu_op", "aten::save", 16_000, 2000),
    ]
    t = import_kineto(parse_kineto(write(tmp_path / "s.json", kineto(events))))
    setup, teardown = t.run.setup, t.run.teardown
    assert setup is not None and setup.ms == pytest.approx(10.0)
    assert _parts(setup) == pytest.approx({"aten::randn": 3.0, "cudaStreamCreate": 1.0, API_CALLS: 0.5, UNTRACED: 5.5})
    assert teardown is not None and _parts(teardown) == pytest.approx({"aten::save": 2.0, UNTRACED: 1.0})


def test_a_cold_capture_keeps_its_long_first_launch_in_the_window_as_module_loading(tmp_path):
    """A step-less cold first call: the window starts at the first launch call's start, so a 343 ms first
    cudaLaunchKernel (lazy module loading inside it) is judged, as module loading, never left in set-up."""
    events = [
        ev("cuda_runtime", "cudaGetDeviceProperties", 0, 100),
        ev("cuda_runtime", "cudaLaunchKernel", 500_000, 343_000, correlation=1),
        ev("kernel", "ncclKernel_AllGather_RING_LL_Sum_bf16", 843_050, 5000, stream=7, correlation=1),
        *launch(843_100, 2, 848_100, 2000),
    ]
    t = import_kineto(parse_kineto(write(tmp_path / "cold.json", kineto(events))))
    (s,) = _stats(t)
    assert t.frame[S.START_UNIX_NS][0] == 500_000 * 1000 and t.run.setup is not None
    assert s.idle_owner_module_loading_ms == pytest.approx(343.0) and s.window_idle_ms == pytest.approx(343.1)
