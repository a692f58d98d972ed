"""Host work before the first kernel is input preprocessing; the kernels come after it in their own step.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import analyze
from gpuanalyze.ingest.kineto import parse_kineto
from tests import mechanism_fixtures as F
from tests.conftest import SHARED
from tests.kineto_fixtures import write

EXTERNAL = SHARED / "external_traces"


# -- host work before the first kernel is input preprocessing, the kernels come after it -----------


def test_host_work_before_the_first_kernel_is_input_preprocessing(tmp_path):
    r = analyze(write(tmp_path / "t.json", F.preprocessing_trace()))
    # before: batch_size/launch_overhead, its own kernel_median_us failing < 20 us
    top = r.findings[0]
    assert (r.bottleneck, top.cause) == ("host", "input_preprocessing")
    assert top.share == pytest.approx(218 / 382, abs=0.01)
    assert "DataLoader" in " ".join(top.recommendations)
    assert all(f.bottleneck != "batch_size" for f in r.findings)
    kernels = next(f for f in r.findings if f.bottleneck == "kernels")
    assert "scaled_dot_product_attention" in " ".join(kernels.recommendations)


def test_one_window_whose_host_works_long_before_the_first_kernel_is_preprocessing(tmp_path):
    doc = F.single_step_trace()
    doc["traceEvents"] = doc["traceEvents"][1:]  # no ProfilerStep: the whole trace is one window
    lead = 30_000_000.0  # 30 s of host start-up before the first kernel
    for e in doc["traceEvents"]:
        e["ts"] = lead + e["ts"] * 0.3
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "Optimizer.step#SGD.step",
            "ts": 0,
            "dur": 5,
            "pid": 1,
            "tid": 1,
            "args": {},
        }
    )
    r = analyze(write(tmp_path / "t.json", doc))
    # before: batch_size with a projection to about half the window; then warm-up by the first kernel's position.
    # 30 s of host time before the first kernel with no start-up work in it is host work before the GPU work; no CPU
    # op covers it, so the trace does not show what it is: untraced, not (recorded) preprocessing
    assert (r.bottleneck, r.findings[0].cause) == ("host", "untraced")


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_work_running_after_its_steps_host_window_still_belongs_to_its_step():
    """Item 3, second half: on the MI300X trace every step's device work (communication included) ends after the
    step's host window; each event launched in a step is counted in that step's kernel statistics."""
    import msgspec

    from gpuanalyze.ingest import schema as S
    from gpuanalyze.ingest.kineto_import import import_kineto

    k = parse_kineto(EXTERNAL / "tracelens/mi300_resnet_act_checkpoint.json.gz")
    rows = import_kineto(k).frame.get_column(S.KERNEL_STATS).to_list()
    counted = sum(msgspec.json.decode(x, type=S.KernelStats).kernel_count for x in rows if x)
    assert counted == k.gpu.start.size
    last_host_end = max(end for _, _, end in k.steps)
    assert float(k.gpu.end.max()) > last_host_end  # the GPU runs behind the host


def test_check_its_gpu_only_with_the_samplers_readings():
    from analyzer.analysis.host_facts import HostFacts
    from analyzer.analysis.rules.sync import _device_check

    class Ctx:
        gpu = True
        host = HostFacts(cores_available=4, cores_free=4, gpu_sm_clock_mhz=1110.0, gpu_temp_c=87.0)

    text = _device_check(Ctx())  # type: ignore[arg-type]
    assert "check that node's GPU" in text and "1110 MHz" in text and "87 C" in text
