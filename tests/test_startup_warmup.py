"""Warm-up by evidence: start-up work per step (compilation, allocator, module loading), whatever the step number.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import analyze
from tests import mechanism_fixtures as F
from tests.conftest import SHARED, shared_kineto
from tests.kineto_fixtures import ev, write

EXTERNAL = SHARED / "external_traces"


# -- a single warm-up step is unknown, with what to record -----------------------------------------


def test_a_single_step_whose_idle_no_host_call_covers_is_untraced_host_work_whatever_its_number(tmp_path):
    """Idle in gaps no host call covers is host work the trace does not show (host/untraced), with what to record;
    the step's number decides nothing (it used to be warm-up as step #0 and batch_size as step #6)."""
    doc = F.single_step_trace()
    for number in ("ProfilerStep#0", "ProfilerStep#6"):
        doc["traceEvents"][0]["name"] = number
        r = analyze(write(tmp_path / f"{number[-1]}.json", doc))
        assert (r.bottleneck, r.findings[0].cause) == ("host", "untraced")
        assert "with_stack=True" in " ".join(r.findings[0].recommendations)


def _step_stats(path):
    from gpuanalyze.ingest.kineto.parse import load_kineto
    from gpuanalyze.ingest.trace import schema as S

    frame = (shared_kineto if SHARED in path.parents else load_kineto)(path).frame  # a shared trace once
    return [
        (step, wall, S.decode_kernel_stats(text) if text is not None else None)
        for step, wall, text in frame.select(S.STEP, S.WALL_MS, S.KERNEL_STATS).iter_rows()
    ]


def test_start_up_work_per_step_counts_nested_phases_once_and_names_the_outermost(tmp_path):
    doc = F.startup_trace(["compile", "malloc", "module", ""])
    doc["traceEvents"] += [  # routine calls a steady step makes too, in the steady step: not start-up
        ev("cuda_runtime", "cudaMallocAsync", 300_500, 50),
        ev("cuda_runtime", "cudaFreeAsync", 300_600, 50),
        ev("overhead", "Activity Buffer Request", 300_700, 50),
    ]
    (_, _, compiled), (_, _, malloc), (_, _, module), (_, _, steady) = _step_stats(write(tmp_path / "t.json", doc))
    # before: KernelStats had no start-up time at all
    assert compiled.startup_ms == pytest.approx(80.0)  # three nested dynamo_timed phases, counted once
    assert [(o.name, o.count) for o in compiled.startup_ops] == [("_compile.compile_inner (dynamo_timed)", 1)]
    assert malloc.startup_ms == pytest.approx(80.0) and malloc.startup_ops[0].count == 8
    assert {o.name for o in module.startup_ops} == {"cuModuleLoadData", "Lazy Function Loading"}
    assert module.startup_ms == pytest.approx(80.0)
    # every compiled step runs the compiled region and the cache lookup; pooled allocations and profiler
    # buffers are routine
    assert steady.startup_ms == 0.0 and steady.startup_ops == ()


@pytest.mark.parametrize(("work", "first"), [(["compile", "malloc", "module"], 0), (["malloc"] * 3, 40)])
def test_steps_that_are_all_start_up_work_are_unknown_with_what_they_did(tmp_path, work, first):
    r = analyze(write(tmp_path / "t.json", F.startup_trace(work, first=first)))
    # before: host/input_preprocessing, projected from 100 to 18 ms: several steps, so the one-step rule
    # did not apply, and steps #40-#42 are not among the run's first
    assert r.bottleneck == "unknown" and not r.findings and r.confidence.level == "low"
    why = r.confidence.reason
    assert "record more steps" in why and "skip_first" in why
    for kind in work:
        name = F.STARTUP_WORK[kind][0][1]
        assert name in why, (name, why)
    assert f"step #{first} (100 ms): 80 ms (80%)" in why


