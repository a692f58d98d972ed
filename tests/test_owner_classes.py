"""Every idle owner leads to its class (analysis/owners.py OWNER_CLASS, rules.led): synthetic captures built from the
owners' documented meaning (tests/mechanism_fixtures.owned_rows), checked as a property and on the mechanisms seen in
real captures."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.analysis.owners import OWNER_CLASS
from analyzer.api import analyze
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests import mechanism_fixtures as F
from tests.conftest import write_trace
from tests.kineto_fixtures import write
from tests.test_truth_table import check_integrity

#: Owners of steady steps: start-up work (warm-up by evidence at WARMUP_STARTUP of a step) and graph capture are
#: left to the warm-up tests (tests/test_startup_warmup.py) as the minor owners here.
_STEADY = tuple(o for o in S.IDLE_OWNERS if o not in (*S.STARTUP_OWNERS, "graph_capture"))
SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
IMPORTED = EndInfo(status="imported")


_COUNT = itertools.count()


def _analyze(tmp_path, owners, name="t", **kw):
    path = tmp_path / f"{name}{next(_COUNT)}.arrow"
    return analyze(write_trace(path, F.owned_rows(owners, **kw), run=F.OWNED_RUN, end=IMPORTED))


def _classes(owner: str) -> set[str]:
    """The verdicts an owner's idle may lead to: its class; start-up owners and those of no class, unknown (a
    warm-up or what to record); allocations on few steps are first allocations (warm-up), on many churn (sync)."""
    cls = OWNER_CLASS[owner]
    if owner == "allocator":
        return {"sync", "unknown"}
    return {"unknown"} if cls is None else {cls[0]}


@SETTINGS
@given(
    owner=st.sampled_from(S.IDLE_OWNERS),
    idle=st.floats(0.5, 0.95),
    held=st.floats(0.55, 1.0),
    others=st.lists(st.sampled_from(_STEADY), min_size=0, max_size=3),
    busy=st.sampled_from(("tensor_cores", "fp32", "copies", "communication")),
    steps=st.integers(1, 4),
)
def test_an_owner_holding_most_of_a_material_idle_leads_to_its_class(tmp_path, owner, idle, held, others, busy, steps):
    """Whenever one owner holds half the idle or more and the GPU idles half the step or more, the verdict is that
    owner's class, never another class's rule (a warm ViT pass with 46% idle in gaps no host call covers was called
    kernels/fp32 worth 11%), whatever the busy time holds (fp32 GEMMs, copies, communication)."""
    wall = 100.0
    mine = idle * wall * held
    rest = list(dict.fromkeys(o for o in others if o != owner and OWNER_CLASS[o] != OWNER_CLASS[owner]))
    owned = {owner: mine, **{o: (idle * wall - mine) / len(rest) for o in rest}} if rest else {owner: idle * wall}
    busy_ms = wall - sum(owned.values())
    kw = {
        "fp32": {"fp32": 0.9},
        "copies": {"copies": 0.8 * busy_ms},
        "communication": {"comm": 0.8 * busy_ms},
    }.get(busy, {})
    r = _analyze(tmp_path, owned, steps=steps, wall=wall, **kw)
    allowed = _classes(owner)
    if owner in S.STARTUP_OWNERS and busy == "copies" and 0.8 * busy_ms >= 0.5 * (wall - owned[owner]):
        # copies fill most of the step less its start-up work: copy-bound warm or cold (rules/warmup.copies_hold),
        # and the steady state's classes are read from the rest of the idle
        allowed = allowed | {"data_loading"} | {c[0] for o in rest if (c := OWNER_CLASS[o]) is not None}
    assert r.bottleneck in allowed, (owner, owned, busy, r.bottleneck, r.confidence.reason)
    check_integrity(r)  # no projection above the current step, one basis, evidence that holds


def test_a_warm_inference_pass_idle_in_untraced_host_work_is_host_not_its_fp32_kernels(tmp_path):
    """46% of the step the GPU idles in gaps no host call covers, the rest fp32 GEMMs: host/untraced, the kernels
    finding after it; worded for inference, with what to record, and the user's frame where the capture names it."""
    frame = "vit/model.py:212 forward"
    r = _analyze(tmp_path, {"host_idle": 46.0, "launch": 2.0}, fp32=0.6, frames=(("host_idle", frame, 40.0),))
    f = r.findings[0]
    assert (r.bottleneck, f.cause) == ("host", "untraced")
    assert "inference loop" in f.summary and "kernels" in {g.bottleneck for g in r.findings[1:]}
    assert frame in " ".join(f.recommendations)
    bare = _analyze(tmp_path, {"host_idle": 46.0, "launch": 2.0}, name="bare", fp32=0.6)
    assert "with_stack=True" in " ".join(bare.findings[0].recommendations)


