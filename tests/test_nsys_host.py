"""The host side of an Nsight Systems export: synchronisation records, OS runtime calls on the loop thread,
thread names and the CUDA device table, read into the same evidence a Kineto trace gives."""

import pytest

from gpuanalyze.ingest.nsys.load import load_nsys_ranks
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from tests.nsys_fixtures import Export, build_export


def _col(trace, name):
    return trace.frame.get_column(name).to_list()


def _stats(trace):
    return [S.decode_kernel_stats(v) for v in _col(trace, S.KERNEL_STATS)]


def test_a_call_a_synchronisation_record_names_is_blocking_whatever_its_name(tmp_path):
    # a call runtime_calls does not read as blocking by its name; CUPTI recorded that it waited for the device
    plain = load_any(build_export(tmp_path / "a.sqlite", Export(sync_call="cudaFutureWait_v13000")))
    host = load_any(build_export(tmp_path / "b.sqlite", Export(sync_call="cudaFutureWait_v13000", host=True)))
    assert _col(plain, S.SYNC_MS) == pytest.approx([0.005] * 3)  # the pageable copy's launch only
    assert _col(host, S.SYNC_MS) == pytest.approx([0.505] * 3)
    assert any("3 runtime call(s) waited for the device" in n for n in host.notes)


def test_calls_cuda_says_do_not_wait_stay_non_blocking(tmp_path):
    e = Export(sync_call="cudaStreamWaitEvent_v3020", host=True)
    t = load_any(build_export(tmp_path / "r.sqlite", e))
    assert _col(t, S.SYNC_MS) == pytest.approx([0.005] * 3)
    assert not any("waited for the device" in n for n in t.notes)


def test_without_runtime_calls_the_records_are_the_waits(tmp_path):
    e = Export(host=True, tables=("kernel", "memcpy", "nvtx"))
    t = load_any(build_export(tmp_path / "r.sqlite", e))
    assert _col(t, S.SYNC_MS) == pytest.approx([0.498] * 3)  # the records' own times (0.5 ms less 2 us)
    assert any("host waits read from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION alone" in n for n in t.notes)


def test_io_waits_on_the_loop_thread_are_waiting_for_input(tmp_path):
    plain = load_any(build_export(tmp_path / "a.sqlite", Export()))
    host = load_any(build_export(tmp_path / "b.sqlite", Export(host=True)))
    assert _col(plain, S.DATA_WAIT_MS) == pytest.approx([0.0] * 3)
    # the loop thread's top-level 0.35 ms read (its nested read and the pin thread's long read are not counted)
    assert _col(host, S.DATA_WAIT_MS) == pytest.approx([0.35] * 3)
    owners = _stats(host)
    assert getattr(owners[1], S.owner_field("data_loader")) == pytest.approx(0.35)
    note = next(n for n in host.notes if n.startswith("OS runtime calls (OSRT_API)"))
    assert "'python3'" in note and "1.1 ms in 3 file/pipe/socket waits (read)" in note
    assert "pthread_cond_timedwait 3.0 ms" in note and "(not owned)" in note


def test_a_pin_memory_thread_says_the_loader_has_workers(tmp_path):
    plain = load_nsys_ranks(build_export(tmp_path / "a.sqlite", Export()))[0]
    host = load_nsys_ranks(build_export(tmp_path / "b.sqlite", Export(host=True)))[0]
    assert plain.end.loader_workers is None
    assert host.end.loader_workers == 1
    assert any("pin-memory thread (pt_data_pin)" in n for n in host.notes)


def test_the_cuda_device_table_maps_each_ranks_device_to_its_gpu(tmp_path):
    # both ranks run on their device 0 (CUDA_VISIBLE_DEVICES): rank 1's device 0 is GPU 1
    ranks = load_nsys_ranks(build_export(tmp_path / "r.sqlite", Export(pids=(10, 11), visible_devices=True)))
    assert [r.run.gpu_name for r in ranks] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]


def test_without_a_gpu_table_the_cuda_device_table_gives_the_sms(tmp_path):
    from gpuanalyze.ingest.nsys.db import NsysDb
    from gpuanalyze.ingest.nsys.meta import gpu_for, read_meta

    path = build_export(tmp_path / "r.sqlite", Export(host=True, gpu_table=False))
    with NsysDb(path) as db:
        gpu = gpu_for(read_meta(db), 0, 100)
    assert gpu is not None and gpu.sms == 132 and gpu.name is None


def test_notes_of_several_ranks_are_said_once(tmp_path):
    t = load_any(build_export(tmp_path / "r.sqlite", Export(pids=(10, 11), host=True)))
    assert len(t.notes) == len(set(t.notes))
    osrt = [n for n in t.notes if n.startswith("OS runtime calls")]
    assert len(osrt) == 2 and all("(on rank" in n for n in osrt)  # each rank's loop thread has its own tid
    assert sum("pin-memory thread" in n for n in t.notes) == 1  # the same on both ranks: once, no ranks named


def test_worker_threads_of_other_processes_name_the_loader_of_a_single_rank_only():
    from gpuanalyze.ingest.nsys.host_work import Threads, loader_note

    none = Threads()
    assert loader_note(none, capture_workers=2, world=1)[1] is True  # the workers are the one rank's
    assert loader_note(none, capture_workers=2, world=2) == (None, False)  # whose workers: unknown
    assert loader_note(Threads(workers=1), capture_workers=1, world=2)[1] is True
    assert loader_note(None, capture_workers=5, world=1) == (None, False)
