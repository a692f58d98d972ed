"""Ceilings belong to a machine: fingerprints, merging partial runs, concurrent writers, and which
ceilings apply to a trace (``ceilings_for``)."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path

import msgspec
import pytest

from analyzer.errors import GpuAnalyzeError
from analyzer.machine import ceilings as C
from analyzer.machine import ceilings_store as CS
from analyzer.machine.ceilings import Ceilings, ceilings_for
from analyzer.machine.ceilings_store import Fingerprint, SuiteRun, merge_runs
from gpuanalyze.ingest.trace.runinfo import RunInfo

H200_A = Fingerprint(backend="cupy", device="NVIDIA H200", host="node-a", gpu_count=8, driver="550.54", cuda="12.4")
H200_B = Fingerprint(backend="cupy", device="NVIDIA H200", host="node-b", gpu_count=8)
LAPTOP = Fingerprint(backend="cpu", device="CPU: x86_64 x8", host="laptop", cpu_count=8)


def _result(benchmark: str, value: float, *, variant: str = "v", dtype: str | None = None, suite: str = "s") -> dict:
    return {"benchmark": benchmark, "variant": variant, "value": value, "unit": "u", "dtype": dtype, "suite": suite}


def _run(fp: Fingerprint, *results: dict, when: int = 1) -> SuiteRun:
    return SuiteRun(
        measured_unix_s=when,
        quick=False,
        fingerprint=fp,
        results=[msgspec.Raw(msgspec.json.encode(r)) for r in results],
    )


def _save(path: Path, fp: Fingerprint, **suites: list[dict]) -> None:
    merge_runs(path, {name: _run(fp, *rs) for name, rs in suites.items()}, fp)


def _busbw(value: float) -> dict:
    return _result("allreduce", value, suite="allreduce")


def _gpu_run(host: str | None = "node-a", gpu: str = "NVIDIA H200") -> RunInfo:
    return RunInfo(host=host, gpu_name=gpu, device="cuda")


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "ceilings.json"
    monkeypatch.setenv("GPUANALYZE_CEILINGS", str(path))
    return path


# -- the file: merging ------------------------------------------------------------------------------


def test_a_partial_run_replaces_only_its_suites_and_other_machines_stay(store):
    _save(store, H200_A, allreduce=[_busbw(1000.0)], matmul=[_result("matmul", 700.0, dtype="bfloat16")])
    _save(store, LAPTOP, allreduce=[_busbw(50.0)])
    _save(store, H200_A, allreduce=[_busbw(1200.0)])  # `bench allreduce` again on node-a
    data = json.loads(store.read_text())
    assert data["format"] == "gpuanalyze-ceilings" and data["version"] == 2
    assert set(data["machines"]) == {"node-a/cupy/NVIDIA H200", "laptop/cpu/CPU: x86_64 x8"}
    node_a = data["machines"]["node-a/cupy/NVIDIA H200"]["suites"]
    assert set(node_a) == {"allreduce", "matmul"}
    assert [r["value"] for r in node_a["allreduce"]["results"]] == [1200.0]
    assert node_a["matmul"]["results"][0]["value"] == 700.0
    c, note = ceilings_for(_gpu_run(), None)
    assert note is None and c is not None
    assert c.busbw_gbps == 1200.0 and c.matmul_tflops == {"bfloat16": 700.0}


def test_results_pass_through_a_merge_verbatim(store):
    extra = {**_busbw(10.0), "capped_by": "producer", "sample_shape": [3, 64, 64]}
    _save(store, H200_A, allreduce=[extra])
    _save(store, H200_B, launch=[_result("launch_overhead", 2.0)])
    kept = json.loads(store.read_text())["machines"]["node-a/cupy/NVIDIA H200"]["suites"]["allreduce"]["results"]
    assert kept == [extra]


def test_concurrent_writers_lose_nothing_threads(store):
    """Writers in threads of one process (each opens its own lock): every suite of every machine survives."""
    fps = [Fingerprint(backend="cpu", device="CPU", host=f"h{i}") for i in range(4)]

    def writer(fp: Fingerprint) -> None:
        for k in range(5):
            _save(store, fp, **{f"suite{k}": [_result("launch_overhead", float(k))]})

    threads = [threading.Thread(target=writer, args=(fp,)) for fp in fps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    machines = json.loads(store.read_text())["machines"]
    assert {key: sorted(m["suites"]) for key, m in machines.items()} == {
        fp.key: [f"suite{k}" for k in range(5)] for fp in fps
    }


def _process_writer(path: str, host: str) -> None:
    fp = Fingerprint(backend="cpu", device="CPU", host=host)
    for k in range(5):
        merge_runs(Path(path), {f"suite{k}": _run(fp, _result("launch_overhead", 1.0))}, fp)


@pytest.mark.slow
def test_concurrent_bench_processes_lose_nothing(store):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_process_writer, args=(str(store), f"h{i}")) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    machines = json.loads(store.read_text())["machines"]
    assert sorted(machines) == [f"h{i}/cpu/CPU" for i in range(4)]
    assert all(len(m["suites"]) == 5 for m in machines.values())


def test_a_writer_that_changed_the_file_meanwhile_is_merged_again(store, monkeypatch):
    """Without a lock (file systems that cannot lock), the file is re-read before the replace."""
    _save(store, H200_A, launch=[_result("launch_overhead", 1.0)])
    monkeypatch.setattr(CS, "_locked", lambda directory: _nolock())
    real = CS._current
    calls = []

    def racing(path):
        calls.append(1)
        if len(calls) == 2:  # another process writes between our read and our replace
            monkeypatch.setattr(CS, "_current", real)
            _save(store, LAPTOP, launch=[_result("launch_overhead", 9.0)])
        return real(path)

    monkeypatch.setattr(CS, "_current", racing)
    _save(store, H200_B, launch=[_result("launch_overhead", 2.0)])
    assert len(json.loads(store.read_text())["machines"]) == 3


class _nolock:  # noqa: N801 - a context manager standing in for the lock
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_the_file_is_never_written_through_a_link(store, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("mine")
    store.symlink_to(target)
    with pytest.raises(GpuAnalyzeError, match="symbolic link"):
        _save(store, H200_A, launch=[_result("launch_overhead", 1.0)])
    assert target.read_text() == "mine"


def test_a_damaged_file_is_not_replaced(store):
    store.write_text("{not json")
    with pytest.raises(GpuAnalyzeError, match="move it away"):
        _save(store, H200_A, launch=[_result("launch_overhead", 1.0)])
    assert store.read_text() == "{not json"


def test_a_newer_format_is_refused_by_version(store):
    store.write_text(json.dumps({"format": "gpuanalyze-ceilings", "version": 3, "machines": {"x": 1}}))
    with pytest.raises(GpuAnalyzeError, match="newer"):
        ceilings_for(_gpu_run(), store)


def test_an_old_single_machine_file_is_kept_side_by_side(store):
    store.write_text(json.dumps({"backend": "cpu", "device": "old", "results": [_busbw(5.0)]}))
    _save(store, H200_A, launch=[_result("launch_overhead", 1.0)])
    machines = json.loads(store.read_text())["machines"]
    assert sorted(machines) == ["?/cpu/old", "node-a/cupy/NVIDIA H200"]


def test_a_missing_default_cache_directory_is_created_the_xdg_way(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUANALYZE_CEILINGS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = CS.default_path()
    _save(path, H200_A, launch=[_result("launch_overhead", 1.0)])
    assert path.is_file() and (path.parent.stat().st_mode & 0o777) == 0o700
    assert ((tmp_path / "cache").stat().st_mode & 0o777) == 0o700


def test_a_chosen_location_gets_no_directories(store, tmp_path, monkeypatch):
    path = tmp_path / "missing" / "c.json"
    with pytest.raises(GpuAnalyzeError, match="no such directory"):
        _save(path, H200_A, launch=[_result("launch_overhead", 1.0)])
    assert not path.parent.exists()


# -- which ceilings apply to a trace ---------------------------------------------------------------------


def test_nothing_saved_yet_is_no_ceilings_and_no_note(store):
    assert ceilings_for(_gpu_run(), None) == (None, None)


def test_another_gpu_model_gets_a_note_naming_both(store):
    _save(store, LAPTOP, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(_gpu_run(), None)
    assert c is None and note is not None and "\n" not in note
    assert "CPU: x86_64 x8 (cpu) on host laptop" in note and "NVIDIA H200 on host node-a" in note
    assert note.endswith("not used")


def test_the_same_gpu_on_another_host_is_not_applied(store):
    _save(store, H200_B, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(_gpu_run("node-a"), None)
    assert c is None and "host node-b" in note and "host node-a" in note


def test_an_explicit_file_from_another_machine_gets_the_same_note(store, tmp_path):
    other = tmp_path / "theirs.json"
    _save(other, H200_B, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(_gpu_run("node-a"), other)
    assert c is None and str(other) in note and "not used" in note


def test_host_names_compare_by_first_label_and_gpu_names_ignore_case(store):
    _save(store, H200_A, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(RunInfo(host="NODE-A.cluster.example", gpu_name="nvidia  h200"), None)
    assert note is None and c is not None and c.busbw_gbps == 50.0 and c.host == "node-a"


def test_a_trace_without_host_matches_on_the_gpu_model_with_a_note(store):
    _save(store, H200_A, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(_gpu_run(None), None)
    assert c is not None and "GPU model (NVIDIA H200) only" in note


def test_a_trace_without_host_and_two_hosts_of_its_gpu_gets_none(store):
    _save(store, H200_A, allreduce=[_busbw(50.0)])
    _save(store, H200_B, allreduce=[_busbw(60.0)])
    c, note = ceilings_for(_gpu_run(None), None)
    assert c is None and "2 hosts" in note


def test_cpu_traces_use_cpu_ceilings_of_their_host_only(store):
    gpu_host = Fingerprint(backend="cupy", device="NVIDIA H200", host="laptop")
    _save(store, gpu_host, allreduce=[_busbw(900.0)])
    _save(store, LAPTOP, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(RunInfo(host="laptop", device="cpu"), None)
    assert note is None and c is not None and c.busbw_gbps == 50.0 and c.backends == ("cpu",)
    c, note = ceilings_for(RunInfo(device="cpu"), None)
    assert c is None and "does not record its host" in note


def test_cupy_and_numba_entries_of_one_gpu_combine_to_the_best(store):
    numba = Fingerprint(backend="numba", device="NVIDIA H200", host="node-a")
    _save(store, H200_A, matmul=[_result("matmul", 700.0, dtype="bfloat16"), _result("matmul", 50.0, dtype="float32")])
    _save(store, numba, matmul=[_result("matmul", 60.0, dtype="float32")])
    c, _ = ceilings_for(_gpu_run(), None)
    assert c is not None and c.matmul_tflops == {"bfloat16": 700.0, "float32": 60.0}
    assert c.backends == ("cupy", "numba")


def test_other_accelerators_get_a_note(store):
    _save(store, H200_A, allreduce=[_busbw(50.0)])
    c, note = ceilings_for(RunInfo(host="node-a", device="mtia"), None)
    assert c is None and "mtia" in note


def test_files_without_fingerprint_are_an_unknown_machine(store):
    store.write_text(json.dumps({"backend": "cpu", "device": "test-host", "results": [_busbw(9000.0)]}))
    for explicit in (None, store):
        c, note = ceilings_for(RunInfo(host="test-host", device="cpu"), explicit)
        assert c is None and "no machine fingerprint" in note


def test_a_bench_json_report_with_its_fingerprint_is_a_ceilings_file(tmp_path):
    report = tmp_path / "out.json"
    report.write_text(
        json.dumps(
            {
                "backend": "cupy",
                "device": "NVIDIA H200",
                "fingerprint": msgspec.to_builtins(H200_A),
                "results": [_busbw(77.0)],
            }
        )
    )
    c, note = ceilings_for(_gpu_run(), report)
    assert note is None and c is not None and c.busbw_gbps == 77.0


def test_a_missing_or_damaged_explicit_file_is_an_error_but_a_damaged_default_is_a_note(store, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    for explicit in (bad, tmp_path / "missing.json", tmp_path):
        with pytest.raises(GpuAnalyzeError):
            ceilings_for(_gpu_run(), explicit)
    store.write_text("{nope")
    c, note = ceilings_for(_gpu_run(), None)
    assert c is None and "not a ceilings file" in note and "not used" in note


def test_load_ceilings_keeps_working(store):
    _save(store, H200_A, allreduce=[_busbw(50.0)])
    assert C.load_ceilings(store).busbw_gbps == 50.0
    _save(store, LAPTOP, allreduce=[_busbw(5.0)])
    with pytest.raises(GpuAnalyzeError, match="2 machines"):
        C.load_ceilings(store)


# -- Ceilings ------------------------------------------------------------------------------------------


def test_a_ceiling_the_run_already_beats_is_no_limit():
    c = Ceilings(path="p", device="d", busbw_gbps=6125.0, matmul_tflops={"bfloat16": 700.0})
    assert c.beaten("busbw", 140400.0) and c.limit("busbw", 140400.0) is None
    assert not c.beaten("busbw", 1600.0) and c.limit("busbw", 1600.0) == 6125.0
    assert not c.beaten("matmul:float8", 5.0) and c.limit("matmul:float8", 5.0) is None  # nothing measured
    assert c.value("matmul:bfloat16") == 700.0 and c.value("matmul:float8") is None
    with pytest.raises(ValueError, match="unknown ceiling kind"):
        c.value("flops")


def test_fingerprint_key_is_host_backend_device():
    assert H200_A.key == "node-a/cupy/NVIDIA H200"
    assert Fingerprint(backend="cpu", device="x").key == "?/cpu/x"


def test_bench_fingerprint_of_this_machine():
    from gpuanalyze.kernels.backend import select
    from gpuanalyze.kernels.suite import fingerprint

    fp = fingerprint(select("cpu"))
    assert fp.backend == "cpu" and fp.host == CS.this_host() and fp.device.startswith("CPU: ")
    assert fp.cpu_count == len(os.sched_getaffinity(0))
