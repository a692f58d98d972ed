import pytest

from analyzer.machine.bandwidth import allreduce_bandwidths, busbw_factor
from gpuanalyze.kernels.result import matmul_flops, rate_result


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
        benchmark="matmul",
        backend="cpu",
        device="x",
        variant="256x256x256",
        unit="TFLOP/s",
        work=10.0,
        seconds=[1.0, 2.0, 0.5],
    )
    assert (r.min, r.median, r.max) == (5.0, 10.0, 20.0) and r.value == 10.0 and r.repeats == 3
    assert r.to_dict()["benchmark"] == "matmul"