def test_a_gpu_bound_step_with_small_hook_gaps_is_not_sync(tmp_path):
    """A GPU-bound diffusion step (GEMMs on tensor cores, busy 92%) with gaps no host call covers is healthy, not
    sync: the idle is not material and no blocking call owns it."""
    r = _analyze(tmp_path, {"host_idle": 6.0, "launch": 2.0}, steps=3)
    assert r.bottleneck == "none", (r.bottleneck, r.confidence.reason)


def test_gpu_bound_work_after_the_host_is_done_is_judged_on_the_busy_time(tmp_path):
    """The host issues its launches early and the GPU stays busy 99.8% of the step after them: none on tensor cores,
    kernels with fp32 GEMMs; never batch_size or sync for the launch gap at the step's start."""
    assert _analyze(tmp_path, {"launch": 0.2}, name="tc", wall=150.0).bottleneck == "none"
    r = _analyze(tmp_path, {"launch": 0.2}, name="fp32", wall=150.0, fp32=0.8)
    assert (r.bottleneck, r.findings[0].cause) == ("kernels", "fp32_math")


def test_gpu_bound_after_its_graph_launches_on_tensor_cores_is_healthy(tmp_path):
    from tests.kineto_fixtures import write

    r = analyze(write(tmp_path / "g.json", F.graph_launch_trace(fp32=False)))
    assert r.bottleneck == "none" and (r.metrics.gpu_util or 0.0) > 0.9
    assert r.confidence.level == "high" and "250 device operations" in r.confidence.reason  # one step, many ops


def test_idle_queued_on_a_dependency_leads_to_unknown_naming_what_else_is_found(tmp_path):
    """Work already launched while the device runs nothing waits on something off this timeline (stream
    semantics): no class, and the finding the busy time still shows is named in the reason, not the verdict."""
    r = _analyze(tmp_path, {"queued": 60.0}, fp32=0.9)
    assert r.bottleneck == "unknown" and not r.findings
    why = r.confidence.reason
    assert "queued" in why and "every stream and rank" in why and "kernels/fp32_math" in why


@pytest.mark.parametrize("pageable", [False, True])
def test_a_gpu_busy_copying_is_copy_bound_data_loading_never_healthy(tmp_path, pageable):
    """96% of the step the GPU only copies between host and device: data_loading/copies with its fix and a
    projection of the copy time removed, never none."""
    r = _analyze(tmp_path, {"host_idle": 4.0}, copies=96.0, pageable=pageable)
    f = r.findings[0]
    assert (r.bottleneck, f.cause) == ("data_loading", "copies")
    assert "fill 96% of the GPU's time" in f.summary
    advice = " ".join(f.recommendations)
    assert "pin_memory" in advice and "non_blocking=True" in advice and "fewer, larger" in advice
    assert ("pageable" in advice) == pageable
    assert f.projection.step_ms < f.projection.current_ms
    # copies below the bar, the GPU busy on tensor cores: healthy
    assert _analyze(tmp_path, {"host_idle": 4.0}, name="few", copies=30.0).bottleneck == "none"


def test_communication_dominating_the_busy_time_is_exposed_communication(tmp_path):
    r = _analyze(tmp_path, {"host_idle": 4.0}, comm=90.0)
    assert (r.bottleneck, r.findings[0].cause) == ("sync", "exposed_communication")


def test_one_step_with_one_owner_over_many_intervals_is_confident(tmp_path):
    """Confidence from evidence (docs/idle-owners.md, "Confidence"): one step of 2,000 device operations whose
    idle one blocking call holds reads high; a fix on the host's cores without readings of the host is at most
    medium; a step of few operations (few idle intervals) says so, unknown, and so does a cold one."""
    sync = _analyze(tmp_path, {"sync": 55.0, "host_idle": 5.0}, name="sync")
    assert (sync.bottleneck, sync.confidence.level) == ("sync", "high"), sync.confidence.reason
    assert "92% of the GPU's idle" in sync.confidence.reason and "2,000 device operations" in sync.confidence.reason
    loader = _analyze(tmp_path, {"data_loader": 60.0}, name="loader")
    assert (loader.bottleneck, loader.confidence.level) == ("data_loading", "medium")
    assert "no readings of the host" in loader.confidence.reason
    few = _analyze(tmp_path, {"sync": 55.0}, name="few", kernels=4)
    assert (few.bottleneck, few.confidence.level) == ("sync", "low"), few.confidence.reason
    some = _analyze(tmp_path, {"sync": 55.0}, name="some", kernels=20)
    assert (some.bottleneck, some.confidence.level) == ("sync", "medium"), some.confidence.reason
    one = _analyze(tmp_path, {"sync": 55.0}, name="one", kernels=1)
    assert one.bottleneck == "unknown" and "no idle interval between two" in one.confidence.reason
    split = _analyze(tmp_path, {"sync": 28.0, "cpu_ops": 16.0, "queued": 16.0}, name="split")
    assert split.bottleneck == "sync" and split.confidence.level != "high"