def test_steady_steps_after_start_up_or_many_start_up_steps_are_judged(tmp_path):
    steady = analyze(write(tmp_path / "steady.json", F.startup_trace([""] * 27)))
    assert steady.bottleneck != "unknown"
    # a long run: the fixed warm-up skip drops the three start-up steps, the verdict is the steady one
    long = analyze(write(tmp_path / "long.json", F.startup_trace(["compile", "malloc", "module"] + [""] * 27)))
    assert (long.bottleneck, long.findings[0].cause) == (steady.bottleneck, steady.findings[0].cause)
    assert long.metrics.accounting.warmup == 3
    # a short one with steady steps after start-up ones (below the fixed warm-up skip's reach): the start-up steps
    # settle, left out of the rules, which judge the steady ones as in the steady run
    for work in (["compile", "malloc", "module", ""], ["compile", "", "", ""]):
        short = analyze(write(tmp_path / "short.json", F.startup_trace(work)))
        lead = [i for i, kind in enumerate(work) if kind]
        assert short.steady.settling == tuple(lead)
        assert (short.bottleneck, short.findings[0].cause) == (steady.bottleneck, steady.findings[0].cause)
        assert any(f"{len(lead)} settling" in n for n in short.notes), short.notes
    # start-up work on every one of many steps is not warm-up but work repeated each step: judged
    many = analyze(write(tmp_path / "many.json", F.startup_trace(["malloc"] * 12)))
    assert many.bottleneck != "unknown" and "record more steps" not in many.confidence.reason


def test_an_imported_warm_up_trace_written_as_arrow_is_still_warm_up(tmp_path):
    from gpuanalyze.ingest.kineto.parse import load_kineto
    from gpuanalyze.ingest.timeline.step_rows import write_trace_file

    trace = load_kineto(write(tmp_path / "t.json", F.startup_trace(["compile", "compile"])))
    write_trace_file(trace, tmp_path / "t.arrow", force=False)
    r = analyze(tmp_path / "t.arrow")
    assert r.bottleneck == "unknown" and "_compile.compile_inner (dynamo_timed)" in r.confidence.reason


def test_frees_in_most_steps_are_churn_not_start_up(tmp_path):
    """cudaFree in every iteration (the caching allocator emptied each step) is allocation churn (owner allocator),
    judged by the sync rule, not start-up work that makes every step warm-up; the same calls in a single step are
    first allocations (device set-up)."""
    from analyzer.analysis.kernel_metrics import startup_owned_ms

    work = ["free"] * 5
    F.STARTUP_WORK.setdefault("free", [("cuda_runtime", "cudaFree", j * 10_000.0, 10_000) for j in range(8)])
    stats = [st for _, _, st in _step_stats(write(tmp_path / "t.json", F.startup_trace(work)))]
    assert all(st.idle_owner_allocator_ms > 0 and startup_owned_ms(st) < 0.25 * 100 for st in stats)
    r = analyze(tmp_path / "t.json")
    assert r.bottleneck != "unknown" and "record more steps" not in r.confidence.reason
    one = [st for _, _, st in _step_stats(write(tmp_path / "one.json", F.startup_trace(["free"])))]
    assert one[0].idle_owner_allocator_ms == 0 and startup_owned_ms(one[0]) >= 0.25 * 100


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_real_traces_start_up_share_per_step():
    from analyzer.analysis.kernel_metrics import startup_owned_ms
    from analyzer.analysis.thresholds import WARMUP_STARTUP

    start_up = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    for path in sorted(EXTERNAL.rglob("*.json.gz")):
        rel = path.relative_to(EXTERNAL).as_posix()
        rows = [(wall, st) for _, wall, st in _step_stats(path) if st is not None and wall > 0]
        # frees every iteration are churn (owner allocator), not start-up
        shares = [startup_owned_ms(st) / wall for wall, st in rows]
        if rel == start_up:  # 39 of its 43 s in context creation, cudaFree and cudaMalloc
            assert shares and min(shares) >= WARMUP_STARTUP, (rel, shares)
        elif "mi250_minitoy" in rel:  # step #1's idle is 70% module loading (first hipLaunchKernel calls)
            assert shares[0] >= WARMUP_STARTUP and all(s < WARMUP_STARTUP for s in shares[1:]), (rel, shares)
        elif "rtx2080ti" in rel:  # step-less, cut into iterations: the first pays the start-up work, unless the
            # capture's set-up (before its first device work) holds it, reported apart
            first = shares[0] >= WARMUP_STARTUP or shared_kineto(path).run.setup is not None
            assert first and all(s < WARMUP_STARTUP for s in shares[1:]), (rel, shares)
        else:  # steady steps are judged as before
            assert all(s < WARMUP_STARTUP for s in shares), (rel, shares)
    b200 = _step_stats(EXTERNAL / "tracelens/b200_eager_trace.json.gz")
    # CUPTI's overhead records of first launches
    assert {o.name for _, _, st in b200 if st is not None for o in st.startup_ops} == {"Lazy Function Loading"}
