import dataclasses
import json
import math

from analyzer.analysis.findings import Confidence
from analyzer.api import ReadOptions, analyze
from analyzer.planning.cost import CostInputs
from analyzer.render.json_report import render_json, report_dict
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import ROOT, make_row, write_trace
from tests.report_helpers import kernel_stats, synthetic_trace
from tests.test_output_schema import validate


def test_every_key_is_declared_and_documented(tmp_path):
    rows = []
    for i in range(40):
        row = make_row(i, wall=20.0, busy=12.0, data=6.0, peak=10**9)
        row[S.KERNEL_STATS] = kernel_stats("k")
        rows.append(row)
    single = analyze(
        write_trace(tmp_path / "k.arrow", rows, run={"gpu_name": "NVIDIA H100 80GB HBM3", "world_size": 1}),
        ReadOptions(cost=CostInputs(steps_per_run=1e4, price_per_gpu_hour=2.0), flops_per_step=1e12),
    )
    ranks = analyze(synthetic_trace(ranks=4, steps=40), ReadOptions(cost=CostInputs(steps_per_run=1e4)))
    documented = (ROOT / "docs" / "json.md").read_text()
    for report in (single, ranks):
        data = json.loads(render_json(report))
        validate(data, "Report")  # every key the report prints is declared (the schema has no other)
        assert data["cost"] and (data["per_rank"] if report is ranks else data["mfu"] and data["kernels"])
        assert all(f"`{key}`" in documented for key in data)


def test_evidence_and_confidence_shape():
    data = json.loads(render_json(analyze(synthetic_trace(ranks=4, steps=40))))
    assert 0.0 <= data["confidence"] <= 1.0 and data["confidence_level"] in {"low", "medium", "high"}
    assert data["end_status"] == "ok"
    items = [e for f in data["findings"] for e in f["evidence"]] + data["health"]
    assert items
    for e in items:
        assert isinstance(e["passed"], bool) and isinstance(e["supports"], bool)
    a = data["step_accounting"]
    assert a["rows"] == a["warmup"] + a["profiler_windows"] + a["analysed"]


def test_non_finite_numbers_become_null(trace_factory):
    report = analyze(trace_factory([make_row(i, data=10.0) for i in range(20)]))
    bad = dataclasses.replace(report, confidence=Confidence(math.nan, "low", "test"))
    text = render_json(bad)
    assert "NaN" not in text and json.loads(text)["confidence"] is None


def test_idle_owners_are_given_step_by_step_and_add_up(tmp_path):
    from tests.kineto_fixtures import loader_bound_trace, write

    report = report_dict(analyze(write(tmp_path / "t.json", loader_bound_trace(4000.0))))
    owners = report["idle_owners"]
    per_step = owners["per_step"]
    assert [s["step"] for s in per_step] == sorted(s["step"] for s in per_step)
    assert len(per_step) == owners["steps"]
    for s in per_step:
        assert math.isclose(sum(s["owners_ms"].values()), s["idle_ms"], rel_tol=1e-3, abs_tol=1e-3)
        assert s["owners_ms"]["data_loader"] >= 3.9  # the 4 ms wait is the loader's, step by step
    total = sum(s["idle_ms"] for s in per_step) / len(per_step)
    assert math.isclose(total, owners["idle_ms_per_step"], rel_tol=1e-3)
