import gzip

import numpy as np
import pytest

from analyzer.errors import TraceError
from gpuanalyze.ingest.kineto.parse import load_kineto, parse_kineto
from gpuanalyze.ingest.timeline.intervals import merge, union_length
from gpuanalyze.ingest.timeline.kernel_names import hta_kernel_type, kernel_category, short_name
from gpuanalyze.ingest.trace import schema as S
from tests.kineto_fixtures import ev, two_step_trace, write


def test_interval_union():
    s, e = merge(np.array([0.0, 5, 1, 20]), np.array([2.0, 6, 3, 21]))
    assert s.tolist() == [0, 5, 20] and e.tolist() == [3, 6, 21]
    assert union_length(np.array([0.0, 1]), np.array([2.0, 3])) == 3.0


@pytest.mark.parametrize(
    "name,cat,want",
    [
        ("volta_sgemm_128x64_nn", "kernel", "gemm_simt_fp32"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", "kernel", "gemm_tensor_core"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "kernel", "gemm_tensor_core"),
        ("cutlass_80_simt_sgemm_128x64_8x5_nn_align1", "kernel", "gemm_simt_fp32"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float", "kernel", "communication"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>", "kernel", "attention"),
        ("void cudnn::bn_bw_1C11_kernel_new<float>", "kernel", "reduction"),
        ("void at::native::reduce_kernel<512, 1>", "kernel", "reduction"),
        ("void at::native::vectorized_elementwise_kernel<4>", "kernel", "elementwise"),
        ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", "memcpy"),
        ("Memset (Device)", "Memset", "memset"),
        # kind from the base name, precision from the whole name (seen in real traces)
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::addmm_mm_functor<float>>",
            "kernel",
            "elementwise",
        ),
        (
            "void split_embedding_codegen_forward_unweighted_kernel<c10::BFloat16, fbgemm_gpu::gemm>",
            "kernel",
            "elementwise",
        ),
        (
            "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_32x1_tn_align8>",
            "kernel",
            "gemm_tensor_core",
        ),
        ("cudnn_volta_scudnn_128x64_relu_xregs_large_nn_v1", "kernel", "conv"),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>", "kernel", "conv"),
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", "kernel", "conv"),
        ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "kernel", "conv_tensor_core"),
        ("volta_fp16_s884cudnn_fp16_128x128_ldg8_splitK_relu_f2f_exp_small_nhwc_tn_v1", "kernel", "conv_tensor_core"),
        ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", "kernel", "elementwise"),
        ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1", "kernel", "gemm_simt_fp32"),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8", "kernel", "gemm_tensor_core"),
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16>", "kernel", "communication"),
        ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x", "kernel", "gemm_tensor_core"),
    ],
)
def test_kernel_categories(name, cat, want):
    assert kernel_category(name, cat) == want


def test_hta_kernel_types_and_short_names():
    assert hta_kernel_type("ncclDevKernel_AllGather") == "communication"
    assert hta_kernel_type("Memcpy DtoD") == "memory"
    assert hta_kernel_type("volta_sgemm") == "computation"
    assert (
        short_name("void at::native::vectorized_elementwise_kernel<4, float>(int)")
        == "at::native::vectorized_elementwise_kernel"
    )


def test_import_rows_and_kernel_stats(tmp_path):
    trace = load_kineto(write(tmp_path / "t.json.gz", two_step_trace(), gz=True))
    f = trace.frame
    assert f.get_column(S.STEP).to_list() == [7, 8]
    assert f.get_column(S.WALL_MS).to_list() == [1.0, 1.0]
    assert f.get_column(S.DATA_WAIT_MS).to_list() == [0.3, 0.0]
    assert f.get_column(S.OPTIMIZER_MS).to_list() == [0.05, 0.0]
    assert f.get_column(S.SYNC_MS).to_list() == [0.0, 0.1]
    assert f.get_column(S.GPU_BUSY_MS).to_list() == pytest.approx([0.3, 0.3])
    s0, s1 = map(S.decode_kernel_stats, f.get_column(S.KERNEL_STATS).to_list())
    assert s0.kernel_count == 2 and s0.gpu_span_ms == pytest.approx(0.35)
    assert s0.gemm_simt_fp32_ms == pytest.approx(0.2) and s0.elementwise_ms == pytest.approx(0.1)
    assert s0.idle_host_wait_ms == pytest.approx(0.05) and s0.idle_launch_ms == 0
    assert s0.top_kernels[0].name == "volta_sgemm_128x64_nn"
    assert s1.communication_ms == pytest.approx(0.3) and s1.comm_exposed_ms == pytest.approx(0.3)
    assert trace.run.gpu_name == "NVIDIA H100 80GB HBM3" and trace.run.rank == 0
    # HTA drops kernels launched after the last ProfilerStep began: span 400..750, busy 300
    g = trace.run.gpu_summary
    assert g.idle_pct == pytest.approx(100 * 50 / 350) and g.compute_pct == pytest.approx(100 * 300 / 350)


def test_missing_distributed_info_is_rank_zero_with_a_note(tmp_path):
    trace = load_kineto(write(tmp_path / "t.json", two_step_trace(rank=None)))
    assert trace.frame.get_column(S.RANK).unique().to_list() == [0]
    assert any("distributedInfo" in n for n in trace.notes)


def test_trace_without_profiler_steps_is_one_window(tmp_path):
    doc = two_step_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    trace = load_kineto(write(tmp_path / "t.json", doc))
    assert trace.frame.height == 1 and any("one step" in n for n in trace.notes)


def test_cpu_only_trace_says_so(tmp_path):
    doc = {"traceEvents": [ev("user_annotation", "ProfilerStep#0", 0, 100), ev("cpu_op", "aten::add", 10, 5)]}
    trace = load_kineto(write(tmp_path / "t.json", doc))
    assert trace.frame.get_column(S.GPU_BUSY_MS).to_list() == [None]
    assert any("CPU-only" in n for n in trace.notes)


def test_old_capitalised_categories(tmp_path):
    doc = {
        "traceEvents": [
            ev("Runtime", "cudaLaunchKernel", 0, 5, correlation=1),
            ev("Kernel", "volta_sgemm_64x64_nn", 10, 50, stream=7, correlation=1),
            ev("Memcpy", "Memcpy HtoD (Pinned -> Device)", 70, 10, stream=7),
        ]
    }
    trace = load_kineto(write(tmp_path / "t.json", doc))
    stats = S.decode_kernel_stats(trace.frame.get_column(S.KERNEL_STATS).to_list()[0])
    assert stats.kernel_count == 2 and stats.memcpy_h2d_ms == pytest.approx(0.01)


BAD = {
    "empty": b"",
    "truncated_json": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "na',
    "not_a_trace": b'{"hello": "world", "traceEvents": 5}',
    "no_events": b'{"traceEvents": []}',
    "wrong_types": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}',
    "corrupt_gzip": gzip.compress(b'{"traceEvents": []}')[:-8] + b"garbage!",
    "only_metadata": b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}',
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_kineto_input_is_one_trace_error(tmp_path, case):
    path = tmp_path / ("bad.json.gz" if case == "corrupt_gzip" else "bad.json")
    path.write_bytes(BAD[case])
    with pytest.raises(TraceError) as info:
        parse_kineto(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
