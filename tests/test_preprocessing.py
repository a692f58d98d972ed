"""Host work before the first kernel is input preprocessing; the kernels come after it in their own step.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import analyze
from gpuanalyze.ingest.kineto.parse import parse_kineto
from tests import mechanism_fixtures as F
from tests.conftest import SHARED, shared_kineto, shared_timeline
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


def test_host_time_long_before_the_first_kernel_of_a_step_less_trace_is_set_up(tmp_path):
    """30 s of host time before the first GPU work of a trace without steps: the process starting (imports, building
    the dataset), reported as set-up and never judged as step work (issue 36, item 1: it was read as input
    preprocessing, "move it into DataLoader workers")."""
    from gpuanalyze.ingest.timeline.step_rows import import_kineto

    doc = F.single_step_trace()
    doc["traceEvents"] = doc["traceEvents"][1:]  # no ProfilerStep
    lead = 30_000_000.0  # 30 s of host start-up before the first kernel
    for e in doc["traceEvents"]:
        e["ts"] = lead + e["ts"] * 0.3
    doc["traceEvents"].append(
        {"ph": "X", "cat": "cpu_op", "name": "Optimizer.step#SGD.step", "ts": 0, "dur": 5, "pid": 1, "tid": 1}
    )
    path = write(tmp_path / "t.json", doc)
    setup = import_kineto(parse_kineto(path)).run.setup
    assert setup is not None and setup.ms >= 30_000
    assert max(setup.parts, key=lambda p: p.ms).name == "untraced"
    r = analyze(path)
    assert not r.findings or r.findings[0].cause != "input_preprocessing"


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_work_running_after_its_steps_host_window_still_belongs_to_its_step():
    """Item 3, second half: on the MI300X trace every step's device work (communication included) ends after the
    step's host window; each event launched in a step is counted in that step's kernel statistics."""
    import msgspec

    from gpuanalyze.ingest.trace import schema as S

    path = EXTERNAL / "tracelens/mi300_resnet_act_checkpoint.json.gz"
    k = shared_timeline(path)
    rows = shared_kineto(path).frame.get_column(S.KERNEL_STATS).to_list()
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
