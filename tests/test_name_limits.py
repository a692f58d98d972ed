"""Kernel names are matched in linear time and bounded at import."""

from __future__ import annotations

import time

from gpuanalyze.ingest.kineto.parse import parse_kineto
from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS, kernel_category, short_name
from tests import kineto_fixtures as kf


def _seconds(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def test_hostile_names_classify_in_linear_time():
    # each took seconds to minutes with `triton_.*mm` and `\d{3,}cudnn` (quadratic backtracking);
    # now well under a millisecond: the bound leaves 1000x headroom for a loaded machine
    for name in ("triton_m" * 25_000, "triton_" * 30_000, "1" * 200_000, "triton_" * 30_000 + "mm"):
        assert _seconds(kernel_category, name) < 1.0, name[:20]


def test_long_names_are_classified_by_their_first_4_kib():
    assert kernel_category("triton_mm_" + "x" * 10_000) == "gemm_simt_fp32"
    assert kernel_category("x" * MAX_NAME_CHARS + "gemm") == "other"
    assert kernel_category("triton_poi_fused_add_0") == "elementwise"
    assert kernel_category("triton_tem_fused_mm_0") == "gemm_simt_fp32"
    assert kernel_category("void cudnn::123cudnn_kernel") == "conv"


def test_a_kineto_name_longer_than_4_kib_is_cut_with_a_note(tmp_path):
    doc = kf.two_step_trace()
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["name"] = "triton_" * 150_000  # ~1 MB
    path = kf.write(tmp_path / "long.json", doc)
    t = time.perf_counter()
    k = parse_kineto(path)
    assert time.perf_counter() - t < 30
    assert max(len(kind.name) for kind in k.kinds) == MAX_NAME_CHARS
    assert any("longer than 4,096 characters" in n for n in k.notes)


def test_a_kernel_name_starting_with_a_template_is_shown():
    assert short_name("void <lambda>(int)") == "<lambda>(int)"
    assert short_name("void at::native::elementwise_kernel<128>(int)") == "at::native::elementwise_kernel"
    assert short_name("") == "(unnamed)"
    assert short_name("  ") == "(unnamed)"
