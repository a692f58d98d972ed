"""`compare BEFORE AFTER` recognises each kind of fix AFTER applied and checks BEFORE's projection
for it: host syncs, a loader change, logging frequency, rank balance, and on imported Kineto traces
the DataLoader iterator class (workers) and a move to tensor cores; with the projection's range,
`inside` says whether the measurement held."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from analyzer.api import load_compared
from analyzer.planning.compare import Comparison, Loaded, compare
from analyzer.planning.cost import CostInputs
from analyzer.planning.projection_check import projection_checks
from analyzer.render.output import dumps
from analyzer.render.planning import compare_struct, render_compare
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import SHARED, make_row, write_trace
from tests.kineto_fixtures import ev, write

SGEMM = "volta_sgemm_128x64_nn"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def _trace(path: Path, *, n: int = 40, lead: float | None = None, **row) -> Path:
    rows = []
    for i in range(n):
        r = make_row(i, **row)
        if lead is not None:
            r[S.LEAD_MS] = lead
        rows.append(r)
    return write_trace(path, rows, run={"cpu_count": 4}, end=EndInfo(status="ok", steps=n))


def _ranks(path: Path, extra: dict[int, float], wall: float) -> Path:
    """A DDP run: rank r is ``extra[r]`` ms slower in forward; every step lasts ``wall`` ms."""
    path.mkdir()
    for rank, more in extra.items():
        rows = []
        for i in range(20):
            parts = {"data": 1.0, "fwd": 5.0 + more, "bwd": 8.0, "opt": 1.0}
            rows.append(make_row(i, rank=rank, wall=wall, sync=wall - sum(parts.values()), **parts))
        write_trace(path / f"trace.rank{rank}.arrow", rows, run={"world_size": len(extra), "rank": rank})
    return path


def _kineto(path: Path, *, loader: str, load_us: float, kernel: str, kernel_us: float, steps: int = 12) -> Path:
    """Steps of a DataLoader fetch (iterator class ``loader``) then one kernel and an optimizer step."""
    step_us = load_us + kernel_us + 500
    events = []
    for i in range(steps):
        t0 = i * step_us
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", t0, step_us),
            ev("user_annotation", f"enumerate(DataLoader)#{loader}.__next__", t0, load_us),
            ev("cuda_runtime", "cudaLaunchKernel", t0 + load_us + 10, 10, correlation=i + 1),
            ev("kernel", kernel, t0 + load_us + 50, kernel_us, stream=7, correlation=i + 1),
            ev("cpu_op", "Optimizer.step#SGD.step", t0 + load_us + 60, 50),
        ]
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85 * 10**9}]
    return write(path, {"schemaVersion": 1, "traceEvents": events, "deviceProperties": props})


def _checks(before: Path, after: Path):
    return compare([load_compared(before, CostInputs(), None), load_compared(after, CostInputs(), None)]).checks


def test_fewer_host_syncs_test_the_sync_findings_projection(tmp_path):
    (check,) = _checks(
        _trace(tmp_path / "a.arrow", wall=30.0, sync=12.0), _trace(tmp_path / "b.arrow", wall=18.5, sync=0.5)
    )
    assert (check.kind, check.bottleneck, check.recommended) == ("host_syncs", "sync", True)
    assert check.projected_ms == pytest.approx(18.0) and check.measured_ms == pytest.approx(18.5)


def test_a_faster_loader_with_the_same_workers_is_a_loader_check(tmp_path):
    before = _trace(tmp_path / "a.arrow", wall=38.5, data=20.0, data_cpu=0.0)
    (check,) = _checks(before, _trace(tmp_path / "b.arrow", wall=19.5, data=1.0, data_cpu=0.0))
    assert (check.kind, check.bottleneck) == ("loader", "data_loading")
    assert check.projected_ms == pytest.approx(18.5) and check.measured_ms == pytest.approx(19.5)


def test_less_work_before_each_step_is_a_logging_check_per_step(tmp_path):
    before = _trace(tmp_path / "a.arrow", wall=30.0, lead=10.0)
    (check,) = _checks(before, _trace(tmp_path / "b.arrow", wall=20.5, lead=0.5))
    assert (check.kind, check.bottleneck, check.recommended) == ("logging", "host", False)
    # only the 9.5 ms of lead time removed, not all 11.5 ms of unattributed host time
    assert check.projected_ms == pytest.approx(30.0 - 9.5) and check.per == "per step"


def test_a_balanced_run_tests_the_straggler_projection(tmp_path):
    (check,) = _checks(
        _ranks(tmp_path / "skewed", {0: 0.0, 1: 10.0}, 30.0), _ranks(tmp_path / "even", {0: 0.0, 1: 0.2}, 20.0)
    )
    assert (check.kind, check.bottleneck) == ("rank_balance", "sync")
    assert check.projected_ms == pytest.approx(20.0, abs=0.3)
    assert check.measured_ms == pytest.approx(20.0)


def test_kineto_iterator_class_is_the_worker_change(tmp_path):
    before = _kineto(
        tmp_path / "a.json", loader="_SingleProcessDataLoaderIter", load_us=6000, kernel=SGEMM, kernel_us=3000
    )
    after = _kineto(
        tmp_path / "b.json", loader="_MultiProcessingDataLoaderIter", load_us=300, kernel=SGEMM, kernel_us=3000
    )
    assert load_any(before).end.loader_workers == 0 and load_any(after).end.loader_workers == 1
    checks = _checks(before, after)
    (check,) = [c for c in checks if c.kind == "workers"]
    assert check.bottleneck == "data_loading" and "multi-process" in check.fix
    assert check.measured_ms == pytest.approx(3.8) and 3.5 <= check.projected_ms < 9.5


def test_kineto_move_to_tensor_cores_is_the_precision_check(tmp_path):
    loader = "_MultiProcessingDataLoaderIter"
    before = _kineto(tmp_path / "a.json", loader=loader, load_us=100, kernel=SGEMM, kernel_us=8000)
    after = _kineto(tmp_path / "b.json", loader=loader, load_us=100, kernel=BF16_GEMM, kernel_us=3000)
    (check,) = [c for c in _checks(before, after) if c.kind == "precision"]
    assert check.bottleneck == "kernels" and check.projected_ms < check.measured_ms


def _with_range(loaded: Loaded, low: float, high: float) -> Loaded:
    """BEFORE with its findings' projections given a range (the rules leave it None today)."""
    assert loaded.report is not None
    findings = tuple(
        dataclasses.replace(f, projection=dataclasses.replace(f.projection, low_ms=low, high_ms=high))
        for f in loaded.report.findings
    )
    return dataclasses.replace(loaded, report=dataclasses.replace(loaded.report, findings=findings))


