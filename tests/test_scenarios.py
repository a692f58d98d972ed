"""The fix loops (tests/scenarios/fixes.py) build and train, a fix changes what a step costs and not
what it computes, and benchmarks/projection_validation.py applies the fix a finding names and
summarises its pairs as documented. No timing is asserted."""

from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from analyzer.analysis.fixes import BatchFix, MicroBatchFix, PrecisionFix, WorkerFix  # noqa: E402
from benchmarks.projection_validation import Pair, background_load, summarise  # noqa: E402
from benchmarks.validation_cases import CASES, Case, Fix, fixes_of  # noqa: E402
from tests.scenarios.fixes import FixLoop, run_loop  # noqa: E402


def tiny(cfg: FixLoop, steps: int = 2) -> FixLoop:
    """The loop at a couple of steps, with the sleeps and the CPU work kept small."""
    return replace(
        cfg,
        steps=steps,
        batch=min(cfg.batch, 16),
        epochs=min(cfg.epochs, 2),
        sample_sleep_s=min(cfg.sample_sleep_s, 1e-5),
        fn_sleep_s=min(cfg.fn_sleep_s, 1e-4),
        sample_numpy_reps=min(cfg.sample_numpy_reps, 2),
        fn_python_reps=min(cfg.fn_python_reps, 1),
        num_workers=0,
    )


@pytest.mark.parametrize("case", [c for c in CASES if c.loop is not None], ids=lambda c: c.name)
def test_every_case_loop_and_its_fix_train_a_couple_of_steps(case):
    assert case.loop is not None
    before = tiny(case.loop)
    losses = run_loop(before)
    assert len(losses) == before.steps * before.epochs * before.accumulate and all(v == v for v in losses)
    assert run_loop(before) == losses  # seeded: the same numbers every run
    fix = case.choose(fixes_for(case))
    assert fix is not None
    after = case.apply(fix)
    assert isinstance(after, FixLoop)
    assert (after == case.loop) == (fix.key == "none" and not case.none_check)  # one knob turned, or none
    assert len(run_loop(tiny(after))) > 0


def fixes_for(case: Case) -> list[Fix]:
    """The fixes the analyzer is expected to name for the case's kind."""
    kind = case.kind
    if kind.startswith("num_workers") or kind == "persistent_workers":
        return [Fix("num_workers", 2, persistent=True)]
    if kind.startswith("batch size"):
        return [Fix("batch", 2)]
    if kind.startswith("custom loader"):
        return [Fix("prefetch_thread"), Fix("cheaper_loading")]
    if kind == "cheaper batch construction":
        return [Fix("cheaper_loading")]
    if kind == "logging frequency":
        return [Fix("log_every", 50)]
    if kind == "fewer, larger micro-batches":
        return [Fix("micro_batch", 16, accumulate=1)]
    if kind == "bf16 autocast (CPU)":
        return [Fix("precision", "bf16")]
    return [Fix("none")]


def test_a_custom_loader_fix_changes_the_cost_not_the_batches():
    base = FixLoop(function_loader=True, fn_python_reps=1, batch=4, features=8, hidden=8, steps=5)
    losses = run_loop(base)
    assert run_loop(replace(base, prefetch_thread=True)) == losses
    assert run_loop(replace(base, fn_cheap=True)) == losses
    assert run_loop(replace(base, fn_python_reps=0, fn_sleep_s=1e-4)) == losses


def test_batched_fetch_logging_and_item_reads_leave_the_losses_unchanged():
    base = FixLoop(batch=8, features=8, hidden=8, steps=6)
    losses = run_loop(base)
    assert run_loop(replace(base, batched_fetch=True)) == losses
    assert run_loop(replace(base, log_every=1, log_values=10)) == losses
    assert run_loop(replace(base, item_every=1)) == losses


