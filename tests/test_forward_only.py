"""A forward-only imported trace (no backward, no optimizer step) is inference: judged and worded as such, while the
same timeline with a backward pass gets training advice (analysis/rules: Context.forward_only)."""

from __future__ import annotations

from typing import Any

from analyzer.api import analyze
from tests.kineto_fixtures import ev, write
from tests.mechanism_fixtures import _doc, fp32_gemm_trace


def _with_backward(doc: dict[str, Any], step_us: float) -> dict[str, Any]:
    """The same trace with the second half of every step inside an autograd function: a training step."""
    steps = [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    doc["traceEvents"] += [
        ev("cpu_op", "autograd::engine::evaluate_function: MmBackward0", s["ts"] + step_us / 2, step_us / 2 - 1)
        for s in steps
    ]
    return doc


def _launch_bound(steps: int = 12, step_us: float = 1000.0) -> dict[str, Any]:
    """Steps of 40 launches of 4 us kernels, each launch call 20 us: the host's dispatch owns the idle."""
    events, corr = [], 0
    for i in range(steps):
        lo = i * step_us
        events.append(ev("user_annotation", f"ProfilerStep#{i}", lo, step_us))
        events.append(ev("cpu_op", "aten::add", lo + 5, 40 * 24))
        for j in range(40):
            corr += 1
            t = lo + 10 + j * 24
            events += [
                ev("cuda_runtime", "cudaLaunchKernel", t, 20, correlation=corr),
                ev("kernel", "elementwise_kernel<4>", t + 21, 4, stream=7, correlation=corr),
            ]
    return _doc(events, "NVIDIA H100 80GB HBM3", (9, 0))


def test_launch_bound_inference_is_told_to_batch_requests_never_to_scale_a_learning_rate(tmp_path):
    r = analyze(write(tmp_path / "infer.json", _launch_bound()))
    f = r.findings[0]
    assert (r.bottleneck, f.cause) == ("batch_size", "launch_overhead"), (r.bottleneck, f.cause)
    advice = " ".join(f.recommendations)
    assert "requests" in advice and "learning rate" not in advice, advice
    train = analyze(write(tmp_path / "train.json", _with_backward(_launch_bound(), 1000.0)))
    assert train.bottleneck == "batch_size"
    assert "learning rate" in " ".join(train.findings[0].recommendations)


def test_fp32_inference_gets_autocast_around_the_forward_without_training_tools(tmp_path):
    for name, cc in (("NVIDIA A100-SXM4-40GB", (8, 0)), ("Tesla V100-SXM2-16GB", (7, 0))):
        r = analyze(write(tmp_path / "infer.json", fp32_gemm_trace(name, cc)))
        f = next(f for f in r.findings if f.cause == "fp32_math")
        advice = " ".join(f.recommendations)
        assert "around the forward" in advice and "GradScaler(" not in advice and "fused=True" not in advice, advice
        train = analyze(write(tmp_path / "train.json", _with_backward(fp32_gemm_trace(name, cc), 1000.0)))
        advice = " ".join(next(f for f in train.findings if f.cause == "fp32_math").recommendations)
        assert "forward and loss" in advice, advice
        if cc == (7, 0):
            assert "GradScaler(" in advice, advice


def test_a_loader_bound_forward_only_trace_is_worded_as_an_inference_loop(tmp_path):
    from tests.kineto_fixtures import loader_bound_trace

    r = analyze(write(tmp_path / "infer.json", loader_bound_trace(6000.0, steps=12)))
    f = next(f for f in r.findings if f.bottleneck == "data_loading")
    assert f.summary.startswith("The inference loop waits"), f.summary
    train = analyze(write(tmp_path / "train.json", _with_backward(loader_bound_trace(6000.0, steps=12), 10_000.0)))
    f = next(f for f in train.findings if f.bottleneck == "data_loading")
    assert f.summary.startswith("The training loop waits"), f.summary
