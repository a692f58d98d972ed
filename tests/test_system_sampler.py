"""The system sampler in a real profiled loop: readings land in the trace, failures stay quiet,
no thread outlives the profile; and lead_ms, the host time before a step's first phase."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import analyzer
from analyzer.analysis.host_facts import host_facts, samples_of
from analyzer.errors import GpuAnalyzeWarning
from analyzer.record.system_sampler import SystemSampler
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.host_sample import decode_host_sample
from gpuanalyze.ingest.trace.reader import load_trace
from tests.scenarios.loops import LoopConfig, make_loop, train


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpuanalyze-sampler"]


def _loop():
    return make_loop(LoopConfig(steps=6, batch=8, features=16))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the sampler reads /proc")
def test_readings_land_in_the_trace_and_no_thread_is_left(tmp_path):
    model, opt, loader = _loop()
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), system_interval_s=0.02) as prof:
        deadline = time.monotonic() + 60
        train(model, opt, loader)
        sampler = prof._output.sampler
        assert sampler is not None and sampler.running
        while sampler.samples < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        train(model, opt, loader)  # rows written now carry the readings
    assert not _sampler_threads() and not sampler.running
    trace = load_trace(prof.path)
    texts = trace.frame.get_column(S.SYSTEM).drop_nulls().to_list()
    assert 1 <= len(texts) <= trace.frame.height
    sample = decode_host_sample(texts[-1])
    assert sample.rss_bytes and sample.rss_bytes > 0 and sample.process_cpu_cores is not None
    assert sample.niced_cores is not None and sample.nice == os.nice(0)  # low-priority time kept apart
    assert trace.run.host_cpus == os.cpu_count()
    host = host_facts(trace.run, samples_of(trace.frame))
    assert host.sampled and host.samples == len(texts) and 0 < host.cores_free <= host.cores_available


def test_a_failing_sampler_warns_once_stops_and_training_goes_on(tmp_path, monkeypatch):
    model, opt, loader = _loop()
    plain = train(*_loop())

    def broken(self):
        raise RuntimeError("no /proc today")

    monkeypatch.setattr(SystemSampler, "_counters", broken)
    monkeypatch.setattr(SystemSampler, "start", _start_anywhere)
    with (
        pytest.warns(GpuAnalyzeWarning, match="system sampler stopped.*no /proc today") as record,
        analyzer.profile(model, out=str(tmp_path / "t.arrow"), system_interval_s=0.02) as prof,
    ):
        losses = train(model, opt, loader)
    assert len(record) == 1 and losses == plain
    assert not _sampler_threads()
    trace = load_trace(prof.path)
    assert trace.complete and trace.end.status == "ok" and trace.frame.get_column(S.SYSTEM).null_count() == 6


def _start_anywhere(self: SystemSampler) -> None:
    """start() without the /proc check, so the failure path runs on every system."""
    self._thread = threading.Thread(target=self._run, name="gpuanalyze-sampler", daemon=True)
    self._thread.start()


def test_no_sampler_when_switched_off(tmp_path):
    model, opt, loader = _loop()
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), system_interval_s=None) as prof:
        train(model, opt, loader)
        assert prof._output.sampler is None and not _sampler_threads()
    assert load_trace(prof.path).frame.get_column(S.SYSTEM).null_count() == 6


def test_lead_ms_holds_the_logging_after_optimizer_step(tmp_path):
    """Sleeping ("logging") after optimizer.step() in a DataLoader loop shows as lead_ms, inside other_ms."""
    pause_s = 0.02
    model, opt, loader = _loop()
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), system_interval_s=None) as prof:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(pause_s)
    f = load_trace(prof.path).frame
    lead, other = f.get_column(S.LEAD_MS).to_list(), f.get_column(S.OTHER_MS).to_list()
    assert all(v is not None for v in lead)
    # the first step starts after the trace file is created, at its first fetch; every later step
    # starts at the previous optimizer step and waits the pause before its fetch
    assert all(v >= pause_s * 1e3 for v in lead[1:])
    assert all(v <= o + 1e-6 for v, o in zip(lead, other, strict=True))


class FakeNvml:
    """The few pynvml calls the sampler makes, answering for one GPU."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

    def __init__(self) -> None:
        self.shut = False

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        pass

    def nvmlShutdown(self):  # noqa: N802
        self.shut = True

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        assert uuid == "GPU-test"
        return "handle"

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        return type("U", (), {"gpu": 87, "memory": 40})()

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        return type("M", (), {"used": 3 * 2**30, "total": 80 * 2**30})()

    def nvmlDeviceGetPowerUsage(self, h):  # noqa: N802
        return 312_000  # mW

    def nvmlDeviceGetTemperature(self, h, sensor):  # noqa: N802
        return 64

    def nvmlDeviceGetClockInfo(self, h, clock):  # noqa: N802
        if clock == self.NVML_CLOCK_MEM:
            raise RuntimeError("not supported")  # a query the GPU cannot answer is just not measured
        return 1980


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the sampler reads /proc")
def test_gpu_readings_come_from_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = SystemSampler(interval_s=0.02, gpu_uuid="GPU-test")
    sampler.start()
    deadline = time.monotonic() + 60
    while sampler.samples < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    s = decode_host_sample(sampler.take())
    assert (s.gpu_util_pct, s.gpu_mem_used_bytes, s.gpu_power_w, s.gpu_temp_c) == (87.0, 3 * 2**30, 312.0, 64.0)
    assert s.gpu_sm_clock_mhz == 1980.0 and s.gpu_mem_clock_mhz is None
    assert fake.shut and not sampler.running and sampler.take() is None  # taken once


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/stat").exists(), reason="needs fork and /proc")
def test_a_forked_child_neither_inherits_nor_starts_a_sampler(tmp_path):
    """A DataLoader worker is a forked child: it lets go of the parent's sampler and starts none."""
    import warnings

    model, opt, loader = _loop()
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), system_interval_s=0.02) as prof:
        train(model, opt, loader)
        assert prof._output.sampler is not None and prof._output.sampler.running
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+: fork with threads
            pid = os.fork()
        if pid == 0:  # the child: the profile switched itself off and holds no sampler
            ok = prof._output.sampler is None and not prof.enabled and not _sampler_threads()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert prof._output.sampler.running  # the parent's goes on
    assert os.waitstatus_to_exitcode(status) == 0 and not _sampler_threads()
