"""A cause whose defining test fails is not the verdict: queued work and an idle host are unknown, with the idle.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import analyze
from tests import mechanism_fixtures as F
from tests.conftest import SHARED, shared_report
from tests.kineto_fixtures import write

EXTERNAL = SHARED / "external_traces"


# -- a cause whose defining test fails is not the verdict ------------------------------------------


def test_gaps_between_kernels_launched_ahead_are_queued_not_batch_size(tmp_path):
    """Every kernel is launched at the step's start: the host is ahead, the short gaps are the GPU waiting with the
    work queued; no batch size fixes that, and the verdict says what the idle is."""
    r = analyze(write(tmp_path / "t.json", F.short_gap_long_kernel_trace()))
    assert r.bottleneck == "unknown" and not r.findings
    assert "idle owners: queued" in r.confidence.reason


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_host_overhead_whose_idle_is_not_host_wait_is_untraced_host_work_with_what_to_record():
    r = shared_report(EXTERNAL / "hta/trace_compare/base/base.json.gz")
    # before: batch_size/host_overhead with idle_from_launch_or_host_wait 0.0001 failing >= 0.5; then unknown: the
    # idle is in gaps no host call covers, host work the trace does not show
    assert (r.bottleneck, r.findings[0].cause) == ("host", "untraced")
    assert "with_stack=True" in " ".join(r.findings[0].recommendations)
