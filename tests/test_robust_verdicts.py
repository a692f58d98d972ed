"""Steady state, outlier steps, periodic spikes and verdict stability (analysis.steady, analysis.spikes,
analysis.stability): a few stalled steps do not decide the verdict, spikes are a finding with their
period and cost, and a verdict resamples do not repeat is not 'high'."""

import numpy as np
import pytest

from analyzer import analyze
from analyzer.analysis import thresholds as T
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row


def _loading(i, stall=0.0):
    # a data-loading loop: 10 ms of a 20 ms step waiting for data
    return make_row(i, wall=20.0 + stall, data=10.0, fwd=4.0, bwd=5.0, opt=1.0)


def test_a_few_stalled_steps_do_not_decide_the_verdict(trace_factory):
    # a healthy 20 ms CPU step; 3 of 60 steps stall 400 ms outside any phase (the host, not the loop)
    rows = [make_row(i, wall=420.0 if i in (20, 33, 47) else 20.0) for i in range(60)]
    r = analyze(trace_factory(rows))
    assert set(r.steady.outliers) == {20, 33, 47} and r.steady.period is None
    assert r.bottleneck == "none", [(f.bottleneck, f.cause) for f in r.findings]
    # cost still counts them: the mean is of every analysed step
    assert r.metrics.step_mean_ms > 35.0
    assert any("outlier" in n for n in r.notes)


def test_the_fix_leaves_the_outlier_steps_as_they_are(trace_factory):
    rows = [_loading(i, 300.0 if i in (15, 40) else 0.0) for i in range(60)]
    r = analyze(trace_factory(rows))
    f = r.findings[0]
    assert f.bottleneck == "data_loading"
    steady = analyze(trace_factory([_loading(i) for i in range(60)])).findings[0].projection
    # the same projection as without the stalls, plus what the stalls add to the mean
    added = r.metrics.step_mean_ms - steady.current_ms
    assert f.projection.step_ms == pytest.approx(steady.step_ms + added, rel=1e-6)
    assert f.projection.current_ms == pytest.approx(r.metrics.step_mean_ms)


def test_periodic_spikes_are_a_finding_with_period_and_cost(trace_factory):
    # every 10th step checkpoints for 60 ms on a healthy 20 ms step
    rows = [make_row(i, wall=80.0 if i % 10 == 0 else 20.0) for i in range(80)]
    r = analyze(trace_factory(rows))
    assert r.steady.period == 10
    f = next(f for f in r.findings if f.cause == "periodic_spikes")
    assert f.bottleneck == "host" and "Every 10 steps" in f.summary
    n = len(r.steady.outliers)
    excess = n * 60.0 / r.metrics.steps
    assert f.projection.saved_ms == pytest.approx(excess / 2, rel=0.05)  # every 20 steps instead of 10
    assert all(e.passed for e in f.evidence)
    assert f.share == pytest.approx(excess / f.projection.current_ms, rel=0.05)  # what the spikes take


def test_irregular_stalls_are_not_called_periodic(trace_factory):
    rng = np.random.default_rng(3)
    stalls = set(rng.choice(np.arange(5, 100), size=6, replace=False).tolist())
    rows = [make_row(i, wall=80.0 if i in stalls else 20.0) for i in range(100)]
    r = analyze(trace_factory(rows))
    assert not any(f.cause == "periodic_spikes" for f in r.findings) or r.steady.period is not None
    assert r.steady.period is None or r.steady.period_match >= T.PERIODIC_MATCH


def test_too_many_slow_steps_are_not_outliers(trace_factory):
    # half the steps are slow: two modes, and the rules judge them all
    rows = [make_row(i, wall=60.0 if i % 2 else 20.0) for i in range(60)]
    r = analyze(trace_factory(rows))
    assert r.steady.outliers == ()


def test_a_clear_verdict_is_stable(trace_factory):
    r = analyze(trace_factory([_loading(i) for i in range(60)]))
    assert r.stability is not None and r.stability.value == 1.0 and r.stability.resamples == T.BOOTSTRAP_RESAMPLES
    assert r.confidence.level == "medium" and "no readings of the host" in r.confidence.reason  # issue #37


def test_a_verdict_on_the_edge_is_unstable_and_not_high(trace_factory):
    # 80% of steps wait 5.25% of the step, the rest 4%: the mean sits on the 5% threshold, so the
    # verdict flips between resamples although 80% of the steps show the wait
    rng = np.random.default_rng(1)
    waits = rng.permutation([1.05] * 48 + [0.8] * 12)
    rows = [make_row(i, wall=20.0, data=float(w), fwd=7.0, bwd=9.5, opt=1.5) for i, w in enumerate(waits)]
    r = analyze(trace_factory(rows))
    assert r.stability is not None and r.stability.value is not None
    assert r.stability.value < T.STABLE_VERDICT.value, r.stability
    assert r.confidence.level != "high", r.confidence
    # the reason says what capped it: the unstable verdict, or a range reaching the current step
    assert r.bottleneck == "none" or any(w in r.confidence.reason for w in ("stability", "range reaches"))


