"""Ranges from torch.autograd.profiler.emit_nvtx: every RecordFunction's range is named '<name>, seq = N, op_id = N'
(sizes and input op ids with record_shapes), user annotations included; they read as the Kineto events they stand
for."""

import pytest

from gpuanalyze.ingest.nsys.step_ranges import emit_nvtx_name
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
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