@pytest.mark.parametrize(("low", "high", "inside"), [(17.0, 19.0, True), (15.0, 18.2, False)])
def test_the_range_says_whether_the_measurement_held(tmp_path, low, high, inside):
    before = _with_range(
        load_compared(_trace(tmp_path / "a.arrow", wall=30.0, sync=12.0), CostInputs(), None), low, high
    )
    after = load_compared(_trace(tmp_path / "b.arrow", wall=18.5, sync=0.5), CostInputs(), None)
    c = compare([before, after])
    (check,) = c.checks
    assert (check.projected_low_ms, check.projected_high_ms, check.inside) == (low, high, inside)
    (item,) = msgspec.to_builtins(compare_struct(c))["projection_checks"]
    assert {k: item[k] for k in ("kind", "projected_low_ms", "projected_high_ms", "inside")} == {
        "kind": "host_syncs",
        "projected_low_ms": low,
        "projected_high_ms": high,
        "inside": inside,
    }
    projected = 18.0
    assert item["measured_ms"] == pytest.approx(18.5) and item["error"] == pytest.approx((projected - 18.5) / 18.5)
    printed = _text(c)
    assert f"range {low:.2f}-{high:.2f} ms" in printed
    assert ("inside the range" if inside else "OUTSIDE the range") in printed


def test_without_a_range_inside_is_null_and_the_text_says_n_a(tmp_path):
    """A projection without a range (an older report, or one a rule could not bound) holds nothing."""
    import dataclasses

    before = load_compared(_trace(tmp_path / "a.arrow", wall=30.0, sync=12.0), CostInputs(), None)
    assert before.report is not None
    unbounded = tuple(
        dataclasses.replace(f, projection=dataclasses.replace(f.projection, low_ms=None, high_ms=None))
        for f in before.report.findings
    )
    before = dataclasses.replace(before, report=dataclasses.replace(before.report, findings=unbounded))
    c = compare([before, load_compared(_trace(tmp_path / "b.arrow", wall=18.5, sync=0.5), CostInputs(), None)])
    (item,) = json.loads(dumps(compare_struct(c)))["projection_checks"]
    assert item["inside"] is None and item["projected_low_ms"] is None
    assert "range n/a" in _text(c) and "no range to hold" in _text(c)


def test_checks_need_both_reports(tmp_path):
    a = load_compared(_trace(tmp_path / "a.arrow", wall=30.0, sync=12.0), CostInputs(), None)
    assert a.report is not None and projection_checks(a.report, a.report) == ()


def _text(c: Comparison) -> str:
    out = io.StringIO()
    Console(file=out, width=400, color_system=None, highlight=False).print(render_compare(c))
    return out.getvalue()


EXTERNAL = SHARED / "external_traces"


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
@pytest.mark.parametrize(
    ("name", "workers"),
    [
        ("param/rtx2080ti_resnet_kineto.json.gz", 1),
        ("tracelens/h100_owlv2.json.gz", 0),
        ("hta/trace_compare/base/base.json.gz", None),
    ],
)
def test_real_kineto_traces_record_the_dataloader_iterator(name, workers):
    end = load_any(EXTERNAL / name).end
    assert end is not None and end.status == "imported" and end.loader_workers == workers
