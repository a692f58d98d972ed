import html
import json
import re
import sys

import pytest
from typer.testing import CliRunner

import analyzer
from analyzer.api import ReadOptions, analyze
from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from analyzer.planning.cost import CostInputs
from tests.conftest import SAMPLES, make_row, write_trace
from tests.report_helpers import kernel_stats, synthetic_trace

pytest.importorskip("plotly")

from analyzer.render.html_charts import plotly_js
from analyzer.render.html_report import render_html

runner = CliRunner()
#: An attribute or CSS value that would make the browser fetch something.
FETCH = re.compile(
    r"""\b(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:|//|ftp:)|url\(\s*["']?(?:https?:|//)""", re.I
)


def charts(page: str) -> set[str]:
    return set(re.findall(r'data-chart="([\w-]+)"', page))


def assert_self_contained(page: str) -> None:
    assert page.count(plotly_js()) == 1  # plotly.js inlined once
    rest = page.replace(plotly_js(), "")
    assert not FETCH.search(rest), FETCH.search(rest)
    assert "<script src" not in rest and "<link" not in rest and "@import" not in rest
    assert "Content-Security-Policy" in rest and "default-src 'none'" in rest


def test_single_rank_cpu_trace():
    trace_path = SAMPLES / "cpu_data_loading.arrow"
    report = analyze(trace_path)
    from gpuanalyze.ingest.sources import load_any

    page = render_html(report, load_any(trace_path))
    assert_self_contained(page)
    assert charts(page) == {"steps", "distribution"}
    assert "DATA LOADING" in page and "Supporting evidence" in page and "Contrary evidence" in page
    assert f"{report.confidence.level}</span> {report.confidence.value:.2f}" in page
    assert 'id="ranks"' not in page and 'id="cost"' not in page


def test_ddp_straggler_with_cost(tmp_path):
    out = tmp_path / "r.html"
    args = ["report", str(SAMPLES / "cpu_ddp_straggler.rank0.arrow"), "-o", str(out)]
    args += ["--steps-per-run", "10000", "--price-per-gpu-hour", "2.5"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "verdict sync" in result.output
    page = out.read_text()
    assert_self_contained(page)
    assert {"steps", "distribution", "heat-step", "heat-wait", "savings"} <= charts(page)
    assert "straggler 1" in page
    assert "saves" in page and "$" in page


def test_kernel_evidence_and_ceilings(tmp_path):
    rows = []
    for i in range(40):
        row = make_row(i, wall=20.0, busy=12.0, data=6.0, samples=64)
        row["kernel_stats"] = kernel_stats("void sgemm_kernel<float>(float*)")
        rows.append(row)
    path = write_trace(tmp_path / "k.arrow", rows, run={"gpu_name": "NVIDIA H100 80GB HBM3", "world_size": 1})
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(
        json.dumps(
            {
                "backend": "cupy",
                "device": "NVIDIA H100 80GB HBM3",  # measured on the trace's GPU
                "fingerprint": {"backend": "cupy", "device": "NVIDIA H100 80GB HBM3", "host": "node-a"},
                "results": [
                    {"benchmark": "matmul", "variant": v, "dtype": d, "value": x}
                    for v, d, x in (("fp32", "float32", 51.2), ("bf16", "bfloat16", 768.0))
                ],
            }
        )
    )
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(path), "-o", str(out), "--ceilings", str(ceilings)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert {"gpu", "kernels"} <= charts(page)
    assert "sgemm_kernel" in page and "measured matmul bf16/fp32 = 15.0x by `gpuanalyze bench matmul`" in page


def test_large_run_stays_small():
    trace = synthetic_trace(ranks=256, steps=400, straggler=3)
    page = render_html(analyze(trace), trace)
    assert len(page) < 8_000_000
    assert {"heat-step", "heat-wait", "gpu"} <= charts(page)


def test_missing_plotly_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "plotly", None)
    result = runner.invoke(app, ["report", str(SAMPLES / "cpu_healthy.arrow"), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "pip install 'gpuanalyze[report]'" in lines[0]
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(GpuAnalyzeError, match=r"gpuanalyze\[report\]"):
        analyzer.report(SAMPLES / "cpu_healthy.arrow")


def test_output_is_never_overwritten_without_force(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    result = runner.invoke(app, ["report", str(SAMPLES / "cpu_healthy.arrow"), "-o", str(out)])
    assert result.exit_code == 2 and "--force" in result.output and out.read_text() == "mine"
    result = runner.invoke(app, ["report", str(SAMPLES / "cpu_healthy.arrow"), "-o", str(out), "--force"])
    assert result.exit_code == 0 and out.read_text().startswith("<!DOCTYPE html>")
    result = runner.invoke(app, ["report", str(SAMPLES / "cpu_healthy.arrow"), "-o", str(tmp_path / "no" / "r.html")])
    assert result.exit_code == 2 and "no such directory" in result.output


def test_python_api_and_notebook_display(tmp_path):
    out = tmp_path / "r.html"
    page = analyzer.report(
        SAMPLES / "cpu_ddp_straggler.rank0.arrow", ReadOptions(cost=CostInputs(steps_per_run=1e4)), out=out
    )
    assert out.read_text() == page.html and page.report.bottleneck == "sync"
    shown = page._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and html.escape(page.html[:200], quote=True) in shown
    # A Report shows the same page: the verdict panel and the charts, read again from its path.
    inline = page.report._repr_html_()
    assert "data-chart=&quot;heat-step&quot;" in inline and "verdict" in inline


def test_notebook_display_without_the_trace_keeps_the_panel(tmp_path, trace_factory):
    path = trace_factory([make_row(i, data=10.0) for i in range(20)])
    report = analyze(path)
    path.unlink()
    inline = report._repr_html_()
    assert "DATA LOADING" in inline and "No charts:" in inline and "data-chart" not in inline


def test_idle_owners_are_drawn_per_step_stacked(tmp_path):
    from analyzer.render.html_charts import idle_owners
    from tests.kineto_fixtures import loader_bound_trace, write

    path = write(tmp_path / "t.json", loader_bound_trace(4000.0))
    fig = idle_owners(analyze(path))
    assert fig is not None and fig.layout.barmode == "stack"
    names = {t.name for t in fig.data}
    assert "data_loader" in names
    loader = next(t for t in fig.data if t.name == "data_loader")
    assert len(loader.x) == 6 and min(loader.y) >= 3.9
    assert idle_owners(analyze(SAMPLES / "cpu_healthy.arrow")) is None  # no GPU timeline, no chart
    from gpuanalyze.ingest.sources import load_any

    page = render_html(analyze(path), load_any(path))
    assert_self_contained(page)
    assert "owners" in charts(page)
