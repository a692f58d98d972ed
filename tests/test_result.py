import pytest

from analyzer.machine.bandwidth import allreduce_bandwidths, busbw_factor
from gpuanalyze.kernels.result import matmul_flops, rate_result, stream_bytes


def test_babelstream_byte_counts():
    assert stream_bytes("copy", 1000, 4) == 8000
    assert stream_bytes("scale", 1000, 4) == 8000
    assert stream_bytes("add", 1000, 4) == 12000
    assert stream_bytes("triad", 1000, 8) == 24000
    assert stream_bytes("dot", 1000, 4) == 8000


def test_matmul_flops():
    assert matmul_flops(2, 3, 4) == 48


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_nccl_tests_busbw_factor(n, factor):
    assert busbw_factor("allreduce", n) == pytest.approx(factor)


def test_algbw_and_busbw():
    algbw, busbw = allreduce_bandwidths(2 * 10**9, 1.0, 4)
    assert algbw == pytest.approx(2.0) and busbw == pytest.approx(3.0)


def test_rate_result_orders_min_median_max():
    r = rate_result(
        benchmark="memory_bandwidth",
        backend="cpu",
        device="x",
        variant="copy",
        unit="GB/s",
        work=10.0,
        seconds=[1.0, 2.0, 0.5],
    )
    assert (r.min, r.median, r.max) == (5.0, 10.0, 20.0) and r.value == 10.0 and r.repeats == 3
    assert r.to_dict()["benchmark"] == "memory_bandwidth"
