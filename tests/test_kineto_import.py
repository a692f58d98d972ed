"""What an imported step measures: TensorBoard's data wait, backward from autograd ops, idle that adds
up to HTA's, non-CUDA accelerators, and gpuanalyze's own export annotations."""

import gzip
import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from gpuanalyze.ingest.kineto.parse import load_kineto
from gpuanalyze.ingest.timeline.capture_windows import windows_of
from gpuanalyze.ingest.timeline.intervals import merge
from gpuanalyze.ingest.timeline.kernel_stats import StepKernels
from gpuanalyze.ingest.timeline.step_rows import hta_gpu_mask
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import SHARED, shared_kineto, shared_timeline
from tests.kineto_fixtures import ev, two_step_trace, write

TRACES = SHARED / "external_traces"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/external_traces is absent")
runner = CliRunner()
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _col(trace, column):
    return trace.frame.get_column(column).to_list()


def test_data_wait_counts_only_loader_time_without_device_or_runtime_activity(tmp_path):
    """TensorBoard plugin: each instant goes to the first of kernel, memcpy, memset, runtime, DataLoader."""
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 1000),
        ev("user_annotation", LOADER, 0, 400),  # 400 us of loader time...
        ev("kernel", "volta_sgemm_128x64_nn", 100, 100, stream=7, correlation=1),  # ...100 under a kernel
        ev("cuda_runtime", "cudaLaunchKernel", 250, 50, correlation=1),  # ...50 under a runtime call
        ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 350, 100, stream=7),  # ...50 under a copy
        ev("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__iter__", 500, 100),  # not __next__
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert _col(trace, S.DATA_WAIT_MS) == [pytest.approx(0.2)]


def test_data_wait_is_clipped_to_its_step(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 1000),
        ev("user_annotation", "ProfilerStep#1", 1000, 1000),
        ev("user_annotation", LOADER, 900, 300),
        ev("cpu_op", "aten::mm", 0, 10),
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert _col(trace, S.DATA_WAIT_MS) == [pytest.approx(0.1), pytest.approx(0.2)]


def test_work_starting_in_a_steps_last_moments_belongs_to_the_next_step(tmp_path):
    """The recorder's step timer stops a few us after the next step began (an export of a recorded
    trace): the optimizer that starts in that overlap is the next step's, counted once."""
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 1012),
        ev("user_annotation", "ProfilerStep#1", 1000, 1000),
        ev("cpu_op", "Optimizer.step#SGD.step", 1000, 100),
        ev("cpu_op", "aten::mm", 0, 10),
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert _col(trace, S.OPTIMIZER_MS) == [0.0, pytest.approx(0.1)]
    assert _col(trace, S.WALL_MS) == [pytest.approx(1.012), pytest.approx(1.0)]


