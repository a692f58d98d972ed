import pytest

from analyzer.errors import GpuAnalyzeError
from gpuanalyze.kernels.backend import availability, host_timer, select


def test_cpu_is_always_available():
    assert availability()["cpu"] is None
    assert select("cpu").name == "cpu"


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(GpuAnalyzeError, match="unknown backend"):
        select("tpu")


def test_an_unavailable_backend_says_why(monkeypatch):
    from gpuanalyze.kernels import backend

    monkeypatch.setattr(backend, "cupy_unavailable", lambda: "CuPy sees no CUDA device")
    with pytest.raises(GpuAnalyzeError, match="CuPy sees no CUDA device"):
        select("cupy")
    assert select("auto").name == "cpu"


def test_host_timer_counts_repeats():
    calls = []
    times = host_timer(lambda: calls.append(1), 2, 3)
    assert len(times) == 3 and len(calls) == 5
