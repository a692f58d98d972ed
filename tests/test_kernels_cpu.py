"""The cpu backend's benchmarks against numpy/torch references measured in the same test."""

import time

import numpy as np
import pytest

from analyzer.errors import Skip, VerificationError
from gpuanalyze.kernels.backend import select
from gpuanalyze.kernels.matmul import run_matmul
from gpuanalyze.kernels.memory import VARIANTS, expected, make_impl, verify
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


def test_copy_rate_agrees_with_numpy_within_2x():
    from gpuanalyze.kernels.memory import run_memory

    ours = {r.variant: r.max for r in run_memory(CPU, quick=True)}  # best repeat against numpy's best
    a = np.full(2**25, 0.1, np.float32)
    c = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(c, a)) for _ in range(5))
    numpy_gbps = 2 * a.nbytes / best / 1e9
    assert 0.5 < ours["copy"] / numpy_gbps < 2.0, (ours["copy"], numpy_gbps)


def test_fp32_matmul_rate_agrees_with_torch_within_2x():
    torch = pytest.importorskip("torch")
    results, _ = run_matmul(CPU, quick=True)
    ours = next(r for r in results if r.dtype == "float32")
    assert ours.params["max_rel_error"] < 1e-4
    a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
    best = min(_timed(lambda: a @ b) for _ in range(20))
    torch_tflops = 2 * 1024**3 / best / 1e12
    assert 0.5 < ours.max / torch_tflops < 2.0, (ours.max, torch_tflops)  # best against best


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


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
