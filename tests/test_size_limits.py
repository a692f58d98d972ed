"""Every stage with a size or count bound either works past it or says in the report what it did there
(docs/large-runs.md, "Size and count limits"); the verdict never changes silently with a capture's size.
The iteration search's bound is crossed in tests/test_k_copies.py, the stability bootstrap's chunks in
tests/test_bounded_memory.py, the importer's kept-event bound in tests/test_stream.py."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from analyzer.analysis import kernel_metrics
from analyzer.api import analyze
from analyzer.cli import app
from analyzer.planning import gate
from analyzer.render import json_report, planning
from tests.kineto_fixtures import loader_bound_trace, write

runner = CliRunner()


def test_per_step_idle_owners_past_their_bound_keep_the_verdict_and_the_json_says_the_bound(tmp_path, monkeypatch):
    path = write(tmp_path / "loader.json", loader_bound_trace(3000.0, steps=12))
    before = analyze(path)
    for module in (kernel_metrics, json_report):
        monkeypatch.setattr(module, "MAX_STEP_OWNERS", 4)
    after = analyze(path)
    assert (after.bottleneck, after.metrics.step_mean_ms) == (before.bottleneck, before.metrics.step_mean_ms)
    out = runner.invoke(app, ["analyze", str(path), "--json"])
    owners = json.loads(out.output)["idle_owners"]
    assert len(owners["per_step"]) == owners["per_step_limit"] == 4


def test_the_gate_says_when_its_bootstrap_resampled_a_subset_of_the_steps(tmp_path, monkeypatch):
    from tests.test_compare_gate import _run

    a, b = (
        _run(tmp_path / "a" / "trace.arrow", 20.0, 1.0, seed=1),
        _run(tmp_path / "b" / "trace.arrow", 20.0, 1.0, seed=2),
    )
    full = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5"])
    assert full.exit_code == 0 and "evenly spaced" not in full.output
    for module in (gate, planning):
        monkeypatch.setattr(module, "MAX_STEPS", 16)
    bounded = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5", "--width", "200"])
    assert bounded.exit_code == 0, bounded.output
    assert "the noise from at most 16 evenly spaced steps of each run (the bootstrap's bound)" in bounded.output
