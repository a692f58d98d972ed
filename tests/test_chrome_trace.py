import gzip
import io
import json

import polars as pl
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.cli.export import rank_path
from analyzer.render.chrome_trace import base_time_ns, write_chrome_trace
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import SAMPLES, make_row
from tests.report_helpers import synthetic_trace

runner = CliRunner()
STRAGGLER = SAMPLES / "cpu_ddp_straggler.rank0.arrow"


def exported(trace) -> dict:
    buf = io.BytesIO()
    write_chrome_trace(trace, buf, compress=False)
    return json.loads(buf.getvalue())


def test_kineto_layout_one_process_per_rank():
    trace = synthetic_trace(ranks=3, steps=20)
    doc = exported(trace)
    text = json.dumps(doc)
    assert text.startswith('{"distributedInfo": {"backend": "unknown", "rank": 0, "world_size": 3}')
    assert doc["baseTimeNanoseconds"] == base_time_ns(trace) and doc["baseTimeNanoseconds"] % 10**9 == 0
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"
    events = doc["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    assert names == {(0, "rank 0"), (1, "rank 1"), (2, "rank 2")}
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 60 and all(e["name"] == f"ProfilerStep#{e['args']['step']}" for e in steps)
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"GPU busy", "Peak memory"}


def test_phase_slices_hold_the_exact_times_inside_their_step(trace_factory):
    rows = [make_row(i, wall=20.0, data=3.0, fwd=7.0, bwd=6.0, opt=2.0, sync=1.0) for i in range(10)]
    rows[4] = make_row(4, wall=10.0, data=6.0, fwd=7.0, bwd=6.0, opt=2.0)  # parts add up past the wall
    trace = load_trace(trace_factory(rows))
    events = exported(trace)["traceEvents"]
    by_step = {e["args"]["step"]: e for e in events if e["name"].startswith("ProfilerStep#")}
    frame = trace.frame
    for e in events:
        if not e["name"].startswith(S.EXPORT_PHASE_PREFIX):
            continue
        step = by_step[e["args"]["step"]]
        assert e["cat"] == "user_annotation" and e["pid"] == step["pid"]
        assert step["ts"] <= e["ts"] < step["ts"] + step["dur"]  # starts inside its ProfilerStep slice
        part = next(p for p, n in S.EXPORT_PHASE_NAMES.items() if n == e["name"])
        row = frame.filter(pl.col(S.STEP) == e["args"]["step"])
        assert e["dur"] == pytest.approx(row.get_column(part).item() * 1e3, abs=1e-3)
    h2d = [e for e in events if e["name"] == S.EXPORT_PHASE_NAMES[S.H2D_MS]]
    assert h2d == []  # unknown parts are absent, not zero


def test_cli_writes_gzip_deterministically_and_never_overwrites(tmp_path):
    out = tmp_path / "t.json.gz"
    assert runner.invoke(app, ["export", str(STRAGGLER), "--chrome-trace", str(out)]).exit_code == 0
    first = out.read_bytes()
    again = runner.invoke(app, ["export", str(STRAGGLER), "--chrome-trace", str(out)])
    assert again.exit_code == 2 and "--force" in again.output and out.read_bytes() == first
    assert runner.invoke(app, ["export", str(STRAGGLER), "--chrome-trace", str(out), "--force"]).exit_code == 0
    assert out.read_bytes() == first
    doc = json.loads(gzip.decompress(first))
    assert {e["pid"] for e in doc["traceEvents"]} == {0, 1}


def test_split_ranks_writes_kineto_files(tmp_path):
    out = tmp_path / "t.json.gz"
    result = runner.invoke(app, ["export", str(STRAGGLER), "--chrome-trace", str(out), "--split-ranks"])
    assert result.exit_code == 0, result.output
    for rank in (0, 1):
        doc = json.loads(gzip.decompress(rank_path(out, rank).read_bytes()))
        assert doc["distributedInfo"]["rank"] == rank and {e["pid"] for e in doc["traceEvents"]} == {rank}
    assert rank_path(tmp_path / "x.json", 3).name == "x.rank3.json"
    assert rank_path(tmp_path / "x.trace", 3).name == "x.trace.rank3"


def test_round_trip_export_then_import_gives_the_same_phase_times(tmp_path):
    src = SAMPLES / "cpu_data_loading.arrow"
    out = tmp_path / "t.json.gz"
    assert runner.invoke(app, ["export", str(src), "--chrome-trace", str(out)]).exit_code == 0
    back = tmp_path / "back.arrow"
    result = runner.invoke(app, ["import", str(out), "-o", str(back)])
    assert result.exit_code == 0, result.output
    before, after = load_any(src).frame, load_trace(back).frame
    assert after.get_column(S.STEP).to_list() == before.get_column(S.STEP).to_list()
    for col in (S.WALL_MS, *S.PARTS):
        a, b = before.get_column(col), after.get_column(col)
        assert a.null_count() == b.null_count(), col
        assert (a.fill_null(0.0) - b.fill_null(0.0)).abs().max() < 1e-5, col


@pytest.mark.slow
def test_straggler_export_loads_in_hta(tmp_path):
    pytest.importorskip("hta", reason="HTA (holistictraceanalysis, the dev group) is not installed")
    from hta.trace_analysis import TraceAnalysis

    out = tmp_path / "hta" / "straggler.json.gz"
    out.parent.mkdir()
    result = runner.invoke(app, ["export", str(STRAGGLER), "--chrome-trace", str(out), "--split-ranks"])
    assert result.exit_code == 0, result.output
    analysis = TraceAnalysis(trace_dir=str(out.parent))
    assert sorted(analysis.t.get_ranks()) == [0, 1]
    for rank in (0, 1):
        df = analysis.t.get_trace(rank)
        names = set(analysis.t.symbol_table.sym_table)
        steps = {int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#")}
        assert steps == set(load_any(STRAGGLER).frame.get_column(S.STEP).unique().to_list())
        assert S.EXPORT_PHASE_NAMES[S.FORWARD_MS] in names and len(df) > 0
    # The default single file (every rank one process, for Perfetto) loads too, as the rank it names.
    single = tmp_path / "one" / "straggler.json.gz"
    single.parent.mkdir()
    assert runner.invoke(app, ["export", str(STRAGGLER), "--chrome-trace", str(single)]).exit_code == 0
    combined = TraceAnalysis(trace_dir=str(single.parent))
    assert combined.t.get_ranks() == [0] and set(combined.t.get_trace(0)["pid"].unique()) == {0, 1}
