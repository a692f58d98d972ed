import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.optim import optimizer as optim_mod  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

import analyzer  # noqa: E402
from analyzer.errors import GpuAnalyzeWarning  # noqa: E402
from analyzer.record.steps import StepTimes  # noqa: E402
from gpuanalyze.ingest import schema as S  # noqa: E402
from gpuanalyze.ingest.reader import load_trace  # noqa: E402
from tests.scenarios.loops import LoopConfig, make_loop, train  # noqa: E402

ORIGINALS = (DataLoader.__iter__, _BaseDataLoaderIter.__next__, torch.Tensor.item, torch.cuda.synchronize)


def assert_no_hooks_left(model):
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not optim_mod._global_optimizer_pre_hooks and not optim_mod._global_optimizer_post_hooks
    assert (DataLoader.__iter__, _BaseDataLoaderIter.__next__, torch.Tensor.item, torch.cuda.synchronize) == ORIGINALS


def train_with_fault(model, opt, loader, at_step, fault):
    """The demo loop, calling ``fault()`` just before step ``at_step``; returns the losses."""
    losses = []
    for i, (x, y) in enumerate(loader):
        if i == at_step:
            fault()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def small(**kw):
    return LoopConfig(**{"steps": 12, "batch": 8, "features": 32, **kw})


def test_records_one_row_per_optimizer_step(tmp_path):
    cfg = small(sample_cost_s=0.001)
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        train(model, opt, loader)
    assert_no_hooks_left(model)
    trace = load_trace(prof.path)
    f = trace.frame
    assert trace.complete and trace.end.status == "ok" and trace.end.steps == cfg.steps
    assert f.get_column(S.STEP).to_list() == list(range(cfg.steps))
    assert f.get_column(S.BATCH_SAMPLES).to_list() == [cfg.batch] * cfg.steps
    assert (f.get_column(S.DATA_WAIT_MS) >= cfg.batch * 1.0).all()  # 8 samples x 1 ms sleep
    assert (f.get_column(S.FORWARD_MS) > 0).all() and (f.get_column(S.BACKWARD_MS) > 0).all()
    assert (f.get_column(S.OPTIMIZER_MS) > 0).all()
    total = sum(f.get_column(p) for p in S.PARTS if p != S.H2D_MS)
    assert ((total - f.get_column(S.WALL_MS)).abs() < 1e-6).all()
    assert f.get_column(S.GPU_BUSY_MS).null_count() == cfg.steps
    assert trace.run.model_params == sum(p.numel() for p in model.parameters())
    assert trace.run.param_dtype == "float32" and trace.run.device == "cpu"


def test_losses_are_bit_identical_with_and_without_profiling(tmp_path):
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")):
        profiled = train(model, opt, loader)
    assert plain == profiled


def test_forward_marks_steps_without_an_optimizer(tmp_path):
    model, _, loader = make_loop(small())
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof, torch.no_grad():
        for x, _y in loader:
            model(x)
    f = load_trace(prof.path).frame
    assert f.height == 12
    assert (f.get_column(S.OPTIMIZER_MS) == 0).all() and (f.get_column(S.FORWARD_MS) > 0).all()


def test_explicit_step_overrides_automatic_boundaries(tmp_path):
    model, opt, loader = make_loop(small())
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), manual_steps=True) as prof:
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if i % 3 == 2:
                prof.step()
    f = load_trace(prof.path).frame
    assert f.height == 4 and f.get_column(S.BATCH_SAMPLES).to_list() == [24] * 4


def test_only_the_given_dataloader_is_timed(tmp_path):
    model, opt, loader = make_loop(small(sample_cost_s=0.002))
    other = DataLoader(loader.dataset, batch_size=8)  # same dataset, different loader
    with analyzer.profile(model, out=str(tmp_path / "t.arrow"), dataloader=other) as prof:
        train(model, opt, loader)
    assert load_trace(prof.path).frame.get_column(S.DATA_WAIT_MS).max() == 0


def test_user_exception_propagates_and_is_recorded(tmp_path):
    model, opt, loader = make_loop(small())
    with pytest.raises(ZeroDivisionError), analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if i == 4:
                raise ZeroDivisionError("user bug")
    assert_no_hooks_left(model)
    trace = load_trace(prof.path)
    assert trace.complete and trace.end.status == "exception"
    assert trace.end.exception == "ZeroDivisionError: user bug"
    assert trace.frame.height == 5


def test_internal_fault_warns_once_and_training_continues(tmp_path, monkeypatch):
    cfg = small()
    plain = train(*make_loop(cfg))
    calls = {"n": 0}
    original = StepTimes.row

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StepTimes, "row", flaky)
    model, opt, loader = make_loop(cfg)
    with (
        pytest.warns(GpuAnalyzeWarning, match="switched off.*injected") as record,
        analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof,
    ):
        losses = train(model, opt, loader)
    assert len(record) == 1
    assert losses == plain
    assert not prof.enabled and isinstance(prof.error, RuntimeError)
    assert_no_hooks_left(model)
    trace = load_trace(prof.path)
    assert trace.frame.height == 2 and trace.end.status == "profiler_error"


