"""Checks that need a real CUDA device; skipped cleanly without one (CI has none)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

import analyzer  # noqa: E402
from gpuanalyze.ingest.trace import schema as S  # noqa: E402
from gpuanalyze.ingest.trace.reader import load_trace  # noqa: E402
from tests.scenarios.loops import make_loop, scenario, train  # noqa: E402


def _profiled(tmp_path, name, **kw):
    cfg = scenario(name, **{"steps": 30, "device": "cuda", **kw})
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(model, out=str(tmp_path / f"{name}.arrow")) as prof:
        losses = train(model, opt, loader, "cuda", item_every_step=cfg.item_every_step)
    return cfg, losses, load_trace(prof.path)


def test_cuda_events_fill_device_columns(tmp_path):
    cfg, _, trace = _profiled(tmp_path, "healthy")
    f = trace.frame
    assert trace.complete and f.height == cfg.steps
    assert f.get_column(S.GPU_BUSY_MS).null_count() == 0
    assert (f.get_column(S.GPU_BUSY_MS) > 0).all() and (f.get_column(S.GPU_BUSY_MS) <= f.get_column(S.WALL_MS)).all()
    assert (f.get_column(S.PEAK_MEM_BYTES) > 0).all()
    assert (f.get_column(S.BACKWARD_MS) > 0).all()
    assert trace.run.device == "cuda" and trace.run.gpu_name


def test_item_every_step_shows_up_as_sync(tmp_path):
    _, _, trace = _profiled(tmp_path, "sync")
    assert trace.frame.get_column(S.SYNC_MS).sum() > 0


def test_gpu_losses_are_bit_identical(tmp_path):
    cfg = scenario("healthy", steps=10, device="cuda")
    plain = train(*make_loop(cfg), "cuda")
    _, profiled, _ = _profiled(tmp_path, "healthy", steps=10)
    assert plain == profiled


def test_cupy_kernels_against_numpy():
    cupy = pytest.importorskip("cupy")
    from gpuanalyze.kernels.matmul_cupy import TOLERANCE, CupyMatmul

    for dtype in ("float32", "tf32", "float16", "bfloat16"):
        mm = CupyMatmul(512, dtype)
        assert mm.max_rel_error() <= TOLERANCE[dtype]
    a = cupy.asarray(np.arange(8, dtype=np.float32))
    assert cupy.asnumpy(a).tolist() == list(range(8))


def test_kernel_windows_record_gpu_kernels(tmp_path):
    import polars as pl

    cfg = scenario("fp32_compute", steps=12, device="cuda", num_workers=0)
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(model, out=str(tmp_path / "w.arrow"), window_first=4, window_every=100) as prof:
        train(model, opt, loader, "cuda")
    frame = load_trace(prof.path).frame.filter(pl.col(S.KERNEL_STATS).is_not_null())
    assert frame.get_column(S.STEP).to_list() == [4, 5, 6]
    stats = [S.decode_kernel_stats(t) for t in frame.get_column(S.KERNEL_STATS)]
    assert all(st.kernel_count > 0 for st in stats)
    assert all(st.gemm_simt_fp32_ms + st.gemm_tensor_core_ms > 0 for st in stats)
    report = analyzer.analyze(prof.path)
    assert report.metrics.kernels is not None and report.metrics.kernels.top_kernels
