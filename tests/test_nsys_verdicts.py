"""Verdicts read from what an Nsight Systems capture's timeline shows (synthetic exports to the documented schema):
a capture that holds the process's CUDA initialisation is start-up until the first GPU work; one without GPU rows
says what it lacks and how to capture it."""

import sqlite3

import pytest

from analyzer.api import analyze
from gpuanalyze.ingest.nsys.load import load_nsys_ranks
from gpuanalyze.ingest.timeline.capture_windows import API_CALLS, UNTRACED
from gpuanalyze.ingest.timeline.startup_work import INIT_TO_FIRST_WORK, StartupSink
from gpuanalyze.ingest.trace import schema as S
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


@pytest.mark.parametrize("first_call", ["cudaGetDeviceProperties_v12000", "cudaStreamIsCapturing_v10000"])
def test_the_time_before_the_first_gpu_work_is_set_up_never_a_step(tmp_path, first_call):
    """A fresh process (CUDA initialisation at 1 ms) or a capture begun mid-run (a call a process makes any time):
    either way the 100 ms before the first launch is set-up, reported with its parts, and the judged window runs
    from that launch to the end of the last GPU work (docs/idle-owners.md, "Windows")."""
    path = _tiny_work_after(tmp_path, first_call)
    (t,) = load_nsys_ranks(path)
    assert t.frame.height == 1 and t.frame[S.WALL_MS][0] == pytest.approx(0.102, abs=1e-3)
    setup = t.run.setup
    assert setup is not None and setup.ms == pytest.approx(100.0)  # from the first event (no session recorded)
    parts = {p.name: p.ms for p in setup.parts}
    assert parts[UNTRACED] == pytest.approx(100.0 - 0.009)
    assert parts.get(first_call.rsplit("_v", 1)[0], parts.get(API_CALLS)) == pytest.approx(0.009, abs=1e-6)
    assert t.run.teardown is not None and t.run.teardown.ms > 5.8  # the sync after the kernel, then the session's end
    r = analyze(path)
    assert r.bottleneck != "host"  # never "input preprocessing" from the process's start


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
    # each 9 ms step: 5.2 ms of GPU work, 0.5 ms in a sync and 3.2 ms of host work the capture does not record (no
    # call covers it: 84% of the idle); the fp32 GEMMs are a finding of their own beside it
    assert (r.bottleneck, r.findings[0].cause) == ("host", "untraced")
    fp32 = next(f for f in r.findings if (f.bottleneck, f.cause) == ("kernels", "fp32_math"))
    assert r.run.gpu_name == "NVIDIA H100 80GB HBM3" and r.run.compute_capabilities == ("9.0",)
    advice = " ".join(fp32.recommendations)
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in advice and "Hopper" in advice
