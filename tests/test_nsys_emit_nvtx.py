"""Ranges from torch.autograd.profiler.emit_nvtx: every RecordFunction's range is named '<name>, seq = N, op_id = N'
(sizes and input op ids with record_shapes), user annotations included; they read as the Kineto events they stand
for."""

import numpy as np
import pytest

from gpuanalyze.ingest.nsys.rows import Interned, RowSink, range_facts
from gpuanalyze.ingest.nsys.step_ranges import emit_nvtx_name
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.timeline.blocking_calls import CallSites
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from tests.nsys_fixtures import Export, build_export

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.mark.parametrize(
    ("text", "name", "op"),
    [
        ("aten::mm, seq = 12, op_id = 40", "aten::mm", True),
        ("aten::copy_, op_id = 7, sizes = [[16], [16], []], input_op_ids = [(5, 0)]", "aten::copy_", True),
        ("c10d::allreduce_, op_id = 9", "c10d::allreduce_", True),  # a c10d op: the collective owner
        ("record_param_comms, op_id = 8", "record_param_comms", True),
        ("FlashAttnFunc, seq = 3, op_id = 11", "FlashAttnFunc", True),  # an autograd function (a sequence number)
        ("MmBackward0, seq = 12, op_id = 90", "MmBackward0", True),
        ("nccl:all_reduce, op_id = 10", "nccl:all_reduce", False),  # record_function, as in Kineto traces
        ("FSDP::pre_forward (layers.0), op_id = 3", "FSDP::pre_forward (layers.0)", False),
        ("ProfilerStep#3, op_id = 2", "ProfilerStep#3", False),
        (f"{LOADER}, op_id = 6", LOADER, False),
        ("train_step 4", "train_step 4", False),  # not from emit_nvtx: as it is
    ],
)
def test_emit_nvtx_names_lose_their_suffix_and_ops_are_told_from_annotations(text, name, op):
    assert emit_nvtx_name(text) == (name, op)


def test_profiler_steps_and_loader_fetches_under_emit_nvtx_are_steps_and_data_waits(tmp_path):
    plain = Export(step_name="ProfilerStep#{}", phase_names=(LOADER,))
    nvtx = Export(step_name="ProfilerStep#{}, op_id = 77", phase_names=(f"{LOADER}, op_id = 78",))
    a = load_any(build_export(tmp_path / "a.sqlite", plain))
    b = load_any(build_export(tmp_path / "b.sqlite", nvtx))
    assert b.frame.get_column(S.STEP).to_list() == [0, 1, 2]
    for col in (S.WALL_MS, S.DATA_WAIT_MS, S.GPU_BUSY_MS):
        assert b.frame.get_column(col).to_list() == pytest.approx(a.frame.get_column(col).to_list())
    assert b.frame.get_column(S.DATA_WAIT_MS).to_list()[0] > 0


def test_op_ranges_say_they_cost_the_host(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite", Export(phase_names=("aten::mm, seq = 1, op_id = 2",))))
    assert any(n.startswith("an NVTX range per op (torch.autograd.profiler.emit_nvtx)") for n in t.notes)
    assert not any("emit_nvtx" in n for n in load_any(build_export(tmp_path / "p.sqlite")).notes)


def test_a_missing_step_range_lists_op_names_not_one_name_per_op(tmp_path):
    from analyzer.errors import TraceError
    from gpuanalyze.ingest.sources import load_nsys

    ops = tuple(f"aten::mm, seq = {i}, op_id = {i + 100}" for i in range(4))
    path = build_export(tmp_path / "r.sqlite", Export(phase_names=ops))
    with pytest.raises(TraceError, match=r"most frequent NVTX ranges: 'aten::mm', 'ProfilerStep#"):
        load_nsys(path, step_range="train_step")


_NAMES = ("aten::linear", "aten::mm", "aten::add_", "aten::item", "c10d::allreduce_", "forward", "aten::copy_")


def _ranges(rng: np.random.Generator, lo: float, hi: float, tid: int, depth: int, out: list) -> None:
    """Push/pop ranges in [lo, hi) on one thread, each holding ranges of its own (children inside parents)."""
    t = lo
    while len(out) < 300 and (start := t + float(rng.uniform(0, 4))) < hi:
        end = min(hi, start + float(rng.uniform(1, 50)))
        out.append((start, end, tid, _NAMES[int(rng.integers(len(_NAMES)))]))
        if depth < 4 and rng.random() < 0.6:
            _ranges(rng, start, end, tid, depth + 1, out)
        t = end


@pytest.mark.parametrize("seed", range(12))
def test_ops_nested_in_a_batch_are_not_held_and_change_no_host_op_or_blocking_call(seed):
    """An emit_nvtx capture has a range per op: a device trace drops, batch by batch, the ops inside an earlier op
    of the batch on their thread. The host ops read and the op and caller named for each blocking call are those
    of every range kept."""
    rng = np.random.default_rng(seed)
    rows: list = []
    for tid in (1, 2):
        _ranges(rng, 0.0, 2_000.0, tid, 0, rows)
    rows = [rows[i] for i in rng.permutation(len(rows))]  # an export's table order is not the ranges' order
    facts = Interned(lambda key: range_facts(key, None))
    held, every = RowSink("t", ReadLimits()), CallSites()
    held.device_rows("kernel", np.zeros(1), np.ones(1), ["gemm"], np.full(1, -1))
    for at in range(0, len(rows), 37):  # batches
        part = rows[at : at + 37]
        ts = np.array([r[0] for r in part])
        dur = np.array([r[1] for r in part]) - ts
        held.cpu_rows(ts, dur, np.array([facts[(r[3], False)] for r in part]), facts, [r[2] for r in part])
        for r, t, d in zip(part, ts.tolist(), dur.tolist(), strict=True):
            every.add_cpu(r[3], facts.facts[facts[(r[3], False)]][6], t, d, r[2])
    calls = [r for r in rows if rng.random() < 0.2]  # a blocking call inside some ranges, on their thread
    c_start = np.array([r[0] + (r[1] - r[0]) * 0.25 for r in calls])
    c_end = np.array([r[0] + (r[1] - r[0]) * 0.5 for r in calls])
    for i, r in enumerate(calls):
        held.sites.add_call(i, "cudaStreamSynchronize", r[2])
        every.add_call(i, "cudaStreamSynchronize", r[2])
    assert len(held.sites.e_ts) < len(every.e_ts)  # ranges were dropped as they came
    got, want = held.sites.ops(nested=False), every.ops(nested=False)
    for a, b in ((got.start, want.start), (got.end, want.end), (got.tid, want.tid)):
        assert a.tolist() == b.tolist()
    assert [got.names[i] for i in got.name] == [want.names[i] for i in want.name]
    got_b, want_b = held.sites.attribute(c_start, c_end), every.attribute(c_start, c_end)
    for field in ("op", "caller", "call"):
        a, b = getattr(got_b, field).tolist(), getattr(want_b, field).tolist()
        assert [got_b.names[i] if i >= 0 else None for i in a] == [want_b.names[i] if i >= 0 else None for i in b]
    assert (want_b.op >= 0).any()
