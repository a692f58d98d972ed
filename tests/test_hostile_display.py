"""Strings from traces, configs and paths never control the terminal or the page."""

import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests import kineto_fixtures as kf
from tests.conftest import make_row, write_trace
from tests.report_helpers import HOSTILE, kernel_stats, raw_controls

runner = CliRunner()


@pytest.fixture
def hostile_arrow(tmp_path):
    """Hostile kernel name (kernel_stats), GPU name (run metadata) and file name, all in one trace."""
    rows = []
    for i in range(30):
        row = make_row(i, wall=20.0, busy=12.0, data=1.0)
        row["kernel_stats"] = kernel_stats("void " + HOSTILE + "_sgemm<float>(float*)")
        rows.append(row)
    name = "tr\x1b]0;title\x07ace[red]r.arrow"
    return write_trace(tmp_path / name, rows, run={"gpu_name": HOSTILE[:200], "world_size": 1})


@pytest.fixture
def hostile_kineto(tmp_path):
    doc = kf.two_step_trace()
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["name"] = HOSTILE + e["name"]
    doc["deviceProperties"][0]["name"] = HOSTILE[:200]
    return kf.write(tmp_path / "hostile.json", doc)


def _ok(result) -> str:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert not raw_controls(result.output), sorted(raw_controls(result.output))
    return result.output


@pytest.mark.parametrize("width", ["60", "80", "200"])
def test_analyze_terminal_output_has_no_raw_controls(hostile_arrow, width):
    out = _ok(runner.invoke(app, [str(hostile_arrow), "--width", width]))
    assert "\\x1b" in out  # shown, escaped
    assert "[red]r.arrow" in " ".join(out.split()) or width == "60"  # the name is kept, not read as markup


def test_kineto_kernel_and_device_names_are_escaped(hostile_kineto):
    out = _ok(runner.invoke(app, [str(hostile_kineto), "--width", "200"]))
    assert "\\x1b]52;c;" in out or "\\x1b" in out


def test_json_escapes_controls(hostile_arrow):
    out = _ok(runner.invoke(app, [str(hostile_arrow), "--json"]))
    data = json.loads(out)
    assert data["run"]["gpu_name"] == HOSTILE[:200]  # JSON carries the exact string, escaped as JSON
    assert data["kernels"]["top_kernels"][0]["name"].startswith("void \x1b]52")


def test_error_line_for_a_hostile_missing_path(tmp_path):
    result = runner.invoke(app, [str(tmp_path / "no\x1b[2Jsuch\x1b]0;x\x07.arrow")])
    assert result.exit_code == 2
    assert not raw_controls(result.output)
    assert len(result.output.strip().splitlines()) == 1 and "\\x1b[2J" in result.output


def test_compare_option_names_are_escaped(tmp_path):
    names = ["\\u001b]0;pwned\\u0007 [link=file:///etc/passwd]x[/link]", "x[/bad]y \\u009b31m"]
    paths = []
    for i, name in enumerate(names):
        p = tmp_path / f"o{i}.toml"
        p.write_text(f'name = "{name}"\nprice_per_gpu_hour = {2 + i}\nhours_per_run = 10\n')
        paths.append(str(p))
    out = _ok(runner.invoke(app, ["compare", *paths, "--width", "80"]))
    assert "x[/bad]y" in out and "\\x1b]0;pwned\\x07" in " ".join(out.split())
    assert "\x1b]8;" not in out


def test_html_report_escapes_everything(hostile_arrow, tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    _ok(runner.invoke(app, ["report", str(hostile_arrow), "-o", str(out)]))
    from analyzer.render.html_charts import plotly_js

    page = out.read_text().replace(plotly_js(), "")  # plotly.js itself holds tabs and other bytes
    assert not raw_controls(page.replace("\n", ""))
    assert "<script>alert(1)</script>" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # the verdict panel's tables, escaped
    assert "\\x1b]52;c;" in page


def test_export_of_a_hostile_trace_is_valid_json(hostile_arrow, tmp_path):
    out = tmp_path / "t.json"
    _ok(runner.invoke(app, ["export", str(hostile_arrow), "--chrome-trace", str(out)]))
    doc = json.loads(out.read_text())
    assert doc["deviceProperties"][0]["name"] == HOSTILE[:200]
    assert not raw_controls(out.read_text().replace("\n", ""))