def test_stability_below_the_cut_caps_the_level_below_high():
    from analyzer.analysis.findings import Confidence
    from analyzer.analysis.judge import _stable

    high = Confidence(0.95, "high", "95% of 60 step(s)")
    assert _stable(high, 1.0) == high and _stable(high, T.STABLE_VERDICT.value) == high
    for s in (0.79, 0.6, 0.3):
        c = _stable(high, s)
        assert c.level != "high" and c.value < high.value and "stability" in c.reason
    assert _stable(high, 0.3).level == "low"


def test_stability_is_the_same_for_the_same_trace(trace_factory):
    path = trace_factory([_loading(i) for i in range(40)])
    assert analyze(path).stability == analyze(path).stability


def test_few_steps_have_no_stability(trace_factory):
    r = analyze(trace_factory([_loading(i) for i in range(6)]))
    assert r.stability is not None and r.stability.value is None and "not computed" in r.stability.reason


def test_every_projection_is_a_range_around_its_point(trace_factory):
    end = EndInfo(status="ok", steps=60, loader_workers=0)
    rows = [make_row(i, wall=60.0 + (i % 7), data=50.0, fwd=8.0, bwd=1.0, opt=0.5, data_cpu=2.0) for i in range(60)]
    r = analyze(trace_factory(rows, run={"host": "t", "cpu_count": 2}, end=end))
    assert r.findings
    for f in r.findings:
        p = f.projection
        assert p.low_ms is not None and p.high_ms is not None
        assert 0.0 <= p.low_ms <= p.step_ms <= p.high_ms
    # step-to-step variation widens it beyond the point
    top = r.findings[0].projection
    assert top.high_ms > top.step_ms > top.low_ms


def test_the_models_own_error_widens_both_ends_by_its_share_of_the_point(trace_factory, monkeypatch):
    end = EndInfo(status="ok", steps=60, loader_workers=0)
    rows = [make_row(i, wall=60.0 + (i % 7), data=50.0, fwd=8.0, bwd=1.0, opt=0.5, data_cpu=2.0) for i in range(60)]
    trace = trace_factory(rows, run={"host": "t", "cpu_count": 2}, end=end)
    monkeypatch.setattr(T, "MODEL_ERROR", 0.0)
    before = analyze(trace).findings[0].projection
    monkeypatch.setattr(T, "MODEL_ERROR", 0.1)
    after = analyze(trace).findings[0].projection
    assert after.step_ms == pytest.approx(before.step_ms)  # the point does not move
    assert after.high_ms == pytest.approx(before.high_ms + 0.1 * before.step_ms)
    # the low end widens too, but never past what the fix can reach: the step without the 50 ms data wait it owns
    assert before.low_ms - 0.1 * before.step_ms <= after.low_ms <= before.low_ms
    assert after.low_ms == pytest.approx(after.current_ms - 50.0)


def test_the_range_and_stability_are_shown_in_text_json_and_html(trace_factory):
    import json

    from analyzer.render.html_panel import verdict_panel
    from analyzer.render.json_report import render_json
    from tests.test_terminal import shown as render_text

    r = analyze(trace_factory([_loading(i) for i in range(60)]))
    p = r.findings[0].projection
    data = json.loads(render_json(r))
    f = data["findings"][0]
    assert f["projected_step_time_ms_low"] <= f["projected_step_time_ms"] <= f["projected_step_time_ms_high"]
    assert f["projection_range_width"] == pytest.approx((p.high_ms - p.low_ms) / p.current_ms, abs=1e-4)
    assert data["stability"] == r.stability.value and data["steady_state"]["outlier_steps"] == []
    shown = f"range {p.low_ms:.2f}-{p.high_ms:.2f} ms"
    assert shown in render_text(r, 200) and shown in verdict_panel(r)
    assert "stability" in render_text(r, 200) and "stability" in verdict_panel(r)


def test_out_of_core_leaves_outliers_out_of_the_rules_and_resamples_whole_steps(tmp_path):
    from tests.conftest import write_trace

    for rank in (0, 1):
        rows = [make_row(i, rank=rank, wall=420.0 if i in (20, 40) else 20.0) for i in range(60)]
        write_trace(tmp_path / f"trace.rank{rank}.arrow", rows, run={"host": "t", "world_size": 2, "rank": rank})
    r = analyze(tmp_path)
    assert r.metrics.ranks == 2 and set(r.steady.outliers) == {20, 40}
    assert r.stability is not None and r.stability.value is not None
    assert any("left out of the rules" in n for n in r.notes)  # as for a trace held in memory


