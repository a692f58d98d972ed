"""The line of code that held the GPU idle (ingest/owner_frames.py): from torch.profiler's with_stack
``python_function`` events, or record_function ranges without them; on a synthetic capture and on every shared
trace recorded with stacks."""

from __future__ import annotations

from typing import Any

import pytest

from gpuanalyze.ingest.kineto.parse import parse_kineto
from gpuanalyze.ingest.timeline.blocking_calls import CALLER, is_user_frame, role_of
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from gpuanalyze.ingest.trace import schema as S
from tests.capture_fixtures import kineto, launch
from tests.conftest import SHARED, shared_kineto
from tests.kineto_fixtures import ev, write

EXTERNAL = SHARED / "external_traces"
STACKS = ("b200_eager_trace", "h100_owlv2", "h100_timesformer", "mi300_ddp_resnet18", "mi300_resnet_act_checkpoint")
STACKS += ("mi300_xdit_sd35",)


def test_user_frames_are_told_from_torch_the_standard_library_and_built_ins():
    for name in ("train.py(42): step", "moca/library/profile.py(53): run", "/app/xfuser/runner.py(81): profile"):
        assert is_user_frame(name), name
    for name in (
        "torch/nn/modules/module.py(1501): _call_impl",
        "torchvision/models/resnet.py(284): forward",
        "threading.py(1030): _bootstrap",
        "json/__init__.py(183): dumps",
        "<frozen runpy>(198): _run_module_as_main",
        "<built-in method item of Tensor object at 0x7f>",
        "/usr/lib/python3.11/contextlib.py(137): __enter__",
        "/venv/lib/python3.11/site-packages/numpy/core/fromnumeric.py(59): _wrapfunc",
        "nn.Module: Linear_0",
    ):
        assert not is_user_frame(name), name
    assert role_of("model_inference", "user_annotation") == CALLER
    assert role_of("ProfilerStep#3", "user_annotation") == -1


def _py(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    e = ev("python_function", name, ts, dur)
    e["tid"] = tid
    return e


def _stacked_steps(n: int = 4) -> list[dict[str, Any]]:
    """``n`` 10 ms steps of a loop in train.py: step() launches a 2 ms kernel, then calls log_loss(), whose
    ``loss.item()`` sits in cudaStreamSynchronize until the kernel is done and then 6 ms in the user's metrics code
    (nothing recorded but the Python frames)."""
    events = [_py("train.py(90): <module>", 0, n * 10_000), _py("threading.py(1030): _bootstrap", 0, n * 10_000, 2)]
    for i in range(n):
        lo = i * 10_000.0
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", lo, 10_000),
            _py("train.py(42): step", lo + 1, 9_990),
            _py("torch/nn/modules/module.py(1501): _call_impl", lo + 2, 100),
            *launch(lo + 10, i + 1, lo + 20, 2000),
            _py("train.py(61): log_loss", lo + 200, 9_700),
            ev("cpu_op", "aten::item", lo + 210, 3000),
            _py("<built-in method item of Tensor object>", lo + 210, 3000),
            ev("cuda_runtime", "cudaStreamSynchronize", lo + 220, 2990),
            _py("metrics.py(7): update", lo + 3300, 6000),
        ]
    return events


def test_each_owner_names_the_user_frame_that_held_the_idle(tmp_path):
    trace = import_kineto(parse_kineto(write(tmp_path / "s.json", kineto(_stacked_steps()))))
    for text in trace.frame.get_column(S.KERNEL_STATS).to_list():
        s = S.decode_kernel_stats(text)
        frames = {(f.owner, f.frame): f.ms for f in s.owner_frames}
        assert frames.get(("host_idle", "metrics.py(7): update")) == pytest.approx(6.0, abs=0.01)
        # the GPU ran until 2020 us; the sync returned at 3210 us: its idle is log_loss's, not torch's or item's
        assert frames.get(("sync", "train.py(61): log_loss")) == pytest.approx(s.idle_owner_sync_ms)
        assert not any("torch/" in f or "<built-in" in f or "threading" in f for _, f in frames)


def test_without_python_stacks_record_function_ranges_name_the_code(tmp_path):
    events = [e for e in _stacked_steps(2) if e["cat"] != "python_function"]
    events.append(ev("user_annotation", "compute_metrics", 3300, 6000))
    trace = import_kineto(parse_kineto(write(tmp_path / "r.json", kineto(events))))
    first = S.decode_kernel_stats(trace.frame.get_column(S.KERNEL_STATS)[0])
    assert [(f.owner, f.frame) for f in first.owner_frames if f.owner == "host_idle"] == [
        ("host_idle", "compute_metrics")
    ]


@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
@pytest.mark.parametrize("name", STACKS)
def test_every_shared_trace_with_stacks_names_a_frame_for_its_top_owner(name):
    trace = shared_kineto(EXTERNAL / "tracelens" / f"{name}.json.gz")
    stats = [S.decode_kernel_stats(x) for x in trace.frame.get_column(S.KERNEL_STATS).to_list() if x]
    owned = {o: sum(getattr(s, S.owner_field(o)) for s in stats) for o in S.IDLE_OWNERS}
    top = max(owned, key=lambda o: owned[o])
    framed = sum(f.ms for s in stats for f in s.owner_frames if f.owner == top)
    assert framed > 0, top
