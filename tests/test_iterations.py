"""Iterations of step-less traces (ingest/iterations.py): a loop is found from its repeated top-level ops that
exchange something with the host; a model's repeated layers in one forward pass are not a loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from analyzer.api import analyze
from gpuanalyze.ingest.kineto.parse import parse_kineto
from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.iterations import detect_iterations
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from tests.conftest import SHARED, shared_kineto
from tests.kineto_fixtures import ev, write

A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 40 * 10**9, "computeMajor": 8, "computeMinor": 0}]


def _doc(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": A100}


def _iteration(lo: float, c: int, *, extra: bool = False) -> list[dict[str, Any]]:
    """One 10 ms training iteration: a host-to-device batch copy, forward (2 linears), loss, backward, optimizer."""
    out = [
        ev("cpu_op", "aten::to", lo, 200),
        ev("cuda_runtime", "cudaMemcpyAsync", lo + 50, 20, correlation=c + 1),
        ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", lo + 80, 100, stream=7, correlation=c + 1),
    ]
    t = lo + 300
    for i, name in enumerate(("aten::linear", "aten::linear", "aten::cross_entropy_loss", "aten::ones_like")):
        out += [
            ev("cpu_op", name, t, 100),
            ev("cuda_runtime", "cudaLaunchKernel", t + 20, 10, correlation=c + 10 + i),
            ev("kernel", "ampere_bf16_s16816gemm", t + 40, 1500, stream=7, correlation=c + 10 + i),
        ]
        t += 1600
    if extra:  # an occasional .item() for logging: the loop is still the loop
        out.append(ev("cpu_op", "aten::item", t, 50))
    out.append(ev("cpu_op", "Optimizer.step#AdamW.step", t + 100, 800))
    return out


def test_a_step_less_loop_is_cut_into_its_iterations(tmp_path):
    events = [ev("cpu_op", "aten::empty", 0, 10), ev("cpu_op", "aten::uniform_", 20, 3000)]  # set-up first
    for i in range(8):
        events += _iteration(5000 + i * 10_000.0, 100 * i, extra=i % 3 == 0)
    trace = import_kineto(parse_kineto(write(tmp_path / "loop.json", _doc(events))))
    assert trace.frame.height == 8
    assert any("8 iterations found" in n and "aten::to" in n for n in trace.notes)
    walls = trace.frame.get_column("wall_ms").to_list()
    assert all(abs(w - 10.0) < 0.01 for w in walls[:-1])  # anchor to anchor: 10 ms each


def test_one_forward_pass_of_repeated_layers_is_one_window(tmp_path):
    """36 identical layers, then a head and sampling no layer has, with one D2H copy at the end: one window."""
    events, t, c = [ev("cpu_op", "aten::embedding", 0, 100)], 200.0, 0
    for _ in range(36):
        for name in ("aten::rms_norm", "aten::linear", "aten::scaled_dot_product_attention", "aten::linear"):
            c += 1
            events += [
                ev("cpu_op", name, t, 50),
                ev("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=c),
                ev("kernel", "ampere_bf16_s16816gemm", t + 20, 100, stream=7, correlation=c),
            ]
            t += 120
    events += [
        ev("cpu_op", "aten::lm_head_linear", t, 50),
        ev("cpu_op", "aten::argmax", t + 60, 20),
        ev("cuda_runtime", "cudaMemcpyAsync", t + 90, 10, correlation=c + 1),
        ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t + 100, 5, stream=7, correlation=c + 1),
    ]
    trace = import_kineto(parse_kineto(write(tmp_path / "fwd.json", _doc(events))))
    assert trace.frame.height == 1
    assert any("from its first device work to its last is analysed as one step" in n for n in trace.notes)


def test_layers_that_exchange_nothing_with_the_host_are_not_iterations_even_at_the_end(tmp_path):
    """The same block repeated to the end of the capture, but no copy, sync or loader fetch in any repetition:
    not a loop the host drives, so not cut."""
    events, t = [], 0.0
    for c in range(12):
        events += [
            ev("cpu_op", "aten::linear", t, 50),
            ev("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=c + 1),
            ev("kernel", "ampere_bf16_s16816gemm", t + 20, 100, stream=7, correlation=c + 1),
            ev("cpu_op", "aten::gelu", t + 60, 30),
        ]
        t += 200
    assert import_kineto(parse_kineto(write(tmp_path / "blocks.json", _doc(events)))).frame.height == 1


def test_two_repetitions_are_not_a_loop(tmp_path):
    events = [e for i in range(2) for e in _iteration(i * 10_000.0, 100 * i)]
    assert import_kineto(parse_kineto(write(tmp_path / "two.json", _doc(events)))).frame.height == 1


def test_iterations_are_judged_like_steps(tmp_path):
    events = [e for i in range(12) for e in _iteration(i * 10_000.0, 100 * i)]
    r = analyze(write(tmp_path / "loop.json", _doc(events)))
    assert r.metrics.accounting.rows == 12
    assert r.bottleneck != "unknown" or "warm" not in r.confidence.reason


def test_real_step_less_traces_find_the_loop_their_kernels_repeat():
    """The RTX 2080 Ti ResNet trace records 30 training iterations and no ProfilerStep annotation."""
    path = SHARED / "external_traces" / "param" / "rtx2080ti_resnet_kineto.json.gz"
    if not path.exists():
        pytest.skip("../shared is not here")
    trace = shared_kineto(path)
    assert trace.frame.height == 30
    from gpuanalyze.ingest.trace import schema as S

    stats = [S.decode_kernel_stats(x) for x in trace.frame.get_column(S.KERNEL_STATS).to_list()]
    assert all(st is not None and st.kernel_count > 0 for st in stats)  # every iteration runs the model


def test_ops_after_the_last_device_work_are_left_out_where_they_are_as_if_cut_away():
    """``before`` reads only the ops that start before it (the teardown after the last device work) without copying
    the ops: the same iterations as from a copy without the later ops, though a later thread spans longer and the
    loop thread's own teardown ops would end the capture outside its loop."""
    names = ("aten::to", "aten::linear", "aten::mse_loss", "Optimizer.step#SGD.step", "aten::save", "aten::close")
    rows = [(i * 10.0 + j, i * 10.0 + j + 0.5, 7, j) for i in range(8) for j in range(4)]  # the loop thread, 8 x 4 ops
    rows += [(90.0 + j, 90.5 + j, 7, 4 + j % 2) for j in range(6)]  # its teardown: ops no iteration has
    rows += [(95.0, 400.0, 9, 5)]  # a thread that starts after the device's last work and spans longest
    rows.sort(key=lambda r: (r[2], r[0]))
    ops = HostOps(*(np.array([r[k] for r in rows], dtype=d) for k, d in enumerate(HostOps.DTYPES)), names)
    exchanges = np.array([i * 10.0 + 0.1 for i in range(8)])  # each iteration's batch copy
    early = ops.start < 80.0
    cut = HostOps(ops.start[early], ops.end[early], ops.tid[early], ops.name[early], names)
    got, want = detect_iterations(ops, exchanges, 80.0, before=80.0), detect_iterations(cut, exchanges, 80.0)
    assert want is not None and len(want.windows) == 8 and want.anchor == "aten::to"
    assert got == want
    assert detect_iterations(ops, exchanges, 80.0) is None  # read whole, the capture ends outside the loop
