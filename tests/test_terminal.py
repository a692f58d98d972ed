import dataclasses
import io

import pytest
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from analyzer.analysis.findings import Projection
from analyzer.api import analyze
from analyzer.cli import app
from analyzer.render.terminal import render_terminal
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import SAMPLES, make_row

runner = CliRunner()


def shown(report, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False, markup=False).print(render_terminal(report))
    return out.getvalue()


def test_fits_80_columns_with_hanging_indents():
    out = shown(analyze(SAMPLES / "cpu_ddp_straggler.rank0.arrow"))
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    lines = out.splitlines()
    # A wrapped evidence or advice line continues under its text, not under its label.
    i = next(i for i, line in enumerate(lines) if "-> Rank 1 is slow in forward" in line)
    indent = lines[i].index("Rank 1 is slow")
    assert lines[i + 1][indent - 1] == " " and lines[i + 1][indent] != " "
    assert "supporting" in out and "contrary" in out


def test_header_says_confidence_accounting_median_and_mean():
    report = analyze(SAMPLES / "cpu_ddp_straggler.rank0.arrow")
    out = " ".join(shown(report, 200).split())
    c = report.confidence
    assert f"confidence {c.level} ({c.value:.2f}): {c.reason}" in out
    a = report.metrics.accounting
    assert f"{a.analysed} analysed of {a.rows} recorded: {a.warmup} warm-up (3 per rank), 0 under a profiler" in out
    assert a.analysed + a.warmup + a.profiler_windows == a.rows
    assert f"median {report.metrics.step_median_ms:.2f} ms" in out
    assert f"mean {report.metrics.step_mean_ms:.2f} ms on the slowest rank, which the projections and cost use" in out


def test_supporting_and_contrary_evidence_are_apart():
    report = analyze(SAMPLES / "h200_small_batch.arrow")
    finding = report.findings[0]
    e = finding.evidence[0]
    failing = dataclasses.replace(e, value=e.threshold - 1 if e.comparison == ">=" else e.threshold + 1)
    report = dataclasses.replace(
        report, findings=(dataclasses.replace(finding, evidence=(*finding.evidence, failing)), *report.findings[1:])
    )
    out = " ".join(shown(report, 160).split())
    supporting, contrary = out.split("supporting", 1)[1].split("contrary", 1)
    assert f"{failing.metric} = {failing.value:.4g}" in contrary.split("confidence")[0]
    assert "fails" in contrary.split("confidence")[0] and "fails" not in supporting


@pytest.mark.parametrize(
    ("end", "close", "words"),
    [
        (EndInfo(status="exception", exception="ValueError: boom"), True, "ended with an exception: ValueError: boom"),
        (EndInfo(status="interrupted"), True, "interrupted (Ctrl-C"),
        (EndInfo(status="ok"), True, "ended normally"),
        (None, False, "cut off: the trace was never closed"),
    ],
)
def test_the_run_end_is_said(trace_factory, end, close, words):
    path = trace_factory([make_row(i, data=10.0) for i in range(20)], end=end, close=close)
    out = " ".join(runner.invoke(app, [str(path), "--width", "200"]).output.split())
    assert words in out


def test_a_run_still_being_written_is_said():
    report = analyze(SAMPLES / "cpu_data_loading.arrow")
    live = dataclasses.replace(
        report, complete=False, notes=("trace is still being written (the run is in progress); analysing ...",)
    )
    assert "still being written: the run is in progress" in " ".join(shown(live, 200).split())


def test_healthy_run_shows_its_tests():
    report = analyze(SAMPLES / "cpu_healthy.arrow")
    assert report.bottleneck == "none"
    out = " ".join(shown(report).split())
    assert "HEALTHY" in out and "healthy run: the tests" in out
    for e in report.health:
        assert e.metric in out
    assert "holds" in out and "GPU tests were not evaluated" in out
    assert "\\x0a" not in out  # our own line breaks are layout, not escaped text


