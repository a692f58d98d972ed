"""Property-based tests: random and mutated inputs raise nothing but the project's own error."""

import contextlib
import json
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.errors import GpuAnalyzeError
from gpuanalyze.ingest.kineto.parse import load_kineto
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import make_row, write_trace
from tests.kineto_fixtures import two_step_trace

# derandomize: CI runs the same examples every time (no flaky red CI); run with more examples locally.
SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _valid_arrow(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("seed") / "seed.arrow"
    return write_trace(path, [make_row(i, data=1.0) for i in range(6)]).read_bytes()


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, value in edits:
        buf[pos % len(buf)] = value
    return bytes(buf[:cut] if cut is not None else buf)


def _only_our_error(fn, path):
    with contextlib.suppress(GpuAnalyzeError):
        fn(path)


@SETTINGS
@given(data=st.binary(max_size=4096))
def test_reader_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fz") / "t.arrow"
    path.write_bytes(data)
    _only_our_error(load_trace, path)


@SETTINGS
@given(
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
    cut=st.none() | st.integers(0, 5000),
)
def test_reader_mutated_traces(tmp_path_factory, edits, cut):
    seed = _valid_arrow(tmp_path_factory)
    path = tmp_path_factory.mktemp("fz") / "t.arrow"
    path.write_bytes(_mutate(seed, edits, cut))
    _only_our_error(load_trace, path)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)
event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "M", "i", "f"]),
        "cat": st.sampled_from(
            ["kernel", "cuda_runtime", "cpu_op", "user_annotation", "gpu_memcpy", "Kernel", "weird"]
        ),
        "name": st.sampled_from(
            [
                "ProfilerStep#1",
                "ProfilerStep#x",
                "volta_sgemm",
                "cudaDeviceSynchronize",
                "enumerate(DataLoader)#x",
                "ncclKernel",
                "Memcpy HtoD (Pageable -> Device)",
            ]
        )
        | st.text(max_size=8),
        "ts": st.integers(-(10**6), 10**9) | st.floats(-1e9, 1e12, allow_nan=False),
        "dur": st.integers(-100, 10**6) | st.floats(-1, 1e7, allow_nan=False),
    },
    optional={
        "args": st.fixed_dictionaries(
            {}, optional={"stream": st.integers(-1, 20) | st.text(max_size=3), "correlation": st.integers(-1, 50)}
        )
    },
)


@SETTINGS
@given(doc=json_values)
def test_kineto_random_json(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fz") / "t.json"
    path.write_text(json.dumps(doc))
    _only_our_error(load_kineto, path)


@SETTINGS
@given(events=st.lists(event, max_size=40), dist=st.none() | json_values)
def test_kineto_random_events(tmp_path_factory, events, dist):
    doc = {"traceEvents": events}
    if dist is not None:
        doc["distributedInfo"] = dist
    path = tmp_path_factory.mktemp("fz") / "t.json"
    path.write_text(json.dumps(doc))
    _only_our_error(load_kineto, path)


@SETTINGS
@given(
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(32, 126)), max_size=6),
    cut=st.none() | st.integers(0, 3000),
)
def test_kineto_mutated_json(tmp_path_factory, edits, cut):
    seed = json.dumps(two_step_trace()).encode()
    path = tmp_path_factory.mktemp("fz") / "t.json"
    path.write_bytes(_mutate(seed, edits, cut))
    _only_our_error(load_kineto, path)


def test_regression_corrupt_string_offsets(tmp_path):
    """Found by hypothesis: a string column whose offsets point past its data reached polars
    unvalidated and crashed the process. Now the batch fails validation and the trace reads as
    cut off before that batch."""
    row = make_row(0)
    row[S.KERNEL_STATS] = "Q" * 16
    data = bytearray(write_trace(tmp_path / "seed.arrow", [row]).read_bytes())
    at = data.find(b"Q" * 16)
    assert data[at - 4 : at] == struct.pack("<i", 16)  # the column's last offset sits just before its data
    data[at - 4 : at] = struct.pack("<i", 1 << 30)
    path = tmp_path / "t.arrow"
    path.write_bytes(bytes(data))
    trace = load_trace(path)
    assert trace.frame.height == 0 and not trace.complete