def test_a_cold_capture_says_how_to_capture_steady_state_and_what_its_gpu_time_shows(tmp_path):
    """All warm-up (module loading on first launches), the GPU's own time 85% collectives: unknown, the reason leads
    with the start-up owner by what it is and names the communication finding beside it."""
    r = _analyze(tmp_path, {"module_loading": 60.0, "allocator": 5.0}, comm=30.0)
    why = r.confidence.reason
    assert r.bottleneck == "unknown" and r.confidence.level == "low"
    assert "mostly module loading (first launches of kernels) 60 ms" in why
    assert "sync/exposed_communication" in why and "skip_first" in why


def test_the_line_of_code_and_the_parts_outside_the_steps_show_in_every_report(tmp_path):
    """Each top owner's frame in ms per step and the capture's set-up and teardown as their own lines, in the
    terminal, --json and the HTML report; never step work."""
    from analyzer.api import report as html_report
    from analyzer.render.json_report import report_dict
    from tests.test_terminal import shown as terminal

    frame = "train.py:88 log_metrics"
    run = {
        **F.OWNED_RUN,
        "setup": {"ms": 1200.0, "parts": [{"name": "untraced", "ms": 900.0}, {"name": "cudaMalloc", "ms": 300.0}]},
        "teardown": {"ms": 40.0, "parts": [{"name": "cudaFree", "ms": 40.0, "count": 3}]},
    }
    rows = F.owned_rows({"host_idle": 50.0}, steps=2, frames=(("host_idle", frame, 30.0),))
    path = write_trace(tmp_path / "t.arrow", rows, run=run, end=IMPORTED)
    r = analyze(path)
    shown = " ".join(terminal(r, width=200).split())
    assert f"at {frame} 30 ms" in shown and "1,200 ms outside the steps, not judged: untraced 900 ms" in shown
    assert "cudaFree 40 ms x3" in shown
    owners = {o["owner"]: o for o in report_dict(r)["idle_owners"]["owners"]}
    assert owners["host_idle"]["frames"] == [{"frame": frame, "ms_per_step": 30.0}]
    assert report_dict(r)["step_time_mean_ms"] == pytest.approx(100.0)  # the basis every projection uses
    assert r.metrics.step_mean_ms == pytest.approx(100.0)  # the set-up is not step time
    page = html_report(path).html
    assert frame in page and "set-up" in page and "outside the steps, not judged" in page


def _one_pass(copies: bool) -> dict:
    """A script run once: 2 s of context creation (cudaMalloc), one pass of GPU work (no steps, nothing repeated), a
    free at the end. ``copies``: the pass is a 2.4 ms pageable copy in, a 40 us kernel, a 0.6 ms copy out, after a
    1 ms first launch (module loading); else a dozen short kernels with host work no call covers between them."""
    from tests.capture_fixtures import kineto, launch
    from tests.kineto_fixtures import ev

    events = [ev("cuda_runtime", "cudaMalloc", 0, 2_000_000)]
    t = 2_000_100.0
    if copies:
        events += [
            ev("cuda_runtime", "cudaMemcpy", t, 2_420, correlation=1),
            ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t + 10, 2_400, stream=7, correlation=1),
            ev("cuda_driver", "cuModuleLoadData", t + 2_500, 1_000),
            *launch(t + 2_500, 2, t + 3_520, 40),
            ev("cuda_runtime", "cudaMemcpy", t + 3_600, 620, correlation=3),
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", t + 3_610, 600, stream=7, correlation=3),
        ]
    else:
        for i in range(12):
            events += launch(t + i * 400, i + 1, t + i * 400 + 10, 30, name=f"kernel_{i}")
    events += [ev("cuda_runtime", "cudaFree", t + 6_000, 300_000)]
    return kineto(events)


def test_a_capture_mostly_start_up_around_one_pass_says_so_not_a_steady_verdict(tmp_path):
    """The process set itself up for 2 s and ran 5 ms of GPU work once: the pass's idle is a first call's, not a
    steady state: unknown, naming the set-up, with what to capture (rules/warmup._start_up_capture)."""
    r = analyze(write(tmp_path / "t.json", _one_pass(copies=False)))
    assert r.bottleneck == "unknown" and not r.findings
    why = r.confidence.reason
    assert "the capture is mostly start-up" in why and "cudaMalloc" in why and "skip_first" in why


def test_a_copy_bound_pass_is_copy_bound_though_cold(tmp_path):
    """The same process whose pass is mostly copies: a copy takes as long cold as warm (start-up work adds idle,
    not transfer time), so the copies are the verdict (rules/warmup.copies_hold), with their projection."""
    r = analyze(write(tmp_path / "t.json", _one_pass(copies=True)))
    assert (r.bottleneck, r.findings[0].cause) == ("data_loading", "copies"), r.confidence.reason
    p = r.findings[0].projection
    assert p is not None and p.step_ms < p.current_ms
    check_integrity(r)
