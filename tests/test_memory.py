"""Memory beside speed (docs/memory.md): per-step memory from Kineto ``[memory]`` events and Nsight Systems' CUDA
memory usage table, the batch fit, creep, and where the report shows them."""

from __future__ import annotations

import bisect
import gzip
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from analyzer.analysis import thresholds as T
from analyzer.analysis.fixes import MicroBatchFix
from analyzer.api import analyze
from analyzer.cli import app
from analyzer.render.console import report_console
from analyzer.render.json_report import report_dict
from analyzer.render.terminal import render_terminal
from gpuanalyze.ingest.kineto.parse import load_kineto
from gpuanalyze.ingest.nsys.load import load_nsys_ranks
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import SHARED, make_row, shared_kineto, shared_report
from tests.kineto_fixtures import ev, write
from tests.nsys_fixtures import MS, Export, build_export, global_pid

runner = CliRunner()
MB, GB = 10**6, 10**9


def said(*args: str) -> str:
    """What the command prints at 80 columns, words joined across the lines the panel wraps."""
    result = runner.invoke(app, [*args, "--width", "80"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())


TOTAL = 80 * GB


def mem(ts: float, allocated: int, reserved: int, delta: int, device_type: int = 1) -> dict[str, Any]:
    """A ``[memory]`` instant event as torch.profiler writes it with profile_memory=True."""
    args = {"Total Reserved": reserved, "Total Allocated": allocated, "Bytes": delta, "Addr": 1}
    args |= {"Device Type": device_type, "Device Id": 0 if device_type else -1}
    event = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts}
    return event | {"args": args}


def memory_trace(steps: int = 12, *, kept: int = 0, base: int = GB, act: int = 400 * MB) -> dict[str, Any]:
    """``steps`` 10 ms steps on an 80 GB GPU: ``base`` allocated before the first; each step allocates ``act`` of
    activations and frees them, and keeps ``kept`` more (a loss summed without .item()); reserved 2 GB."""
    events: list[dict[str, Any]] = [mem(-10.0, base, 2 * GB, base)]
    held = base
    for i in range(steps):
        lo = i * 10_000.0
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", lo, 10_000),
            ev("cuda_runtime", "cudaLaunchKernel", lo + 50, 10, correlation=i + 1),
            ev("kernel", "ampere_bf16_s16816gemm", lo + 100, 8_000, stream=7, correlation=i + 1),
            mem(lo + 200, held + act, 2 * GB, act),
            mem(lo + 5_000, held, 2 * GB, -act),
        ]
        if kept:
            held += kept
            events.append(mem(lo + 6_000, held, 2 * GB, kept))
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA A100", "totalGlobalMem": TOTAL}]}


def test_kineto_memory_events_give_each_steps_start_peak_and_reserved(tmp_path):
    doc = memory_trace(steps=3, kept=10 * MB)
    doc["traceEvents"].append(mem(15_000, 5 * GB, 9 * GB, 5 * GB, device_type=0))  # the CPU allocator: not the GPU's
    f = load_kineto(write(tmp_path / "m.json", doc)).frame
    assert f.get_column(S.MEM_START_BYTES).to_list() == [GB, GB + 10 * MB, GB + 20 * MB]
    assert f.get_column(S.PEAK_MEM_BYTES).to_list() == [GB + 400 * MB, GB + 410 * MB, GB + 420 * MB]
    assert f.get_column(S.MEM_RESERVED_BYTES).to_list() == [2 * GB] * 3


def test_growing_allocations_are_a_creep_with_its_growth_and_the_step_the_device_is_full(tmp_path):
    r = analyze(write(tmp_path / "m.json", memory_trace(kept=10 * MB)))
    m = r.metrics.memory
    assert m is not None and m.creep is not None and all(e.passed for e in m.creep.evidence)
    assert m.creep.per_step == pytest.approx(10 * MB)
    # the device is full when persistent + step part, x the reserve (2 GB over the peak), reaches 90% of 80 GB
    need = (m.persistent + m.transient) * (2 * GB / m.peak)
    left = (T.MEMORY_USABLE.value * TOTAL - need) / (10 * MB * 2 * GB / m.peak)
    assert m.creep.full_at == 11 + math.ceil(left)
    assert r.bottleneck != "unknown" or r.findings == ()  # a creep is never the verdict
    assert "memory creep memory at step start grows 10.00 MB per step over 11 steps" in said(str(tmp_path / "m.json"))


