"""Real profiler traces recorded by others (../shared/external_traces); skipped when absent."""

import functools
import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.analysis.findings import BOTTLENECKS
from analyzer.cli import app
from tests.conftest import SHARED
from tests.test_output_schema import validate

TRACES = SHARED / "external_traces" / "hta"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/external_traces is absent")

# HTA 0.5.0 get_temporal_breakdown() numbers from external_traces/README.md
HTA = {
    "nccl_parser_config/nccl_data.json.gz": (77.78, 17.26, 4.97),
    "timeline_analysis/sampled_rank-0.json.gz": (53.56, 17.71, 28.74),
    "trace_filter/sampled_rank-1.json.gz": (54.72, 22.57, 22.72),
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (2.63, 96.75, 0.62),
    "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": (99.49, 0.08, 0.43),
    "trace_compare/base/base.json.gz": (0.0, 100.0, 0.0),
}
runner = CliRunner()


@functools.cache
def _printed(rel: str) -> str:
    """`gpuanalyze TRACE --json`, run once per trace and test process (three tests read the same reports)."""
    result = runner.invoke(app, [str(TRACES / rel), "--json"])
    assert result.exit_code == 0, result.output
    return result.output


def _all():
    return sorted(p.relative_to(TRACES).as_posix() for p in TRACES.rglob("*.json.gz")) if TRACES.is_dir() else []


@pytest.mark.parametrize("rel", _all())
def test_every_external_trace_imports_and_analyses(rel):
    data = json.loads(_printed(rel))
    assert data["bottleneck"] in BOTTLENECKS
    validate(data, "Report")  # the shipped JSON Schema (docs/json.md)
    if "cpu_only" in rel:
        assert data["gpu"] is None and any("CPU-only" in n for n in data["notes"])
    else:
        assert data["kernels"]["kernel_count"] > 0


@pytest.mark.parametrize("rel", sorted(HTA))
def test_gpu_breakdown_matches_hta_within_one_point(rel):
    data = json.loads(_printed(rel))
    idle, compute, non_compute = HTA[rel]
    assert data["gpu"]["idle_pct"] == pytest.approx(idle, abs=1.0)
    assert data["gpu"]["compute_pct"] == pytest.approx(compute, abs=1.0)
    assert data["gpu"]["non_compute_pct"] == pytest.approx(non_compute, abs=1.0)


def test_distributed_info_gives_rank_and_world():
    data = json.loads(_printed("trace_filter/sampled_rank-1.json.gz"))
    assert data["run"]["rank"] == 1 and data["run"]["world_size"] == 128


def test_import_writes_an_arrow_trace(tmp_path):
    out = tmp_path / "imported.arrow"
    src = TRACES / "nccl_parser_config/nccl_data.json.gz"
    result = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    direct = json.loads(_printed("nccl_parser_config/nccl_data.json.gz"))
    again = json.loads(runner.invoke(app, [str(out), "--json"]).output)
    assert again["bottleneck"] == direct["bottleneck"] and again["gpu"] == direct["gpu"]
    assert again["steps"] == direct["steps"]


def _oracle_module():
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "oracle.py"
    spec = importlib.util.spec_from_file_location("oracle_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("rel", ["nccl_parser_config/nccl_data.json.gz", "trace_compare/base/base.json.gz"])
def test_oracle_benchmark_recomputes_our_utilisation(rel):
    """benchmarks/oracle.py explains utilisation differences from its own recomputation: it must match ours."""
    oracle = _oracle_module()
    ours, anatomy = oracle.ours(TRACES / rel), oracle.anatomy(TRACES / rel)
    assert anatomy["util_all_events"] == pytest.approx(ours["util"], abs=0.01)
    assert anatomy["util_kernels_only"] <= anatomy["util_all_events"]