def test_unknown_verdict_reads_well(trace_factory):
    # Every step is unattributed host time with nothing recorded about phases: no rule can charge it.
    report = analyze(trace_factory([make_row(i, data=0.0, fwd=0.0, bwd=0.0, opt=0.0) for i in range(30)]))
    unknown = dataclasses.replace(report, bottleneck="unknown", findings=())
    out = " ".join(shown(unknown).split())
    assert "UNKNOWN: not healthy" in out and "not healthy, cause unknown: the tests" in out


def test_host_verdict_and_per_batch_projection():
    report = analyze(SAMPLES / "h200_small_batch.arrow")
    f = report.findings[0]
    p = f.projection
    host = dataclasses.replace(
        f, bottleneck="host", projection=Projection(p.step_ms, p.current_ms, p.rule, p.bound, per_batch_of=64)
    )
    out = " ".join(shown(dataclasses.replace(report, bottleneck="host", findings=(host,))).split())
    assert "HOST: host work that no phase accounts for" in out
    assert "per batch of 64 samples" in out and "1. host:" in out


def test_width_is_honoured_and_paths_shortened_in_the_middle(tmp_path, trace_factory):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    src = trace_factory([make_row(i, data=10.0) for i in range(20)])
    path = deep / "the_trace_name.arrow"
    path.write_bytes(src.read_bytes())
    for width in (60, 100):
        out = runner.invoke(app, [str(path), "--width", str(width)]).output
        assert max(cell_len(line) for line in out.splitlines()) <= width
        title = out.splitlines()[0]
        assert "…" in title and "the_trace_name.arrow" in title


def test_width_option_on_planning_commands():
    trace = str(SAMPLES / "h200_data_loading.arrow")
    result = runner.invoke(app, ["compare", trace, trace, "--width", "50"])
    assert result.exit_code == 0
    assert max(cell_len(line) for line in result.output.splitlines()) <= 50
    assert runner.invoke(app, ["compare", trace, trace, "--width", "5"]).exit_code == 2


def test_a_findings_severity_is_worded_apart_from_its_confidence():
    import re

    from typer.testing import CliRunner

    from analyzer.cli import app
    from tests.conftest import SAMPLES

    result = CliRunner().invoke(app, [str(SAMPLES / "cpu_data_loading.arrow"), "--width", "120"])
    assert result.exit_code == 0, result.output
    titles = [line for line in result.output.splitlines() if re.search(r"\d\. \w+: ", line)]
    assert titles and all(re.search(r"\((low|medium|high) severity\)", t) for t in titles), titles


def test_the_report_says_how_findings_are_ranked_and_why_a_lower_severity_may_stand_first():
    trace = SAMPLES / "h200_small_batch.arrow"
    result = runner.invoke(app, [str(trace), "--width", "80"])
    assert result.exit_code == 0, result.output
    assert max(cell_len(line) for line in result.output.splitlines()) <= 80
    flat = " ".join(result.output.split())
    assert "Findings ranked by the step time each fix saves at the slow end of its range" in flat
    report = analyze(trace)
    first, second = report.findings[:2]
    moderate_first = dataclasses.replace(
        report,
        findings=(dataclasses.replace(first, severity="moderate"), dataclasses.replace(second, severity="high")),
    )
    assert "severity is the share of the step the cause takes" in " ".join(shown(moderate_first).split())
    assert "severity is the share" not in flat  # in order: nothing to explain
    from analyzer.render.html_panel import verdict_panel

    assert "Findings ranked by the step time each fix saves at the slow end of its range" in verdict_panel(report)


def test_the_range_shown_is_the_one_the_rule_line_gives():
    for sample in ("h200_small_batch.arrow", "cpu_data_loading.arrow", "h200_fp32_compute.arrow"):
        report = analyze(SAMPLES / sample)
        out = " ".join(shown(report, 200).split())
        for f in report.findings:
            p = f.projection
            shown_range = f"range {p.low_ms:.2f}-{p.high_ms:.2f} ms"
            assert f"{shown_range} (width" in out and f"{shown_range}: the rule's" in out  # headline and rule agree