def test_a_flat_run_has_no_creep(tmp_path):
    m = analyze(write(tmp_path / "m.json", memory_trace())).metrics.memory
    assert m is not None and m.creep is None and m.persistent == GB and m.transient == 400 * MB


def test_nsys_memory_usage_table_gives_reserved_per_step_and_no_fit(tmp_path):
    """--cuda-memory-usage=true: the driver's allocations (memKind 2 Device; 1 Pinned is host memory) and frees."""
    path = build_export(tmp_path / "m.sqlite", Export(steps=4))
    rows = [(50 * MS, global_pid(100), 0, GB, 2, 0)]
    for i in range(4):
        t0 = 100 * MS + i * 10 * MS
        rows += [(t0 + 2 * MS, global_pid(100), 0, 100 * MB, 2, 0), (t0 + 5 * MS, global_pid(100), 0, 100 * MB, 2, 1)]
        rows.append((t0 + 3 * MS, global_pid(100), 0, 500 * MB, 1, 0))
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INT NOT NULL, globalPid INT, deviceId INT NOT NULL, "
            "contextId INT, address INT, pc INT, bytes INT NOT NULL, memKind INT NOT NULL, memoryOperationType INT "
            "NOT NULL, name TEXT, correlationId INT)"
        )
        db.executemany(
            "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, bytes, memKind, "
            "memoryOperationType) VALUES (?,?,?,?,?,?)",
            rows,
        )
    (t,) = load_nsys_ranks(path)
    assert t.frame.get_column(S.MEM_RESERVED_BYTES).to_list() == [GB + 100 * MB] * 4
    assert t.frame.get_column(S.PEAK_MEM_BYTES).null_count() == 4
    got = report_dict(analyze(path))["memory"]
    assert got["reserved_bytes"] == GB + 100 * MB and got["batch_x2_fits"] is None


def _launch_bound(step: int, *, start: int, peak: int) -> dict[str, Any]:
    row = make_row(step, wall=20.0, busy=5.0, peak=peak, samples=16)
    row[S.MEM_START_BYTES] = start
    row[S.MEM_RESERVED_BYTES] = peak
    return row


def test_batch_x2_that_fits_is_projected_and_one_that_does_not_projects_gradient_accumulation(trace_factory):
    run = {"gpu_memory_bytes": TOTAL, "device": "cuda"}
    fits = analyze(trace_factory([_launch_bound(i, start=10 * GB, peak=20 * GB) for i in range(30)], run=run))
    f = fits.findings[0]
    assert f.bottleneck == "batch_size" and f.projection.fix.params == (("batch_multiplier", 4),)
    assert fits.metrics.memory.largest() == 6  # (72 - 10) / 10
    tight = analyze(trace_factory([_launch_bound(i, start=40 * GB, peak=60 * GB) for i in range(30)], run=run))
    f = tight.findings[0]
    evidence = {e.metric: e for e in f.evidence}
    assert not evidence["memory_needed_at_x2"].passed  # 40 + 2 x 20 = 80 GB of 72 usable
    assert isinstance(f.projection.fix, MicroBatchFix) and f.projection.fix.accumulate == 2
    assert f.projection.step_ms == pytest.approx(20.0 - 1.5 / 2)  # the optimizer step paid once per 2 batches
    assert "does not fit" in f.recommendations[0] and "bf16 autocast" in f.recommendations[1]
    assert "fits" in f.recommendations[1]  # 40 + 2 x 10 = 60 GB: bf16 activations make x2 fit


def test_the_report_shows_memory_in_the_terminal_json_and_compare(tmp_path):
    path = write(tmp_path / "m.json", memory_trace())
    out = said(str(path))
    assert "memory peak 1.40 GB, at step start 1.00 GB, reserved 2.00 GB of 80.00 GB; batch x2 fits" in out
    got = json.loads(runner.invoke(app, [str(path), "--json"]).output)["memory"]
    assert got["persistent_bytes"] == GB and got["peak_bytes"] == GB + 400 * MB and got["batch_x2_fits"] is True
    grown = write(tmp_path / "g.json", memory_trace(base=2 * GB))
    assert "Memory, GB" in said("compare", str(path), str(grown))
    assert "peak 2.40 (+1.00), at step start 2.00 (+1.00)" in said("compare", str(path), str(grown))