def test_writer_failure_switches_profiling_off(tmp_path):
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with (
        pytest.warns(GpuAnalyzeWarning, match="switched off"),
        analyzer.profile(model, out=str(tmp_path / "t.arrow"), flush_every_steps=1) as prof,
    ):
        # the disk disappears (the file is created at the first step boundary)
        losses = train_with_fault(model, opt, loader, 3, lambda: prof._writer._file.close())
    assert losses == plain
    assert_no_hooks_left(model)


def test_unwritable_location_does_not_stop_training(tmp_path):
    model, opt, loader = make_loop(small())
    with (
        pytest.warns(GpuAnalyzeWarning, match="switched off"),
        analyzer.profile(model, out=str(tmp_path / "missing_dir" / "t.arrow")) as prof,
    ):
        losses = train(model, opt, loader)
    assert len(losses) == 12 and not prof.enabled
    assert_no_hooks_left(model)


def test_existing_trace_is_never_overwritten_unless_asked(tmp_path):
    out = tmp_path / "t.arrow"
    out.write_bytes(b"keep me")
    model, opt, loader = make_loop(small())
    with pytest.warns(GpuAnalyzeWarning, match="exists"), analyzer.profile(model, out=str(out)) as prof:
        train(model, opt, loader)
    assert out.read_bytes() == b"keep me"
    assert prof.path == tmp_path / "t-1.arrow" and load_trace(prof.path).frame.height == 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with analyzer.profile(model, out=str(out), overwrite=True) as prof2:
            train(model, opt, loader)
    assert prof2.path == out and load_trace(out).frame.height == 12


def test_a_second_concurrent_profile_records_nothing(tmp_path):
    model, opt, loader = make_loop(small())
    with (
        analyzer.profile(model, out=str(tmp_path / "a.arrow")) as outer,
        pytest.warns(GpuAnalyzeWarning, match="already active"),
        analyzer.profile(model, out=str(tmp_path / "b.arrow")) as inner,
    ):
        train(model, opt, loader)
    assert inner.path is None and outer.steps_recorded == 12
    assert_no_hooks_left(model)


def test_bad_options_raise_the_projects_error():
    with pytest.raises(analyzer.GpuAnalyzeError, match="device"):
        analyzer.profile(torch.nn.Linear(2, 2), device="tpu")
    with pytest.raises(analyzer.GpuAnalyzeError, match="suffix"):
        analyzer.profile(torch.nn.Linear(2, 2), out="trace")


def test_sampled_kernel_windows_on_cpu_are_empty_and_said(tmp_path):
    import polars as pl

    model, opt, loader = make_loop(small(steps=20))
    with analyzer.profile(
        model, out=str(tmp_path / "t.arrow"), kernel_windows=True, window_first=5, window_every=10, window_steps=2
    ) as prof:
        train(model, opt, loader)
    frame = load_trace(prof.path).frame
    sampled = frame.filter(pl.col(S.KERNEL_STATS).is_not_null())
    assert sampled.get_column(S.STEP).to_list() == [5, 6, 15, 16]
    assert [S.decode_kernel_stats(t).kernel_count for t in sampled.get_column(S.KERNEL_STATS)] == [0] * 4
    report = analyzer.analyze(prof.path)
    assert report.metrics.kernels is None
    assert report.metrics.steps == 20 - 2 - 4  # warm-up and window steps left out of step timings
    assert any("no GPU kernels" in n for n in report.notes)
    assert_no_hooks_left(model)


def test_torch_profiler_failing_to_start_switches_profiling_off(tmp_path, monkeypatch):
    from analyzer.record.windows import KernelWindows

    def broken(self, step):
        raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(KernelWindows, "start", broken)
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with (
        pytest.warns(GpuAnalyzeWarning, match="CUPTI unavailable"),
        analyzer.profile(model, out=str(tmp_path / "t.arrow"), kernel_windows=True, window_first=3) as prof,
    ):
        losses = train(model, opt, loader)
    assert losses == plain and not prof.enabled
    assert_no_hooks_left(model)
    assert load_trace(prof.path).frame.height == 3


def test_disk_full_switches_profiling_off(tmp_path, monkeypatch):
    import errno

    import gpuanalyze.ingest.writer

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gpuanalyze.ingest.writer.os, "fsync", no_space)
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with (
        pytest.warns(GpuAnalyzeWarning, match="No space left"),
        analyzer.profile(model, out=str(tmp_path / "t.arrow"), flush_every_steps=1) as prof,
    ):
        losses = train(model, opt, loader)
    assert losses == plain and isinstance(prof.error, OSError)
    assert_no_hooks_left(model)


def test_trace_directory_removed_mid_run_does_not_stop_training(tmp_path):
    import shutil

    cfg = small()
    plain = train(*make_loop(cfg))
    out_dir = tmp_path / "traces"
    out_dir.mkdir()
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(model, out=str(out_dir / "t.arrow"), flush_every_steps=1):
        losses = train_with_fault(model, opt, loader, 4, lambda: shutil.rmtree(out_dir))
    assert losses == plain
    assert_no_hooks_left(model)
