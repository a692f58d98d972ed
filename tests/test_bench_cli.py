"""`gpuanalyze bench` on the cpu backend, end to end, and the ceilings it feeds into analysis."""

import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import make_row

runner = CliRunner()


@pytest.fixture
def ceilings_path(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "ceilings.json"
    monkeypatch.setenv("GPUANALYZE_CEILINGS", str(path))
    return path


@pytest.mark.slow
def test_bench_all_cpu_quick_json(ceilings_path, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "ceilings.json"
    result = runner.invoke(app, ["bench", "all", "--backend", "cpu", "--quick", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["backend"] == "cpu" and data["failed"] == []
    by = {}
    for r in data["results"]:
        assert {"benchmark", "backend", "value", "unit", "variant", "repeats", "min", "median", "max"} <= r.keys()
        by.setdefault(r["benchmark"], []).append(r)
    assert {"memory_bandwidth", "matmul", "launch_overhead", "allreduce", "dataloader"} <= by.keys()
    copy = next(r for r in by["memory_bandwidth"] if r["variant"] == "copy")
    assert copy["value"] > 0 and copy["dtype"] == "float32" and copy["size_bytes"] > 0
    gloo2 = [r for r in by["allreduce"] if r["world_size"] == 2 and r["variant"].startswith("gloo")]
    assert gloo2 and all(r["busbw_gbps"] > 0 and r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) for r in gloo2)
    assert all(r["busbw_gbps"] == 0 for r in by["allreduce"] if r["world_size"] == 1)
    assert any("copy:" in s for s in data["skipped"])
    pipeline = next(r for r in by["dataloader"] if r["variant"] == "pipeline")
    assert pipeline["value"] > 0 and pipeline["capped_by"] in ("producer", "link", "consumer")
    assert json.loads(out.read_text())["results"] == data["results"]
    assert ceilings_path.is_file()


def test_bench_unavailable_backend_is_one_line(ceilings_path):
    result = runner.invoke(app, ["bench", "memory", "--backend", "cupy"])
    if result.exit_code == 0:
        pytest.skip("CuPy has a GPU here")
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "cupy is unavailable" in result.output


def test_bench_unknown_benchmark(ceilings_path):
    result = runner.invoke(app, ["bench", "flops", "--backend", "cpu"])
    assert result.exit_code == 2 and "unknown benchmark" in result.output


def test_bench_never_overwrites_out_without_force(ceilings_path, tmp_path):
    out = tmp_path / "mine.json"
    out.write_text("keep")
    result = runner.invoke(app, ["bench", "launch", "--backend", "cpu", "--quick", "--out", str(out)])
    assert result.exit_code == 2 and out.read_text() == "keep"


def test_bench_launch_renders_a_table(ceilings_path):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["bench", "launch", "--backend", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    assert "launch" in result.output and "empty_kernel" in result.output


def _ceilings(path, loader_rate):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "backend": "cpu",
                "device": "test-host",
                "results": [
                    {"benchmark": "dataloader", "variant": "pipeline", "value": loader_rate, "unit": "samples/s"}
                ],
            }
        )
    )
    return path


def test_findings_quote_the_measured_loader_ceiling(trace_factory, ceilings_path):
    trace = trace_factory([make_row(i, wall=20.0, data=10.0, samples=32) for i in range(20)])
    _ceilings(ceilings_path, 9000.0)
    result = runner.invoke(app, [str(trace), "--json"])
    data = json.loads(result.output)
    ev = {e["metric"]: e for e in data["findings"][0]["evidence"]}
    assert ev["achieved_samples_per_s"]["value"] == pytest.approx(1600.0)
    assert ev["achieved_samples_per_s"]["threshold"] == 9000.0
    assert "test-host" in ev["achieved_samples_per_s"]["source"]
    assert data["ceilings"] == str(ceilings_path)


def test_explicit_ceilings_file_must_be_valid(trace_factory, tmp_path, ceilings_path):
    trace = trace_factory([make_row(i) for i in range(5)])
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for path in (bad, tmp_path / "missing.json"):
        result = runner.invoke(app, [str(trace), "--ceilings", str(path)])
        assert result.exit_code == 2 and "gpuanalyze: error:" in result.output