def test_the_html_report_draws_memory_per_step(tmp_path):
    pytest.importorskip("plotly")
    path = write(tmp_path / "m.json", memory_trace())
    assert runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "r.html")]).exit_code == 0
    assert 'data-chart="memory"' in (tmp_path / "r.html").read_text()


def _kineto_traces() -> list[Path]:
    return sorted((SHARED / "external_traces").rglob("*.json.gz")) if SHARED.exists() else []


class _Event(msgspec.Struct):
    name: str = ""
    ts: float = 0.0
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _Doc(msgspec.Struct, rename="camel"):
    trace_events: list[_Event]
    device_properties: list[dict[str, Any]] = []


def _device_memory(path: Path) -> tuple[list[float], list[dict[str, Any]], _Doc] | None:
    """The device allocator's ``[memory]`` events of the device with the largest total, in time order (their times
    and args), and the trace's document (None without any), decoded with msgspec, not the importer (the args of
    the memory events only: all of them, as json.loads decoded them, were 3-4 s of CPU a run)."""
    doc = msgspec.json.decode(gzip.decompress(path.read_bytes()), type=_Doc)
    events = [(e.ts, msgspec.json.decode(e.args)) for e in doc.trace_events if e.name == "[memory]"]
    events = [(ts, a) for ts, a in events if a.get("Device Type")]
    if not events:
        return None
    by: dict[tuple[int, int], list[tuple[float, dict[str, Any]]]] = {}
    for ts, a in events:
        by.setdefault((a["Device Type"], a["Device Id"]), []).append((ts, a))
    top = sorted(max(by.values(), key=lambda es: max(a["Total Allocated"] for _, a in es)), key=lambda e: e[0])
    return [ts for ts, _ in top], [a for _, a in top], doc


@pytest.mark.parametrize("path", _kineto_traces(), ids=lambda p: p.name)
def test_every_shared_trace_with_memory_events_states_peak_persistent_and_whether_x2_fits(path):
    """Checked by hand against the raw events: per analysed step, allocated at its start (the first event's total
    less its bytes, else the last total before it), its peak, the reserved peak; over the steps as the report."""
    got = _device_memory(path)
    r = shared_report(path)
    m = r.metrics.memory
    if got is None:
        assert m is None
        return
    times, events, doc = got
    t = shared_kineto(path)
    windows = [(s / 1e3, s / 1e3 + w * 1e3) for s, w in zip(t.frame[S.START_UNIX_NS], t.frame[S.WALL_MS], strict=True)]
    starts, peaks, reserved = [], [], []
    for lo, hi in windows[r.metrics.warmup_steps :]:
        first, end = bisect.bisect_left(times, lo), bisect.bisect_left(times, hi)  # events in time order
        inside, before = events[first:end], events[:first]
        if not inside and not before:
            continue
        start = inside[0]["Total Allocated"] - inside[0]["Bytes"] if inside else before[-1]["Total Allocated"]
        starts.append(start)
        peaks.append(max([start] + [a["Total Allocated"] for a in inside]))
        reserved.append(max([a["Total Reserved"] for a in inside + before[-1:]]))
    assert m is not None and (m.peak, m.persistent, m.reserved) == (max(peaks), max(starts), max(reserved))
    total = doc.device_properties[0]["totalGlobalMem"]
    ratio = max(1.0, max(reserved) / max(peaks))
    step = max(p - s for p, s in zip(peaks, starts, strict=True))
    fits = (max(starts) + 2 * step) * ratio <= 0.9 * total
    console = report_console(80)  # what `gpuanalyze TRACE --width 80` prints of the report
    with console.capture() as printed:
        console.print(render_terminal(r))
    out = " ".join(printed.get().replace("│", " ").split())
    assert f"at step start {max(starts) / 1e9:,.2f} GB" in out
    assert ("batch x2 fits" if fits else "batch x2 does not fit") in out
