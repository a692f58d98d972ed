"""The cpu backend's benchmarks: outputs verified against numpy references (their speed is compared
with numpy's and torch's in benchmarks/cpu_agreement.py, not here: timings are not tests)."""

import numpy as np
import pytest

from analyzer.errors import Skip, VerificationError
from gpuanalyze.kernels.babelstream import VARIANTS, expected, make_impl, verify
from gpuanalyze.kernels.backend import host_timer, select
from gpuanalyze.kernels.matmul import _measure, _NumpyMatmul, run_matmul
from gpuanalyze.kernels.ring import chunk_bounds, ring_allreduce
from gpuanalyze.kernels.transfer import run_transfer

CPU = select("cpu")


def test_expected_values_are_exact_float32():
    assert expected("copy") == (np.float32(0.1),)
    assert expected("add") == (np.float32(np.float32(0.1) + np.float32(0.2)),)
    assert len(expected("triad")) == 2


def test_stream_kernels_verify():
    impl = make_impl(CPU, 4096)
    for v in VARIANTS:
        verify(impl, v, 4096)


def test_verify_rejects_a_wrong_element(monkeypatch):
    impl = make_impl(CPU, 4096)
    impl.run("add")
    impl.c[17] = 0.0
    monkeypatch.setattr(impl, "run", lambda variant: None)
    with pytest.raises(VerificationError, match="add"):
        verify(impl, "add", 4096)


def test_stream_kernels_equal_numpy_on_random_data():
    impl = make_impl(CPU, 4096)
    rng = np.random.default_rng(0)
    impl.a[:] = rng.standard_normal(4096)
    impl.b[:] = rng.standard_normal(4096)
    a, b, s = impl.a.copy(), impl.b.copy(), impl.s
    for variant, want in (("copy", a), ("scale", s * a), ("add", a + b), ("triad", a + s * b)):
        impl.run(variant)
        np.testing.assert_allclose(impl.c, want, rtol=1e-6, atol=1e-6, err_msg=variant)
    impl.run("dot")
    assert impl.dot_value() == pytest.approx(float(a.astype(np.float64) @ b.astype(np.float64)), rel=1e-4, abs=1e-3)


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


def test_transfers_are_skipped_on_cpu():
    with pytest.raises(Skip, match="GPU backend"):
        run_transfer(CPU, quick=True)


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_ring_allreduce_matches_the_sum(world):
    import queue
    import threading

    rng = np.random.default_rng(world)
    data = [rng.standard_normal(103).astype(np.float64) for _ in range(world)]
    want = np.sum(data, axis=0)
    inbox = [queue.Queue() for _ in range(world)]
    bufs = [d.copy() for d in data]

    def rank(r):
        def exchange(send, recv):
            inbox[(r + 1) % world].put(np.array(send))
            recv[:] = inbox[r].get(timeout=10)

        ring_allreduce(bufs[r], r, world, exchange, lambda a, b: np.add(a, b, out=a), np.empty(103))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    for b in bufs:
        np.testing.assert_allclose(b, want, rtol=1e-12)


def test_chunk_bounds_cover_everything():
    assert chunk_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
