"""The cpu backend's benchmarks: outputs verified against numpy references (their speed is compared
with numpy's and torch's in benchmarks/cpu_agreement.py, not here: timings are not tests)."""

import numpy as np
import pytest

from analyzer.errors import VerificationError
from gpuanalyze.kernels.backend import host_timer, select
from gpuanalyze.kernels.matmul import _measure, _NumpyMatmul, run_matmul

CPU = select("cpu")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_matmul_equals_the_float64_reference(dtype):
    impl = _NumpyMatmul(256, dtype)
    impl.run()
    ref = impl.a.astype(np.float64) @ impl.b.astype(np.float64)
    np.testing.assert_allclose(impl.c, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    assert impl.max_rel_error() < 1e-4


def test_matmul_results_report_the_verified_error():
    results, skipped = run_matmul(CPU, quick=True)
    assert [r.dtype for r in results] == ["float32", "float64"] and skipped == []
    assert all(r.params["max_rel_error"] < 1e-4 and r.value > 0 for r in results)


def test_a_wrong_matmul_is_not_reported(monkeypatch):
    impl = _NumpyMatmul(64, "float32")
    monkeypatch.setattr(impl, "run", lambda: np.copyto(impl.c, 0.0))
    with pytest.raises(VerificationError, match="float32 matmul"):
        _measure(impl, backend=CPU, dtype="float32", n=64, tol=1e-4, warmup=0, repeats=1, timer=host_timer, engine="x")