def test_a_periodic_evaluation_is_found_beside_two_scheduler_stalls(trace_factory):
    # every 12th step evaluates for 60 ms; two stalls off the period (steps 17 and 50) must not break it
    rows = [make_row(i, wall=80.0 if i % 12 == 0 or i in (17, 50) else 20.0) for i in range(96)]
    r = analyze(trace_factory(rows))
    assert r.steady.period == 12 and set(r.steady.periodic) == {12, 24, 36, 48, 60, 72, 84}
    assert {17, 50} <= set(r.steady.outliers) - set(r.steady.periodic)
    f = next(f for f in r.findings if f.cause == "periodic_spikes")
    assert "Every 12 steps" in f.summary


def test_a_periodic_spike_projects_the_work_half_as_often_with_its_own_range(trace_factory):
    from analyzer.analysis.fixes import PeriodicFix
    from analyzer.planning.settling_trial import candidate_text
    from analyzer.run.candidates import derive

    rows = [make_row(i, wall=80.0 if i % 10 == 0 else 20.0) for i in range(80)]
    r = analyze(trace_factory(rows))
    f = next(f for f in r.findings if f.cause == "periodic_spikes")
    p = f.projection
    excess = len(r.steady.spikes) * 60.0 / r.metrics.steps
    assert p.fix == PeriodicFix(period=10, every=20)
    assert p.step_ms == pytest.approx(p.current_ms - excess / 2, rel=0.02)  # every 20 steps: half the excess stays
    assert p.low_ms <= p.current_ms - excess <= p.high_ms  # off the step entirely is inside the range
    assert p.high_ms < p.current_ms  # and the fix helps at the slow end
    assert candidate_text(f) == "eval_every=20,checkpoint_every=20"
    found, notes = derive(r, cores=1, accelerator=False, current_workers=0)
    assert all(not c.setting.script for c in found) and any("eval_every=20" in n for n in notes)


def test_a_headline_ranked_first_by_its_saving_gets_its_own_stability_line():
    """When the ranking by saved step time puts a finding first that is not the share-based verdict of the
    resamples, the stability says how many resamples find the headline, never "give <other verdict>" under it."""
    from analyzer.analysis.stability import Stability

    st = Stability(
        1.0, 64, "64 of 64 resamples of the 23 steps give data_loading", fired={("batch_size", "x"): 40}, steps=23
    )
    head = st.of_headline("batch_size", "x")
    assert head.value == 40 / 64
    # in plain words (was "..., first by the step time its fix saves; by share they give data_loading in 64")
    assert head.reason == "40 of 64 resamples of the 23 steps also find batch_size (x)"
    other = st.of_headline("host", "periodic_spikes")  # not a share-based finding: not resampled
    assert other.value is None and other.reason.startswith("the periodic_spikes finding is measured on the whole run")


@pytest.mark.parametrize("name", ["cpu_data_loading", "cpu_healthy", "h200_small_batch", "h200_sync"])
def test_the_stability_line_speaks_of_the_headline(name):
    from pathlib import Path

    r = analyze(Path(__file__).parent.parent / "sample_traces" / f"{name}.arrow")
    assert r.stability is not None
    if r.stability.value is not None:
        assert f"give {r.bottleneck}" in r.stability.reason or f"find {r.bottleneck}" in r.stability.reason


def test_a_wide_range_says_so_and_names_the_trial_that_measures_its_fix(trace_factory):
    """A projection range wider than WIDE_RANGE of the step is called wide, and every finding with a wide range
    (not only the first) names the `run --try` trial of its fix, in the text and in --json."""
    import dataclasses

    from analyzer.analysis.fixes import WorkerFix
    from analyzer.planning.settling_trial import trial_of, wide
    from analyzer.render.json_report import render_json
    from tests.test_terminal import shown as render_text

    r = analyze(trace_factory([_loading(i) for i in range(60)]))
    f = r.findings[0]
    p = f.projection
    narrow = dataclasses.replace(p, low_ms=p.step_ms * 0.99, high_ms=p.step_ms * 1.01)
    spread = dataclasses.replace(p, low_ms=0.0, high_ms=p.current_ms * 0.9, fix=WorkerFix(3, False))
    assert not wide(dataclasses.replace(f, projection=narrow)) and wide(dataclasses.replace(f, projection=spread))
    second = dataclasses.replace(f, bottleneck="host", cause="x", projection=spread)
    r2 = dataclasses.replace(r, findings=(dataclasses.replace(f, projection=narrow), second))
    out = render_text(r2, 200)
    assert "wide: it says little until measured" in out
    assert "--candidates num_workers=3" in out and "too wide to act on" in out
    import json

    data = json.loads(render_json(r2))
    assert [x["projection_range_wide"] for x in data["findings"]] == [False, True]
    assert data["findings"][1]["settling_trial"] == trial_of(second, r.metrics.batch_samples)
