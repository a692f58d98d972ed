"""Precision advice fits the GPU generation: the compute capability read per device, or from the name.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import analyze
from gpuanalyze.ingest.kineto.parse import parse_kineto
from tests import mechanism_fixtures as F
from tests.conftest import SHARED, shared_report
from tests.kineto_fixtures import write

EXTERNAL = SHARED / "external_traces"


def _advice(report) -> str:
    return " ".join(r for f in report.findings for r in f.recommendations)


# -- precision advice that fits the GPU generation -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cc", "dtype", "absent"),
    [
        ("Tesla V100-SXM2-32GB", (7, 0), "torch.float16", ("bfloat16", "allow_tf32", "FP8")),
        ("NVIDIA GeForce RTX 2080 Ti", (7, 5), "torch.float16", ("bfloat16", "allow_tf32", "FP8")),
        ("NVIDIA A100-SXM4-40GB", (8, 0), "torch.bfloat16", ("FP8", "GradScaler")),
        ("NVIDIA H100 80GB HBM3", (9, 0), "torch.bfloat16", ("GradScaler",)),
    ],
)
def test_precision_advice_follows_the_compute_capability(tmp_path, name, cc, dtype, absent):
    path = write(tmp_path / "t.json", F.fp32_gemm_trace(name, cc))
    r = analyze(path)
    kernels = next(f for f in r.findings if f.bottleneck == "kernels")
    assert kernels.cause == "fp32_math"
    advice = " ".join(kernels.recommendations)
    # the dtype the generation's tensor cores run, and none they do not
    assert dtype in advice, advice
    assert all(a not in advice for a in absent), advice
    assert dict(kernels.projection.params)["precision"] == dtype.removeprefix("torch.")
    if cc < (8, 0):
        assert "GradScaler" in advice
    if cc >= (9, 0):
        assert "FP8" in advice and "Transformer Engine" in advice
    assert r.run.compute_capabilities == (f"{cc[0]}.{cc[1]}",)


def test_compute_capability_is_read_per_device(tmp_path):
    k = parse_kineto(write(tmp_path / "t.json", F.fp32_gemm_trace("NVIDIA GeForce RTX 2080 Ti", (7, 5), devices=2)))
    assert k.compute_capabilities == ("7.5", "7.5")


def test_capability_from_the_name_when_the_trace_lacks_it_and_never_for_amd():
    from analyzer.machine.tensor_cores import capability, tensor_cores

    cc = capability("Tesla V100-SXM2-16GB", None)
    assert cc is not None and cc[0] == (7, 0) and "cuda-gpus" in cc[1]
    assert capability("AMD Instinct MI300X", ("9.4",)) is None
    assert tensor_cores((7, 5)).bf16 is False and tensor_cores((8, 6)).tf32 is True
    assert tensor_cores((8, 9)).fp8 and not tensor_cores((8, 0)).fp8


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_v100_trace_gets_fp16_autocast_with_a_grad_scaler():
    r = shared_report(EXTERNAL / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    advice = _advice(r)
    assert "torch.float16" in advice and "GradScaler" in advice
    assert "bfloat16" not in advice and "allow_tf32" not in advice
    assert r.run.compute_capabilities is not None and set(r.run.compute_capabilities) == {"7.0"}
