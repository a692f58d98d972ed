"""Real Nsight Systems exports made by others (../shared/nsys_traces, README: provenance and an engineer's
reading of each); skipped when absent. Each imports, or is refused with one line."""

import functools
import json

import pytest
from typer.testing import CliRunner

from analyzer.analysis.findings import BOTTLENECKS
from analyzer.cli import app
from tests.conftest import SHARED
from tests.test_output_schema import validate

NSYS = SHARED / "nsys_traces"
pytestmark = pytest.mark.skipif(not NSYS.is_dir(), reason="../shared/nsys_traces is absent")
runner = CliRunner()
#: file -> (GPU name, compute capability) where the export has a TARGET_INFO_GPU table.
GPUS = {
    "nsysai_mock_rtx3080.sqlite": ("NVIDIA GeForce RTX 3080", "8.6"),
    "vecadd_rtx3060_2025_5.sqlite": ("NVIDIA GeForce RTX 3060", "8.6"),
    "dlprof_convnet_rtx2070s.sqlite": ("NVIDIA GeForce RTX 2070 SUPER", "7.5"),
    "nvfuser_matmul_h200.sqlite": ("NVIDIA H200", "9.0"),
    "uvmtorch_gptneo_nokernels_a5000.sqlite": ("NVIDIA RTX A5000", "8.6"),
}


def _json(name):
    return json.loads(_printed(name))


@functools.cache
def _printed(name):
    """`gpuanalyze EXPORT --json`, run once per export and test process (ten tests read the same reports)."""
    result = runner.invoke(app, [str(NSYS / name), "--json"])
    assert result.exit_code == 0, result.output
    return result.output


def _setup(data):
    return {p["name"]: p["ms"] for p in data["run"]["setup"]["parts"]}


def _all():
    return sorted(p.name for p in NSYS.glob("*.sqlite")) if NSYS.is_dir() else []


@pytest.mark.parametrize("name", _all())
def test_every_export_imports(name):
    data = _json(name)  # every capture gets a report, those without GPU activity an unknown one
    assert data["bottleneck"] in BOTTLENECKS and data["run"]["source"] == f"nsys:{name}"
    validate(data, "Report")  # the shipped JSON Schema (docs/json.md)
    if name in GPUS:
        gpu, capability = GPUS[name]
        assert data["run"]["gpu_name"] == gpu and data["run"]["compute_capabilities"] == [capability]
    # no step ranges in any of them: the FSDP cuts' loops are found in their per-op NVTX ranges (~17 ms
    # iterations, each fetching its batch), the others are one window
    how = "iterations found" if name.startswith("nsysai_mfu") else "from the capture's first GPU work to its last"
    how = "analysed as one window (its NVTX ranges)" if "nvtx_only" in name else how  # no GPU work to bound one
    assert any(how in n for n in data["notes"]), data["notes"]


BEFORE, AFTER = "nsysai_mfu_train_2gpu_before.sqlite", "nsysai_mfu_train_2gpu_after.sqlite"


@pytest.mark.parametrize(("name", "busy"), [(BEFORE, (89, 91)), (AFTER, (80, 85))])
def test_the_two_rank_fsdp_cuts_are_two_ranks_and_kernel_bound(name, busy):
    data = _json(name)
    assert data["ranks"] == 2 and data["run"]["world_size"] == 2 and data["run"]["backend"] == "nccl"
    assert busy[0] <= data["gpu"]["busy_pct"] <= busy[1]
    t = data["kernels"]["time_ms"]
    assert 0.45 <= t["attention"] / t["gpu_busy"] <= 0.55  # flash attention about half of kernel time
    assert 0.03 <= t["communication"] / t["gpu_busy"] <= 0.09  # NCCL 5-7%
    assert data["kernels"]["blocking_ops"][0]["op"] == "aten::to"  # named from emit_nvtx's aten ranges


def test_the_before_after_pair_compares():
    result = runner.invoke(app, ["compare", str(NSYS / BEFORE), str(NSYS / AFTER)])
    assert result.exit_code == 0, result.output
    assert "difference against nsysai_mfu_train_2gpu_before.sqlite" in result.output


