"""HostFacts from the system sampler's readings (and without them), and how the report shows them."""

from __future__ import annotations

import json
import math

import pytest
from rich.console import Console

from analyzer.analysis import thresholds as T
from analyzer.analysis.host_facts import host_facts
from analyzer.api import OVERSUBSCRIBED_NOTE, analyze
from analyzer.render.json_report import render_json
from analyzer.render.terminal import host_line, render_terminal
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.host_sample import HostSample, encode_host_sample
from gpuanalyze.ingest.trace.runinfo import RunInfo
from tests.conftest import make_row, write_trace


def sample(i: int = 0, **kw) -> HostSample:
    base = dict(
        unix_ns=10**18 + i * 10**9,
        interval_s=1.0,
        cpu_util_pct=50.0,
        busy_cores=1.0,
        run_queue=1,
        load_avg=1.0,
        process_cpu_cores=0.8,
        workers_cpu_cores=0.2,
        rss_bytes=2**30,
    )
    return HostSample(**{**base, **kw})


def test_without_readings_the_run_cpu_count_is_shared_by_local_ranks():
    facts = host_facts(RunInfo(cpu_count=8, world_size=2, gpu_count=2))
    assert (facts.cores_available, facts.cores_free, facts.sampled) == (4.0, 4.0, False)


def test_the_cgroup_quota_caps_the_cores_available():
    assert host_facts(RunInfo(cpu_count=8, cpu_quota_cores=2.5)).cores_available == 2.0
    assert host_facts(RunInfo(cpu_count=2, cpu_quota_cores=16.0)).cores_available == 2.0


def test_a_quiet_host_leaves_every_core_free():
    facts = host_facts(RunInfo(cpu_count=4, host_cpus=4), [sample(i) for i in range(10)])
    assert facts.sampled and facts.samples == 10
    assert facts.cores_free == facts.cores_available == 4.0 and not facts.oversubscribed
    assert facts.process_cpu_cores == pytest.approx(0.8) and facts.rss_bytes == 2**30


def test_other_work_takes_its_cores_from_the_free_ones():
    # 2 CPUs busy, 1 of them by this run: one core is taken by someone else
    facts = host_facts(RunInfo(cpu_count=4, host_cpus=4), [sample(i, busy_cores=2.0) for i in range(5)])
    assert facts.cores_free == pytest.approx(3.0)
    # a host busy with others leaves the floor, never zero or less
    readings = [sample(i, busy_cores=2.0, process_cpu_cores=0.1, workers_cpu_cores=None, run_queue=9) for i in range(5)]
    busy = host_facts(RunInfo(cpu_count=2, host_cpus=2), readings)
    assert busy.cores_free == T.MIN_FREE_CORES and busy.oversubscribed


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_oversubscribed_when_a_substantial_part_of_the_run_had_more_runnable_threads_than_cpus(share):
    n = 20
    hot = math.ceil(share * n)
    cpus = 4
    limit = T.OVERSUBSCRIBED_RUNNABLE_PER_CPU.value * cpus
    readings = [sample(i, run_queue=int(limit) + 3 if i < hot else 1) for i in range(n)]
    facts = host_facts(RunInfo(cpu_count=cpus, host_cpus=cpus), readings)
    assert facts.oversubscribed_share == pytest.approx(hot / n)
    assert facts.oversubscribed == (hot / n >= T.OVERSUBSCRIBED_SHARE.value)


def _trace(tmp_path, readings):
    rows = []
    for i in range(30):
        row = make_row(i, wall=20.0, data=1.0)
        if i < len(readings):
            row[S.SYSTEM] = encode_host_sample(readings[i])
        rows.append(row)
    return write_trace(tmp_path / "t.arrow", rows, run={"cpu_count": 2, "host_cpus": 2})


