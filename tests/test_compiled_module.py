"""A module compiled with torch.compile and passed to profile(): its calls are timed (the wrapper
is hooked, named after the compiled module), not recorded as 0 ms of forward."""

from __future__ import annotations

import pytest

import analyzer
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace

torch = pytest.importorskip("torch")


def _train(tmp_path, backend: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    out = tmp_path / "compiled.arrow"
    with analyzer.profile(compiled, out=out):
        for _ in range(12):
            x, y = torch.randn(256, 64), torch.randn(256, 1)
            torch.nn.functional.mse_loss(compiled(x), y).backward()
            opt.step()
            opt.zero_grad()
    return load_trace(out)


def _check(trace) -> None:
    forward = trace.frame.get_column(S.FORWARD_MS).to_list()
    assert trace.run.models == ("Sequential",)
    assert all(f is not None and f > 0 for f in forward), forward  # every step's forward was timed
    assert sum(forward) < sum(trace.frame.get_column(S.WALL_MS).to_list())


def test_a_compiled_module_passed_to_profile_is_timed(tmp_path):
    _check(_train(tmp_path, "eager"))  # dynamo's graph capture, run eagerly: quick on CPU


@pytest.mark.slow
def test_an_inductor_compiled_module_passed_to_profile_is_timed(tmp_path):
    try:
        trace = _train(tmp_path, "inductor")
    except Exception as exc:  # noqa: BLE001 - no C++ compiler for inductor's CPU code here
        pytest.skip(f"inductor cannot compile on this machine ({type(exc).__name__})")
    _check(trace)


def test_models_in_a_list_keep_the_compiled_modules_name():
    from analyzer.record.models import named_models

    compiled = torch.compile(torch.nn.Linear(2, 2), backend="eager")
    assert [n for n, _ in named_models([compiled, torch.nn.ReLU()])] == ["Linear", "ReLU"]
    assert named_models(compiled) == [("Linear", compiled)]
