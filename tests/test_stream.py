"""The streaming Kineto reader: same result as decoding the whole document, whatever the chunking;
bounded memory and one-line errors on hostile input."""

import gzip
import json
import os
import subprocess
import sys
import zlib

import pytest
from typer.testing import CliRunner

import gpuanalyze.ingest.kineto.stream as stream
import gpuanalyze.ingest.trace.byte_source as byte_source
from analyzer.cli import app
from analyzer.errors import TraceError
from gpuanalyze.ingest.kineto.parse import load_kineto, parse_kineto
from gpuanalyze.ingest.timeline.capture_meta import parse_literal
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from tests.conftest import ROOT, SHARED
from tests.kineto_fixtures import ev, two_step_trace, write
from tests.kineto_oracle import parse_kineto_in_memory

TRACES = SHARED / "external_traces"
runner = CliRunner()


def _external():
    return sorted(p.relative_to(TRACES).as_posix() for p in TRACES.rglob("*.json.gz")) if TRACES.is_dir() else []


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Chunks and batches of a few KB: every file is cut into many batches, events span chunks."""
    monkeypatch.setattr(byte_source, "READ_CHUNK", 997)
    monkeypatch.setattr(byte_source, "INFLATE_CHUNK", 1531)
    monkeypatch.setattr(stream, "BATCH_BYTES", 4096)


def _same(path):
    a = import_kineto(parse_kineto(path))
    b = import_kineto(parse_kineto_in_memory(path))
    assert a.frame.equals(b.frame), path
    assert a.run == b.run and a.notes == b.notes


@pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/external_traces is absent")
@pytest.mark.parametrize(
    "rel", ["hta/trace_compare/test/test.json.gz", "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
)
def test_streaming_equals_whole_document_on_small_real_traces(rel, tiny_chunks):
    _same(TRACES / rel)


@pytest.mark.slow
@pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/external_traces is absent")
@pytest.mark.parametrize("chunks", ["default", "tiny"])
@pytest.mark.parametrize("rel", _external())
def test_streaming_equals_whole_document_on_every_external_trace(rel, chunks, monkeypatch):
    if chunks == "tiny":
        monkeypatch.setattr(byte_source, "READ_CHUNK", 4093)
        monkeypatch.setattr(byte_source, "INFLATE_CHUNK", 8191)
        monkeypatch.setattr(stream, "BATCH_BYTES", 65536)
    _same(TRACES / rel)


def _adversarial_doc():
    doc = two_step_trace()
    names = ['a"}, {"ph": "X"', "b}]", 'c\\"}, {', "d}\n,\n{", "\u00e9\u4e2d}, {", "e\\\\"]
    for i, name in enumerate(names):
        doc["traceEvents"].append(
            ev(
                "kernel",
                name,
                2000 + 10 * i,
                5,
                stream=7,
                correlation=100 + i,
                nested=[{"x": [{"y": "}, {"}]}, {"z": 1}],
            )
        )
    doc["traceEvents"].append(ev("cpu_op", "aten::mm", 0, 1, shapes=[[1, 2], [3]], meta={"k": "}, {"}))
    doc["INFO"] = {"notes": [{"a": 1}, {"b": "}, {"}], "more": "}]"}  # candidates after the events array
    return doc


@pytest.mark.parametrize("gz", [False, True])
def test_boundaries_inside_strings_and_nested_values(tmp_path, tiny_chunks, gz):
    path = write(tmp_path / ("t.json.gz" if gz else "t.json"), _adversarial_doc(), gz=gz)
    _same(path)
    k = parse_kineto(path)
    assert 'a"}, {"ph": "X"' in [x.name for x in k.kinds]


def test_a_top_level_list_of_events(tmp_path, tiny_chunks):
    _same(write(tmp_path / "t.json", _adversarial_doc()["traceEvents"]))


def test_whitespace_and_multi_member_gzip(tmp_path, tiny_chunks):
    text = json.dumps(_adversarial_doc(), indent=3).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:5000]) + gzip.compress(text[5000:]))
    _same(path)
    plain = tmp_path / "p.json"
    plain.write_bytes(text)
    assert parse_kineto(path).gpu.start.size == parse_kineto(plain).gpu.start.size


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (gzip.compress(b'{"traceEvents": []}', mtime=0) + b"garbage", "corrupt gzip"),
        (gzip.compress(json.dumps(two_step_trace()).encode(), mtime=0)[:-30], "truncated"),
        (b'{"traceEvents": [{"ph": "X"}, {"ph": "X", "cat": "kernel", "name": "k"', "not valid JSON"),
        (b'{"traceEvents": [{"ph": "X"}]} trailing', "not valid JSON"),
        (b'{"traceEvents": [1, 2, 3]}', "not a PyTorch profiler trace"),
        (b'{"traceEvents": [{"ph": "X"}], "traceEvents": []}', "twice"),
        (b'"just a string"', "not a PyTorch profiler trace"),
        (b"\x00\x00\x00", "not valid JSON"),
        (b'{"traceEvents": [{"ph": "X", "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}]}", "nested too deeply"),
    ],
)
def test_malformed_streams_are_one_trace_error(tmp_path, data, text):
    path = tmp_path / ("t.json.gz" if data[:2] == b"\x1f\x8b" else "t.json")
    path.write_bytes(data)
    with pytest.raises(TraceError) as info:
        parse_kineto(path)
    assert text in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_mistyped_event_costs_that_event_and_a_note(tmp_path, monkeypatch, chunked):
    """A list as ``correlation`` (or a name that is an object) rejected the whole file: now that event is skipped,
    counted in a note, and the rest reads as the trace without it."""
    if chunked:
        monkeypatch.setattr(byte_source, "READ_CHUNK", 997)
        monkeypatch.setattr(stream, "BATCH_BYTES", 4096)
    doc = two_step_trace()
    doc["traceEvents"] += [ev("cpu_op", f"op{i}", 1900 + i, 1) for i in range(200)]
    clean = parse_kineto(write(tmp_path / "clean.json", doc))
    bad = dict(doc, traceEvents=[*doc["traceEvents"], ev("kernel", "k", 1000, 5, correlation=[1, 2])])
    bad["traceEvents"].insert(40, {"ph": "X", "cat": "cpu_op", "name": {"x": 1}, "ts": 5, "dur": 1})
    got = parse_kineto(write(tmp_path / "bad.json", bad))
    assert [n for n in got.notes if "skipped" in n] == [
        next(n for n in got.notes if n.startswith("skipped 2 event(s) with a field of the wrong type"))
    ]
    assert got.gpu.start.size == clean.gpu.start.size and got.cpu.start.size == clean.cpu.start.size
    assert len(got.steps) == len(clean.steps)


def test_gzip_ratio_guard_and_max_bytes_override(tmp_path):
    events = [ev("kernel", "k", i, 1, stream=1) for i in range(20000)]
    raw = json.dumps({"traceEvents": events}).encode()
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(raw, 9))
    small = ReadLimits(gzip_ratio=5, min_allowance=1000)
    with pytest.raises(TraceError, match="--max-bytes"):
        parse_kineto(path, small)
    assert parse_kineto(path, ReadLimits(gzip_ratio=5, min_allowance=1000, max_bytes=len(raw))).gpu.start.size == 20000
    with pytest.raises(TraceError, match="--max-bytes limit"):
        parse_kineto(path, ReadLimits(max_bytes=len(raw) // 2))
    plain = tmp_path / "plain.json"
    plain.write_bytes(raw)
    with pytest.raises(TraceError, match="--max-bytes limit"):
        parse_kineto(plain, ReadLimits(max_bytes=1000))


def test_max_bytes_option_through_the_cli(tmp_path):
    src = write(tmp_path / "t.json", two_step_trace())
    result = runner.invoke(app, [str(src), "--max-bytes", "100"])
    assert result.exit_code == 2 and "--max-bytes" in result.output and len(result.output.strip().splitlines()) == 1
    assert runner.invoke(app, [str(src), "--max-bytes", "1M"]).exit_code == 0
    bad = runner.invoke(app, [str(src), "--max-bytes", "lots"])
    assert bad.exit_code == 2 and "800M" in bad.output


def test_kept_event_limit(tmp_path):
    path = write(tmp_path / "t.json", {"traceEvents": [ev("kernel", "k", i, 1) for i in range(50)]})
    with pytest.raises(TraceError, match="shorter window"):
        parse_kineto(path, ReadLimits(max_kept_events=10))


def test_an_oversized_single_value_outside_events(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"blob": "' + b"x" * 5000 + b'", "traceEvents": []}')
    with pytest.raises(TraceError, match="1000 bytes of data outside traceEvents"):
        parse_kineto(path, ReadLimits(max_outside_bytes=1000))
    path.write_bytes(b'{"blob": "' + b"x" * 5000)
    with pytest.raises(TraceError, match="a JSON value over 1000 bytes"):
        parse_kineto(path, ReadLimits(max_outside_bytes=1000))


@pytest.mark.parametrize("kind", ["fifo", "devzero"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".arrow"])
def test_non_regular_files_are_refused_without_reading(tmp_path, kind, suffix):
    path = tmp_path / f"t{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    result = runner.invoke(app, [str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "regular file" in result.output or "empty" in result.output


def _kineto(tmp_path, **over):
    doc = two_step_trace()
    for key, value in over.items():
        if key == "events":
            doc["traceEvents"] += value
        else:
            doc[key] = value
    return write(tmp_path / "t.json", doc)


@pytest.mark.parametrize(
    ("over", "code", "text"),
    [
        ({"distributedInfo": {"rank": "x", "world_size": 2}}, 2, "distributedInfo.rank"),
        ({"distributedInfo": {"rank": [1], "world_size": 2}}, 2, "distributedInfo.rank"),
        ({"distributedInfo": {"rank": 5, "world_size": 2}}, 2, "rank 5 of a world of 2"),
        ({"distributedInfo": {"rank": None}}, 0, "has no rank"),
        ({"distributedInfo": {"rank": 0, "world_size": 1e8}}, 0, "world_size is 100000000.0: ignored"),
        ({"distributedInfo": "[" * 100 + "]" * 100}, 0, "not a Python literal"),
        ({"deviceProperties": [{"name": "X", "totalGlobalMem": "lots"}]}, 0, "GPU memory unknown"),
        ({"events": [ev("kernel", "k", 100, 5, correlation=2**70)]}, 0, "beyond 64 bits"),
        ({"events": [ev("user_annotation", "ProfilerStep#" + "9" * 23, 0, 10)]}, 0, "beyond 2**53"),
        ({"events": [ev("kernel", "k", 1e300, 5)]}, 0, "impossible timestamps"),
        ({"events": [ev("kernel", "k", 100, -5)]}, 0, "impossible timestamps"),
    ],
)
def test_hostile_kineto_values_are_one_line_or_a_note(tmp_path, over, code, text):
    path = _kineto(tmp_path, **over)
    result = runner.invoke(app, [str(path), "--json"])
    assert result.exit_code == code, result.output[-500:]
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if code == 2:
        assert result.output.startswith("gpuanalyze: error:") and len(result.output.strip().splitlines()) == 1
        assert text in result.output
    else:
        assert any(text in n for n in json.loads(result.output)["notes"]), json.loads(result.output)["notes"]


def test_python_literal_metadata_strings(tmp_path):
    path = _kineto(tmp_path, distributedInfo="{'rank': 1, 'world_size': 4, 'backend': 'nccl'}")
    run = load_kineto(path).run
    assert (run.rank, run.world_size, run.backend) == (1, 4, "nccl")


def test_python_literal_metadata_is_parsed_without_eval():
    assert parse_literal("[{'name': 'A100', 'totalGlobalMem': 42, 'x': (1, 2.5, None, True)}]") == [
        {"name": "A100", "totalGlobalMem": 42, "x": (1, 2.5, None, True)}
    ]
    for bad in ("__import__('os')", "1 + 1", "{1, 2}", "[" * 40 + "]" * 40, "'x' * 10**9", "[1, 2", "x" * 70000):
        with pytest.raises(ValueError):
            parse_literal(bad)


def _peak_rss_mb(code: str) -> float:
    """Run ``code`` in a fresh interpreter; its peak RSS (MB) less the shared libraries' resident pages. VmHWM, not
    ru_maxrss: the latter keeps the forked parent's (pytest's) size across exec. Less RssFile: how many of the
    libraries' pages are resident depends on the page cache, not on the code (a fresh venv's polars and pyarrow
    mapped 93 MB where the same files, partly evicted, mapped 48 MB: 261 against 216 MB for one parse)."""
    prog = code + (
        "\nst = {ln.split(':')[0]: int(ln.split()[1]) for ln in open('/proc/self/status')"
        " if ln.startswith(('VmHWM', 'RssFile'))}"
        "\nprint('RSS', (st['VmHWM'] - st['RssFile']) / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.split("RSS")[-1])


def _gzip_stream(path, pieces):
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as fh:
        for piece, times in pieces:
            for _ in range(times):
                fh.write(comp.compress(piece))
        fh.write(comp.flush())


@pytest.mark.slow
def test_compression_bombs_stay_small(tmp_path):
    """A ~2 MB gzip of zeros (2 GiB inflated) and a gzip of 10M minimal kernel events: one line each, peak
    RSS well below 500 MB (the refused events file is read up to its 100x allowance, about 3M kept events);
    minimal events, allowed with --max-bytes, stay small because they are not kept."""
    zeros = tmp_path / "zeros.json.gz"
    _gzip_stream(zeros, [(b"\0" * (1 << 24), 128)])
    assert zeros.stat().st_size < 4 << 20
    events = tmp_path / "events.json.gz"
    _gzip_stream(
        events,
        [
            (b'{"traceEvents":[', 1),
            (b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1},' * 1000, 10_000),
            (b"{}]}", 1),
        ],
    )
    minimal = tmp_path / "minimal.json.gz"
    _gzip_stream(minimal, [(b'{"traceEvents":[', 1), (b'{"ph":"i"},' * 1000, 2_000), (b"{}]}", 1)])
    for path, text in ((zeros, "not valid JSON"), (events, "expands more than 100x")):
        code = (
            "from typer.testing import CliRunner; from analyzer.cli import app\n"
            f"r = CliRunner().invoke(app, [{str(path)!r}])\n"
            f"assert r.exit_code == 2 and {text!r} in r.output, r.output"
        )
        assert _peak_rss_mb(code) < 400
    code = (
        "from gpuanalyze.ingest.kineto.parse import parse_kineto\n"
        "from gpuanalyze.ingest.trace.byte_source import ReadLimits\n"
        "from analyzer.errors import TraceError\n"
        f"try:\n    parse_kineto({str(minimal)!r}, ReadLimits(max_bytes=1 << 30))\nexcept TraceError as e:\n"
        "    assert 'no profiler events' in str(e)\n"
    )
    assert _peak_rss_mb(code) < 220  # one decoded batch alive at a time: ~170 MB (a batch is ~130 MB)


def test_directory_world_claims_are_bounded(tmp_path):
    from tests.conftest import make_row, write_trace

    run = tmp_path / "run"
    run.mkdir()
    write_trace(run / "trace.rank0.arrow", [make_row(i) for i in range(10)], run={"world_size": 1 << 20, "rank": 0})
    data = json.loads(runner.invoke(app, [str(run), "--json"]).output)
    assert any("claim a world of 1,048,576 ranks" in n for n in data["notes"])