def test_the_report_shows_the_host_and_says_when_it_was_oversubscribed(tmp_path):
    readings = [sample(i, run_queue=6, load_avg=5.0, gpu_util_pct=90.0, gpu_power_w=300.0) for i in range(10)]
    report = analyze(_trace(tmp_path, readings))
    assert report.host is not None and report.host.oversubscribed
    assert OVERSUBSCRIBED_NOTE in report.notes
    system = json.loads(render_json(report))["system"]
    assert system["cores_available"] == 2.0 and system["oversubscribed"] is True
    assert system["load_avg"] == 5.0 and system["rss_bytes"] == 2**30 and system["gpu_util_pct"] == 90.0
    console = Console(width=100, record=True)
    console.print(render_terminal(report))
    out = console.export_text()
    assert host_line(report.host) in out.replace("\n", " ") or "oversubscribed" in out


def test_a_quiet_sampled_run_has_no_note_and_no_gpu_keys(tmp_path):
    report = analyze(_trace(tmp_path, [sample(i) for i in range(10)]))
    assert report.host is not None and report.host.sampled and not report.host.oversubscribed
    assert OVERSUBSCRIBED_NOTE not in report.notes
    system = json.loads(render_json(report))["system"]
    assert system["samples"] == 10 and "gpu_util_pct" not in system
    assert "oversubscribed" not in host_line(report.host)


def test_a_directory_of_rank_files_takes_the_lowest_rank_readings(tmp_path):
    """The out-of-core path (a directory of rank files) reads the readings of the lowest rank's file."""
    for rank, queue in ((0, 1), (1, 9)):
        rows = []
        for i in range(30):
            row = make_row(i, rank=rank, wall=20.0, data=1.0)
            if i < 10:
                row[S.SYSTEM] = encode_host_sample(sample(i, run_queue=queue))
            rows.append(row)
        run = {"cpu_count": 4, "host_cpus": 4, "world_size": 2, "rank": rank, "run_id": "r"}
        write_trace(tmp_path / f"trace.rank{rank}.arrow", rows, run=run)
    report = analyze(tmp_path)
    assert report.host is not None and report.host.sampled and report.host.samples == 10
    assert report.host.run_queue == 1.0 and not report.host.oversubscribed


def test_low_priority_work_does_not_take_a_core_from_the_job(tmp_path):
    # 2 CPUs, one busy with this run, the other with a niced background loop: both are free to the job
    readings = [
        sample(i, busy_cores=2.0, niced_cores=1.0, nice=0, process_cpu_cores=1.0, workers_cpu_cores=None)
        for i in range(5)
    ]
    facts = host_facts(RunInfo(cpu_count=2, host_cpus=2), readings)
    assert facts.cores_free == pytest.approx(2.0) and facts.niced_cores == pytest.approx(1.0)
    assert facts.priority is not None and "niced" in facts.priority and "autogroup" not in facts.priority
    # the same load at the job's priority takes the core
    equal = [
        sample(i, busy_cores=2.0, niced_cores=0.0, nice=0, process_cpu_cores=1.0, workers_cpu_cores=None)
        for i in range(5)
    ]
    assert host_facts(RunInfo(cpu_count=2, host_cpus=2), equal).cores_free == pytest.approx(1.0)
    # a niced job: its own time is in the nice column, so niced work competes with it
    niced_job = [
        sample(i, busy_cores=2.0, niced_cores=2.0, nice=10, process_cpu_cores=1.0, workers_cpu_cores=None)
        for i in range(5)
    ]
    facts = host_facts(RunInfo(cpu_count=2, host_cpus=2), niced_job)
    assert facts.cores_free == pytest.approx(1.0) and facts.priority is None
    report = analyze(_trace(tmp_path, readings))
    assert any("low-priority" in n for n in report.notes)  # the report says what it assumed
    grouped = [sample(i, busy_cores=2.0, niced_cores=1.0, nice=0, autogroup=True) for i in range(5)]
    assert "autogroup" in (host_facts(RunInfo(cpu_count=2, host_cpus=2), grouped).priority or "")
