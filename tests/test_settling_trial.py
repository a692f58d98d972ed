"""A range too wide to act on says so, with the `run --try` command that measures its fix, or, where no trial can
apply the fix, how to measure it instead: for every finding, in the text and the HTML (planning/settling_trial.py)."""

import dataclasses

from analyzer import analyze
from analyzer.analysis.fixes import BatchFix
from analyzer.planning.settling_trial import too_wide, wide
from analyzer.render.html_report import render_panel_only
from tests.test_robust_verdicts import _loading
from tests.test_terminal import shown as render_text


def test_every_wide_finding_says_so_with_a_trial_or_why_there_is_none(trace_factory):
    r = analyze(trace_factory([_loading(i) for i in range(60)]))
    f = r.findings[0]
    p = f.projection
    spread = dataclasses.replace(p, low_ms=0.0, high_ms=p.current_ms * 0.9)
    untried = dataclasses.replace(f, bottleneck="host", cause="x", projection=dataclasses.replace(spread, fix=None))
    batch = dataclasses.replace(f, projection=dataclasses.replace(spread, fix=BatchFix(2)))
    narrow = dataclasses.replace(f, projection=dataclasses.replace(p, low_ms=p.step_ms, high_ms=p.step_ms))
    r2 = dataclasses.replace(r, findings=(narrow, batch, untried))
    assert [wide(g) for g in r2.findings] == [False, True, True]
    assert too_wide(narrow, 32) is None
    assert "--candidates batch_size=64" in (too_wide(batch, 32) or "")
    assert "no `run --try` candidate applies this fix" in (too_wide(untried, 32) or "")
    text = " ".join(render_text(r2, 200).split())
    html = render_panel_only(r2, "test")
    for out in (text, html):
        assert out.count("too wide to act on") == 2
        assert "gpuanalyze compare BEFORE AFTER" in out
