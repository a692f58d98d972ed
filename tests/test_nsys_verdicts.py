"""Verdicts read from what an Nsight Systems capture's timeline shows (synthetic exports to the documented schema):
a capture that holds the process's CUDA initialisation is start-up until the first GPU work; one without GPU rows
says what it lacks and how to capture it."""

import sqlite3

from analyzer.api import analyze
from gpuanalyze.ingest.startup_work import INIT_TO_FIRST_WORK, StartupSink
from tests.nsys_fixtures import MS, Export, build_export, global_pid

PID = 100
TID = global_pid(PID) | PID


def _tiny_work_after(tmp_path, first_call: str):
    """One window: a runtime call ``first_call`` at 1 ms, nothing recorded on the host for 100 ms, then a 2 us
    kernel (the fixture's launch at 101 ms) and its sync: ``torch.zeros(16).sum()`` in a fresh process."""
    path = build_export(tmp_path / "r.sqlite", Export(steps=1, step_name=None, tables=("kernel", "runtime")))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + 2000")
    conn.execute("INSERT INTO StringIds VALUES (9001, ?)", (first_call,))
    conn.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, 90001, 9001, 0, NULL)", (MS, MS + 9000, TID)
    )
    conn.commit()
    conn.close()
    return path


def test_cuda_initialisation_until_the_first_gpu_work_is_start_up(tmp_path):
    r = analyze(_tiny_work_after(tmp_path, "cudaGetDeviceProperties_v12000"))
    assert r.bottleneck == "unknown"
    assert "start-up work for 25% or more" in r.confidence.reason
    assert f"{INIT_TO_FIRST_WORK} (device set-up)" in r.confidence.reason
    assert "the GPU's own work in it: 2 us (elementwise 100%)" in r.confidence.reason  # what little the GPU ran
    assert "--capture-range=cudaProfilerApi" in r.confidence.reason  # how to capture the steady state with nsys


def test_host_time_before_the_first_kernel_without_cuda_initialisation_is_not_start_up(tmp_path):
    # the same timeline after a call a running process makes any time: the capture began mid-run, so the host
    # time before the first kernel is host work in the loop ahead of the GPU, not start-up; with one kernel there
    # are too few idle intervals to say who holds the idle
    r = analyze(_tiny_work_after(tmp_path, "cudaStreamIsCapturing_v10000"))
    assert r.bottleneck == "unknown" and "start-up work" not in r.confidence.reason
    assert "too little device work" in r.confidence.reason


def test_start_up_calls_keep_their_names_inside_the_initialisation():
    sink = StartupSink()
    sink.call("cuModuleGetLoadingMode", 0.0, 1.0)
    sink.call("cudaMalloc", 50.0, 30.0)  # the first allocation creates the context: still named
    sink.call("cudaGetDeviceProperties_v12000", 200.0, 1.0)  # not the first: no second interval
    work = sink.finish(first_work=300.0)
    names = [work.names[i] for i in work.name]
    spans = sorted((s, e) for s, e, n in zip(work.start, work.end, names, strict=True) if n == INIT_TO_FIRST_WORK)
    assert spans == [(1.0, 50.0), (80.0, 200.0), (201.0, 300.0)]
    assert "cudaMalloc" in names
    # no device work in the trace, or initialisation after it: nothing added
    late = StartupSink()
    late.call("cudaGetDeviceProperties", 10.0, 1.0)
    assert INIT_TO_FIRST_WORK not in late.finish(first_work=5.0).names
    assert INIT_TO_FIRST_WORK not in late.finish(first_work=None).names


def test_a_capture_without_gpu_rows_says_what_is_missing_and_how_to_capture(tmp_path):
    path = build_export(tmp_path / "r.sqlite", Export(tables=("runtime",), step_name=None))
    r = analyze(path)
    assert r.bottleneck == "unknown" and not r.findings
    reason = r.confidence.reason
    assert reason.startswith("no GPU activity recorded: the export has no CUPTI_ACTIVITY_KIND_KERNEL")
    assert "cudaMemcpyAsync" not in reason  # the fixture has no copy table: its runtime calls are launches, syncs
    assert "runtime calls (cudaLaunchKernel, cudaStreamSynchronize" in reason
    assert reason.endswith("capture with nsys profile -t cuda,nvtx,osrt")
    assert not any("CPU-only" in n for n in r.notes)
    assert r.health == ()  # no health test is read from a capture that lost its GPU work (no "cause unknown" panel)


def test_fp32_gemms_on_a_hopper_capture_get_its_precision_advice(tmp_path):
    # the GPU and its compute capability from TARGET_INFO_GPU: the advice is the generation's
    r = analyze(build_export(tmp_path / "r.sqlite", Export(steps=12, kernel_name="volta_sgemm_128x64_nn")))
    assert (r.bottleneck, r.findings[0].cause) == ("kernels", "fp32_math")
    assert r.run.gpu_name == "NVIDIA H100 80GB HBM3" and r.run.compute_capabilities == ("9.0",)
    advice = " ".join(r.findings[0].recommendations)
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in advice and "Hopper" in advice
