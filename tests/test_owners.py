"""What the rules read from the idle owners (analysis/owners.py): the share of steps that show a cause is counted
on the steps' own owners, the quantity the verdict reads."""

import pytest

from analyzer.analysis.kernel_metrics import KernelMetrics, StepOwners
from analyzer.analysis.owners import owned_consistency
from analyzer.api import analyze
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import SHARED

LAUNCH = S.IDLE_OWNERS.index("launch")


def _step(n: int, launch_ms: float, wall_ms: float = 10.0) -> StepOwners:
    ms = [0.0] * len(S.IDLE_OWNERS)
    ms[LAUNCH] = launch_ms
    return StepOwners(step=n, rank=0, wall_ms=wall_ms, idle_ms=launch_ms, ms=tuple(ms))


def test_consistency_is_the_share_of_steps_whose_owners_pass_the_threshold():
    km = KernelMetrics.__new__(KernelMetrics)
    object.__setattr__(km, "step_owners", (_step(1, 3.0), _step(2, 0.5), _step(3, 2.0), _step(4, 9.0, float("nan"))))
    assert owned_consistency(km, ("launch",), 0.2) == pytest.approx(2 / 3)  # the NaN-wall step is not counted
    assert owned_consistency(km, ("sync",), 0.2) == 0.0
    object.__setattr__(km, "step_owners", ())
    assert owned_consistency(km, ("launch",), 0.2) is None
    assert owned_consistency(None, ("launch",), 0.2) is None


@pytest.mark.skipif(not (SHARED / "nsys_traces").is_dir(), reason="../shared/nsys_traces is absent")
def test_a_launch_bound_capture_counts_the_steps_dispatch_owns_not_its_host_phase_shares():
    """The FSDP 'after' cut: dispatch owns 62% of the idle in nearly every step, while the host's time sits inside
    per-op NVTX phases (so the host-side unexplained share is small): 93% of steps, not 7%."""
    r = analyze(SHARED / "nsys_traces" / "nsysai_mfu_train_2gpu_after.sqlite")
    f = r.findings[0]
    assert (f.bottleneck, f.cause) == ("batch_size", "launch_overhead")
    assert f.consistency >= 0.8, (f.consistency, f.confidence)