def test_a_larger_batch_is_one_knob_and_keeps_the_sample_count():
    case = next(c for c in CASES if c.kind == "batch size (compute-bound)")
    assert case.loop is not None
    after = case.apply(Fix("batch", 2))
    assert isinstance(after, FixLoop)
    assert (after.batch, after.steps) == (case.loop.batch * 2, case.loop.steps // 2)
    assert replace(after, batch=case.loop.batch, steps=case.loop.steps) == case.loop


def test_bad_loop_settings_are_refused():
    with pytest.raises(ValueError):
        FixLoop(steps=0)
    with pytest.raises(ValueError):
        FixLoop(prefetch_thread=True)
    with pytest.raises(ValueError):
        FixLoop(sample_sleep_s=-1.0)


def finding(cause: str, fix: object = None, recs: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(cause=cause, projection=SimpleNamespace(fix=fix), recommendations=recs)


def test_fixes_of_reads_the_projection_setting_first_then_the_cause_then_the_advice():
    f = finding(
        "input_pipeline",
        WorkerFix(2),
        (
            "Load in parallel: DataLoader(num_workers=2)",
            "Keep workers alive with persistent_workers=True.",
            "Make Dataset.__getitem__ cheaper: cache decoded samples.",
        ),
    )
    assert fixes_of(f) == [Fix("num_workers", 2, persistent=True), Fix("cheaper_loading")]
    assert fixes_of(finding("straggler")) == [Fix("balance")]
    assert fixes_of(finding("host_sync"))[0].key == "sync_every"
    host = finding("unattributed_host", recs=("wrap it", "Look for per-step logging ... and do it every N steps."))
    assert [x.key for x in fixes_of(host)] == ["log_every"]
    assert fixes_of(finding("per_step_overhead", BatchFix(2))) == [Fix("batch", 2)]
    assert fixes_of(finding("fp32_math", PrecisionFix("float16"))) == []  # fp16 autocast: no CPU loop knob
    assert fixes_of(finding("cpu_fp32_math", PrecisionFix("bfloat16"))) == [Fix("precision", "bf16")]
    micro = fixes_of(finding("micro_batch_overhead", MicroBatchFix(16, 1)))
    assert micro == [Fix("micro_batch", 16, accumulate=1)]


def test_advice_against_a_thread_is_not_read_as_a_thread():
    cpu = finding(
        "input_pipeline",
        recs=(
            "Load in the background with processes, not a thread: Python holds the GIL, so a prefetching thread "
            "would not overlap it with compute. Use a DataLoader with num_workers > 0, or make the batch function "
            "cheaper (vectorise it with numpy/torch).",
        ),
    )
    assert [f.key for f in fixes_of(cpu)] == ["cheaper_loading"]
    io = finding("input_pipeline", recs=("Load in the background: a prefetching thread for a custom batch function.",))
    assert [f.key for f in fixes_of(io)] == ["prefetch_thread"]


def test_a_case_applies_its_preferred_fix_when_recommended_and_refuses_what_it_cannot_do():
    py = next(c for c in CASES if c.prefer == ("cheaper_loading",))
    fixes = [Fix("prefetch_thread"), Fix("cheaper_loading")]
    assert py.choose(fixes) == Fix("cheaper_loading")
    assert replace(py, prefer=()).choose(fixes) == Fix("prefetch_thread")
    ddp = next(c for c in CASES if c.ddp_batches is not None)
    half = sum(ddp.ddp_batches) // 2
    assert ddp.apply(Fix("balance")) == (half, sum(ddp.ddp_batches) - half) == (1184, 1184)
    assert ddp.apply(Fix("num_workers", 2)) is None and ddp.choose([Fix("sync_every", 50)]) is None
    sleep = next(c for c in CASES if c.kind == "num_workers")
    assert sleep.apply(Fix("prefetch_thread")) is None  # a DataLoader loop has no batch function
    mem = next(c for c in CASES if c.kind == "cheaper batch construction")
    assert mem.choose([Fix("num_workers", 2), Fix("cheaper_loading")]) == Fix("num_workers", 2)  # the projected one
    assert mem.choose([Fix("cheaper_batches"), Fix("cheaper_loading")]) == Fix("cheaper_batches")


def pair(
    case: str,
    error: float | None,
    *,
    conf: str = "high",
    slower: bool = False,
    inside: bool | None = None,
    rec: bool = True,
) -> Pair:
    return Pair(
        mode="quiet",
        case=case,
        kind="k",
        verdict="data_loading",
        cause="c",
        confidence=conf,
        fix="f",
        bound=False,
        before_ms=10.0,
        projected_ms=None if error is None else 5.0,
        low_ms=None,
        high_ms=None,
        measured_ms=None if error is None else 5.0 / (1 + error),
        error=error,
        inside=inside,
        slower=slower,
        recommendation=rec,
    )


def test_summary_statistics_coverage_and_slower_recommendations():
    pairs = [
        pair("a", 0.05, inside=True),
        pair("b", -0.20, inside=False),
        pair("c", 0.02, conf="low", slower=True),  # low confidence: not counted
        pair("d", 0.08, conf="medium", slower=True),
        pair("e", -0.01, rec=False, slower=True),  # a healthy 'change nothing': not a recommendation
        pair("f", None),
    ]
    s = summarise(pairs, "quiet")
    assert s["measured"] == 5 and s["not_applied"] == ["f"]
    assert s["median_abs_error"] == pytest.approx(0.05)
    assert (s["worst_error"], s["worst_case"]) == (-0.20, "b")
    assert (s["coverage"], s["with_interval"]) == (0.5, 2)
    assert s["slower_medium_high"] == ["d"]
    met = {t["target"].split()[0]: t for t in s["targets"]}
    assert met["median"]["met"] and "b (-20%)" in met["median"]["why"]
    assert not met["interval"]["met"] and "b" in met["interval"]["why"]
    assert not met["no"]["met"]


def test_summary_without_intervals_says_why_and_busy_mode_has_no_median_target():
    s = summarise([pair("a", 0.01)], "busy")
    assert s["coverage"] is None
    assert [t["target"].split()[0] for t in s["targets"]] == ["interval", "no"]
    assert "low_ms/high_ms" in s["targets"][0]["why"]


def test_background_load_processes_are_gone_after_the_block_even_on_error():
    with pytest.raises(RuntimeError), background_load(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # running
        raise RuntimeError
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_ddp_ranks_with_their_own_shard_sizes(tmp_path):
    from gpuanalyze.ingest.trace.reader import load_trace
    from tests.scenarios.ddp import run_ddp

    run_ddp(tmp_path / "trace.arrow", batches=(4, 6), width=(8, 16), steps=4)
    traces = [load_trace(tmp_path / f"trace.rank{r}.arrow") for r in (0, 1)]
    assert [t.frame.height for t in traces] == [4, 4]
    with pytest.raises(ValueError):
        run_ddp(tmp_path / "x.arrow", batches=(4,))