def test_an_interleaved_stream_of_steps_cuts_no_window(tmp_path):
    """Steps of another thread starting 20 us after each of ours are not 'the next step': our
    windows keep their data wait."""
    events = [ev("cpu_op", "aten::mm", 0, 10)]
    for n in range(3):
        t0 = 10_000 * n
        events += [
            ev("user_annotation", f"ProfilerStep#{n}", t0, 10_000),
            dict(ev("user_annotation", f"ProfilerStep#{n}", t0 + 20, 10_000), tid=2),
            ev("user_annotation", LOADER, t0 + 10, 5000),
        ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert all(v == pytest.approx(5.0) for v in _col(trace, S.DATA_WAIT_MS))


@needs_traces
def test_resnet_data_wait_matches_the_tensorboard_definition():
    """rtx2080ti ResNet: DataLoader time minus kernel/memcpy/memset/runtime time, computed here from the
    raw JSON with plain interval arithmetic (the importer used to report the loader's whole 8205 ms)."""
    path = TRACES / "param/rtx2080ti_resnet_kineto.json.gz"
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]

    def spans(pred):
        return sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events if pred(e))

    windows = windows_of(shared_timeline(path))[0]  # the 30 iterations found in its top-level ops
    lo, hi = windows[0][1], windows[-1][2]

    def clip(s):
        return [(max(a, lo), min(b, hi)) for a, b in s if b > lo and a < hi]

    loader = clip(spans(lambda e: e["name"].startswith("enumerate(DataLoader)#") and e["name"].endswith(".__next__")))
    busy = clip(spans(lambda e: e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")))
    # sweep: time inside a loader span and inside no busy span
    points = sorted({p for s in loader + busy for p in s})
    expected = 0.0
    li = np.array(loader)
    bi = np.array(busy)
    for a, b in itertools.pairwise(points):
        mid = (a + b) / 2
        in_loader = ((li[:, 0] <= mid) & (mid < li[:, 1])).any()
        if in_loader and not ((bi[:, 0] <= mid) & (mid < bi[:, 1])).any():
            expected += b - a
    trace = shared_kineto(path)
    assert sum(_col(trace, S.DATA_WAIT_MS)) == pytest.approx(expected / 1e3, rel=1e-9)
    assert sum(_col(trace, S.DATA_WAIT_MS)) < 0.85 * 8204.993  # the loader's wall time, which the old importer reported


def test_backward_ops_named_xxx_backward_count_as_backward(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 1000),
        ev("cpu_op", "ConvolutionBackward0", 100, 200),
        ev("cpu_op", "AddmmBackward0", 250, 100),  # overlaps: counted once
        ev("cpu_op", "aten::convolution_backward", 120, 50),  # an aten op, not an autograd node
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert _col(trace, S.BACKWARD_MS) == [pytest.approx(0.25)]


def test_backward_is_unknown_without_any_backward_annotation(tmp_path):
    events = [ev("user_annotation", "ProfilerStep#0", 0, 1000), ev("cpu_op", "aten::mm", 10, 100)]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert _col(trace, S.BACKWARD_MS) == [None]
    # a step without backward in a trace that has some: 0, not unknown
    events.append(ev("user_annotation", "ProfilerStep#1", 1000, 1000))
    events.append(ev("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 1100, 300))
    trace = load_kineto(write(tmp_path / "t2.json", {"traceEvents": events}))
    assert _col(trace, S.BACKWARD_MS) == [0.0, pytest.approx(0.3)]


@needs_traces
def test_backward_on_real_traces():
    # trace_compare/test has XxxBackward ops and no evaluate_function wrapper; base has no backward at all
    assert sum(v or 0 for v in _col(load_kineto(TRACES / "hta/trace_compare/test/test.json.gz"), S.BACKWARD_MS)) > 0
    assert set(_col(load_kineto(TRACES / "hta/trace_compare/base/base.json.gz"), S.BACKWARD_MS)) == {None}


def _idle_ms(trace):
    stats = [S.decode_kernel_stats(t) for t in _col(trace, S.KERNEL_STATS)]
    return [s.idle_host_wait_ms + s.idle_launch_ms + s.idle_other_ms for s in stats]


def test_the_gap_between_steps_counts_as_idle_of_the_next_step(tmp_path):
    # two_step_trace: step 7's kernels end at 750, step 8's only kernel starts at 1200 (launched at 1100)
    trace = load_kineto(write(tmp_path / "t.json", two_step_trace()))
    idle = _idle_ms(trace)
    assert idle == [pytest.approx(0.05), pytest.approx(0.45)]
    s1 = S.decode_kernel_stats(_col(trace, S.KERNEL_STATS)[1])
    assert s1.idle_host_wait_ms == pytest.approx(0.45)  # its launch (1100) came after the GPU went idle (750)
    # the steps' idle adds up to the trace's: span 400..1500 minus 600 busy
    assert sum(idle) == pytest.approx((1500 - 400 - 600) / 1e3)


# HTA 0.5.0 idle % (external_traces/README.md); h100, b200: one step, all kernels inside it; rtx2080ti: 30
# iterations found in its top-level ops
HTA_IDLE = {
    "hta/nccl_parser_config/nccl_data.json.gz": 77.78,
    "hta/timeline_analysis/sampled_rank-0.json.gz": 53.56,
    "hta/trace_filter/sampled_rank-1.json.gz": 54.72,
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": 2.63,
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": 99.49,
    "tracelens/h100_owlv2.json.gz": 47.92,
    "tracelens/b200_eager_trace.json.gz": 87.20,
    "tracelens/mi300_resnet_act_checkpoint.json.gz": 2.73,
    "param/rtx2080ti_resnet_kineto.json.gz": 67.40,
}


@needs_traces
@pytest.mark.parametrize("rel", sorted(HTA_IDLE))
def test_idle_split_adds_up_to_htas_idle_time(rel):
    k = shared_timeline(TRACES / rel)
    trace = shared_kineto(TRACES / rel)
    idle = _idle_ms(trace)
    # exact: every kernel is in a step here, so the steps' idle is the whole GPU timeline's idle
    kernels = StepKernels(k)
    windows = windows_of(k)[0]
    if sum(kernels.indices(lo, hi).size for _, lo, hi in windows) < k.gpu.start.size:
        # a step-less trace cut into its iterations: what ran before the first is in no step; the whole-trace
        # breakdown is still HTA's
        assert not k.steps and len(windows) > 1
        assert trace.run.gpu_summary is not None
        assert trace.run.gpu_summary.idle_pct == pytest.approx(HTA_IDLE[rel], abs=1.0)
        return
    s, e = merge(k.gpu.start, k.gpu.end)
    assert sum(idle) == pytest.approx((e[-1] - s[0] - (e - s).sum()) / 1e3, rel=1e-9)
    # against HTA: the steps HTA analyses (it drops the last, partial step, except on this MI300X trace,
    # where it takes the last step's start from the GPU-side annotation), over HTA's span
    kept = idle if len(idle) == 1 or "mi300" in rel else idle[:-1]
    mask = np.ones(k.gpu.start.size, bool) if "mi300" in rel else hta_gpu_mask(k)
    span = (k.gpu.end[mask].max() - k.gpu.start[mask].min()) / 1e3
    assert 100 * sum(kept) / span == pytest.approx(HTA_IDLE[rel], abs=1.0)


def test_mtia_device_events_are_not_cpu_only(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 1000),
        ev("mtia_runtime", "mtiaLaunchKernel", 10, 5, correlation=1),
        ev("mtia_ccp_events", "fused_mm_relu", 100, 500, stream=1, correlation=1),
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert trace.run.device == "mtia"
    assert _col(trace, S.GPU_BUSY_MS) == [pytest.approx(0.5)]
    assert not any("CPU-only" in n for n in trace.notes)
    stats = S.decode_kernel_stats(_col(trace, S.KERNEL_STATS)[0])
    assert stats.kernel_count == 1 and stats.idle_host_wait_ms == 0


@pytest.mark.parametrize(
    ("device_cat", "runtime_cat", "device"), [("hpu_op", "cuda_runtime", "hpu"), ("kernel", "xpu_runtime", "xpu")]
)
def test_other_accelerators(tmp_path, device_cat, runtime_cat, device):
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 1000),
        ev(runtime_cat, "launch", 10, 5, correlation=1),
        ev(device_cat, "some_op", 100, 300, correlation=1),
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    assert trace.run.device == device and _col(trace, S.GPU_BUSY_MS) == [pytest.approx(0.3)]


def test_gpuanalyze_export_annotations_give_the_phase_times(tmp_path):
    """The convention `gpuanalyze export` writes: user_annotation slices gpuanalyze:<part> in each step."""
    events = []
    want = {
        3: {S.DATA_WAIT_MS: 1.5, S.FORWARD_MS: 4.25, S.BACKWARD_MS: 8.0, S.OPTIMIZER_MS: 1.0, S.SYNC_MS: 0.5},
        4: {S.DATA_WAIT_MS: 0.25, S.FORWARD_MS: 4.0, S.BACKWARD_MS: 7.5, S.OPTIMIZER_MS: 1.25, S.SYNC_MS: 0.0},
    }
    t = 0.0
    for step, parts in want.items():
        events.append(ev("user_annotation", f"ProfilerStep#{step}", t, 20_000))
        at = t
        for part, ms in parts.items():
            events.append(ev("user_annotation", S.EXPORT_PHASE_NAMES[part], at, ms * 1e3))
            at += ms * 1e3
        events.append(ev("user_annotation", S.EXPORT_PHASE_NAMES[S.OTHER_MS], at, 20_000 - (at - t)))
        t += 20_000
    trace = load_kineto(write(tmp_path / "export.json", {"traceEvents": events}))
    assert _col(trace, S.STEP) == [3, 4] and _col(trace, S.WALL_MS) == [20.0, 20.0]
    for row, (step, parts) in zip(trace.frame.iter_rows(named=True), want.items(), strict=True):
        for part, ms in parts.items():
            assert row[part] == pytest.approx(ms), (step, part)
        assert row[S.OTHER_MS] == pytest.approx(20.0 - sum(parts.values()))
        assert row[S.H2D_MS] is None and row[S.GPU_BUSY_MS] is None
    assert any("export annotations" in n for n in trace.notes)


def test_a_part_the_export_does_not_annotate_stays_derived(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#0", 0, 10_000),
        ev("user_annotation", "gpuanalyze:forward", 0, 4_000),
        ev("cpu_op", "Optimizer.step#SGD.step", 5_000, 1_000),
    ]
    trace = load_kineto(write(tmp_path / "t.json", {"traceEvents": events}))
    row = trace.frame.row(0, named=True)
    assert row[S.FORWARD_MS] == 4.0 and row[S.OPTIMIZER_MS] == 1.0
    assert row[S.OTHER_MS] == pytest.approx(5.0) and row[S.BACKWARD_MS] is None


def test_imported_gpu_block_of_a_directory_covers_every_rank(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for rank, gap in ((0, 100), (1, 700)):  # rank 1's GPU idles much more
        events = [ev("user_annotation", "ProfilerStep#0", 0, 2000)]
        events += [
            ev("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
            ev("kernel", "volta_sgemm_128x64_nn", 100, 200, stream=7, correlation=1),
            ev("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=2),
            ev("kernel", "volta_sgemm_128x64_nn", 300 + gap, 200, stream=7, correlation=2),
        ]
        write(run / f"r{rank}.json", {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}})
    one = {r: load_kineto(run / f"r{r}.json").run.gpu_summary.idle_pct for r in (0, 1)}
    data = json.loads(runner.invoke(app, [str(run), "--json"]).output)
    assert data["gpu"]["idle_pct"] == pytest.approx((one[0] + one[1]) / 2, abs=0.01)
    assert data["gpu"]["idle_pct"] != pytest.approx(one[0], abs=1)