def test_start_up_bound_captures_say_what_the_start_up_is():
    dlprof = _json("dlprof_convnet_rtx2070s.sqlite")
    # context creation inside the first cudaMalloc (2.1 s), before the first GPU work: set-up, reported apart
    assert _setup(dlprof)["cudaMalloc"] > 2000 and dlprof["gpu"]["busy_pct"] < 10
    nvfuser = _json("nvfuser_matmul_h200.sqlite")
    assert "executor_utils::NVRTC (compilation) 352 ms" in nvfuser["confidence_reason"]


def test_the_vector_add_is_transfer_bound_on_the_gpu():
    data = _json("vecadd_rtx3060_2025_5.sqlite")
    t = data["kernels"]["time_ms"]
    assert t["memcpy"] / t["gpu_busy"] > 0.95
    # context creation in the first cudaMalloc is set-up, before the first GPU work; the one pass's copies fill 99%
    # of the GPU's busy time and most of the window less its start-up work (module loading): copy-bound, cold or not
    assert _setup(data)["cudaMalloc"] == pytest.approx(305, abs=1)
    assert (data["bottleneck"], data["findings"][0]["cause"]) == ("data_loading", "copies")


def test_a_capture_without_gpu_rows_is_unknown_with_the_reason():
    data = _json("uvmtorch_gptneo_nokernels_a5000.sqlite")
    assert data["bottleneck"] == "unknown" and data["gpu"] is None
    reason = data["confidence_reason"]
    assert reason.startswith("no GPU activity recorded: the export has no CUPTI_ACTIVITY_KIND_KERNEL")
    assert "runtime calls (cuModuleGetLoadingMode, cudaGetDeviceProperties)" in reason
    assert reason.endswith("capture with nsys profile -t cuda,nvtx,osrt")


def test_a_fresh_process_with_microseconds_of_gpu_work_is_start_up():
    # torch.zeros(16).sum(): CUDA initialisation, then 171 ms with nothing recorded, then 6 us of kernels
    data = _json("nsysai_mock_rtx3080.sqlite")
    assert data["bottleneck"] == "unknown" and not data["findings"]
    assert "CUDA initialisation to the first GPU work (device set-up)" in data["confidence_reason"]
    assert "the GPU's own work in it: 5.76 us" in data["confidence_reason"]


def test_nvtx_only_capture_is_unknown_naming_what_it_has():
    data = _json("centerformer_nvtx_only_titanrtx.sqlite")  # before: refused, exit 2, no JSON
    why = data["confidence_reason"]
    assert data["bottleneck"] == "unknown" and not data["findings"]
    assert "only 1,824 NVTX ranges" in why and "no GPU activity recorded" in why
    assert "no CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET" in why
    assert "nsys profile -t cuda,nvtx,osrt" in why


def test_the_fsdp_cuts_notes_are_said_once_with_the_rank_they_differ_on():
    notes = _json(BEFORE)["notes"]
    found = [n for n in notes if "iterations found" in n]
    assert len(found) == 1 and found[0].endswith("9.5 ms before the first is not analysed (on rank 1)")
    # each rank has a pin-memory thread (ThreadNames): said once
    assert sum("pin-memory thread (pt_data_pin)" in n for n in notes) == 1


def test_synchronisation_records_add_no_blocking_call_names_already_say():
    # every record of the real exports belongs to a *Synchronize call, a stream wait or an event query
    for name in ("dlprof_convnet_rtx2070s.sqlite", BEFORE, "vecadd_rtx3060_2025_5.sqlite"):
        assert not any("waited for the device" in n for n in _json(name)["notes"])


def test_os_runtime_calls_of_the_loop_thread_are_read_where_the_export_has_them():
    notes = _json("vecadd_rtx3060_2025_5.sqlite")["notes"]
    assert any(n.startswith("OS runtime calls (OSRT_API) on the loop thread 'vecAdd'") for n in notes)
    # a capture without GPU rows: the loop's reads are a note, not a data-loading verdict
    data = _json("uvmtorch_gptneo_nokernels_a5000.sqlite")
    assert data["bottleneck"] == "unknown"
    assert any("file/pipe/socket waits" in n for n in data["notes"])


def test_the_report_shows_the_gpu_and_its_compute_capability():
    result = runner.invoke(app, [str(NSYS / "nvfuser_matmul_h200.sqlite")])
    assert result.exit_code == 0 and "NVIDIA H200 (compute capability 9.0)" in result.output
