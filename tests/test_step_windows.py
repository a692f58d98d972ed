"""ProfilerStep windows that nest or overlap within a thread are cut at the next step's start (one
sort, linear work after it), counted in a note; other threads' steps may overlap, within a bound."""

from __future__ import annotations

from gpuanalyze.ingest.kineto.parse import load_kineto
from gpuanalyze.ingest.timeline.step_windows import MAX_OPEN, OVERLAP_US, resolve_windows
from gpuanalyze.ingest.trace import schema as S
from tests.kineto_fixtures import ev, write


def test_nested_windows_of_one_thread_are_cut_and_counted():
    steps = [(i, i * 100.0, 10_000.0 + i, 0) for i in range(5)]  # each contains every later one
    windows, notes = resolve_windows(steps)
    assert [(s, a, b) for s, a, b in windows] == [(i, i * 100.0, (i + 1) * 100.0) for i in range(4)] + [
        (4, 400.0, 10_004.0)
    ]
    assert len(notes) == 1 and notes[0].startswith("4 ProfilerStep window(s)")


def test_a_short_tail_and_another_threads_steps_are_kept():
    tail = [(0, 0.0, 1000.0 + OVERLAP_US / 2, 0), (1, 1000.0, 2000.0, 0)]
    assert resolve_windows(tail) == ([(0, 0.0, 1000.0 + OVERLAP_US / 2), (1, 1000.0, 2000.0)], [])
    streams = [(n, n * 10_000.0 + d, n * 10_000.0 + d + 10_000.0, t) for n in range(3) for t, d in ((0, 0), (1, 20))]
    windows, notes = resolve_windows(streams)
    assert notes == [] and sorted(windows) == sorted((s, a, b) for s, a, b, _ in streams)


def test_too_many_streams_open_at_once_are_cut_whatever_their_thread():
    steps = [(i, float(i), 1e6 + i, i) for i in range(MAX_OPEN + 10)]  # one thread each, all open together
    windows, notes = resolve_windows(steps)
    assert all(b <= a + 1.0 for _, a, b in windows[:-1])
    assert any("open at once" in n for n in notes)


def test_an_import_of_nested_step_ranges_has_disjoint_windows(tmp_path):
    n = 400
    events = []
    for i in range(n):
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", i * 10, (n - i) * 10 + 5000),
            ev("cuda_runtime", "cudaLaunchKernel", i * 10 + 1, 2, correlation=i + 1),
            ev("kernel", "k", i * 10 + 3, 4, stream=7, correlation=i + 1),
        ]
    trace = load_kineto(write(tmp_path / "nested.json", {"traceEvents": events}))
    walls = trace.frame.get_column(S.WALL_MS).to_list()
    assert len(walls) == n and max(walls[:-1]) <= 0.010 + 1e-9  # 10 us apart: each window ends at the next start
    assert any(f"{n - 1} ProfilerStep window(s)" in note for note in trace.notes)
