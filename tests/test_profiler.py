import functools
import time
import warnings

import polars as pl
import pytest

torch = pytest.importorskip("torch")

from torch.optim import optimizer as optim_mod  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torch.utils.data._utils import fetch as _fetch  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

import analyzer  # noqa: E402
from analyzer.errors import GpuAnalyzeWarning  # noqa: E402
from analyzer.record.steps import StepTimes  # noqa: E402
from gpuanalyze.ingest.trace import schema as S  # noqa: E402
from gpuanalyze.ingest.trace.reader import load_trace  # noqa: E402
from tests.scenarios.loops import LoopConfig, make_loop, train  # noqa: E402


def _patched_attributes() -> tuple:
    """What the profile wraps while it runs: DataLoader iteration, its dataset fetchers, host-device syncs."""
    return (
        DataLoader.__iter__,
        _BaseDataLoaderIter.__next__,
        torch.Tensor.item,
        torch.cuda.synchronize,
        _fetch._MapDatasetFetcher.fetch,
        _fetch._IterableDatasetFetcher.fetch,
    )


ORIGINALS = _patched_attributes()


def assert_no_hooks_left(model):
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert "_compiled_call_impl" not in vars(model)  # where the profile times the model's calls
    assert not optim_mod._global_optimizer_pre_hooks and not optim_mod._global_optimizer_post_hooks
    assert _patched_attributes() == ORIGINALS


def train_with_fault(model, opt, loader, faults):
    """The demo loop, calling ``faults[i]()`` just before step ``i``; returns the losses."""
    losses = []
    for i, (x, y) in enumerate(loader):
        if i in faults:
            faults[i]()
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


def test_the_autocast_a_forward_ran_under_is_recorded_not_changed(tmp_path):
    """Autocast leaves parameters float32 and a CPU trace holds no dtypes: the recorder reads (never sets) the
    autocast state at each outermost forward, so compare can tell the runs apart; none seen, none stored."""
    for autocast in (False, True):
        model, opt, loader = make_loop(small(steps=4))
        with analyzer.profile(model, out=str(tmp_path / f"t{autocast}.arrow")) as prof:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                train(model, opt, loader)
            assert torch.is_autocast_enabled("cpu") is False  # left as the loop left it
        assert load_trace(prof.path).end.autocast == ("cpu:bfloat16" if autocast else None)


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


@pytest.mark.parametrize(
    "event", ["data", "forward_begin", "forward_end", "backward", "optimizer_begin", "optimizer_end"]
)
def test_a_fault_in_any_per_step_hook_warns_once_and_training_continues(tmp_path, monkeypatch, event):
    """The per-step hooks (fetch, forward, backward, optimizer step) guard themselves inline."""
    from analyzer.record.boundaries import StepBoundaries

    cfg = small()
    plain = train(*make_loop(cfg))
    calls = {"n": 0}
    original = getattr(StepBoundaries, event)

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("injected")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StepBoundaries, event, flaky)
    model, opt, loader = make_loop(cfg)
    with (
        pytest.warns(GpuAnalyzeWarning, match="switched off.*injected") as record,
        analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof,
    ):
        losses = train(model, opt, loader)
    assert len(record) == 1 and calls["n"] == 4  # never called again once switched off
    assert losses == plain
    assert not prof.enabled and isinstance(prof.error, RuntimeError)
    assert_no_hooks_left(model)
    trace = load_trace(prof.path)
    closed = 2 if event == "data" else 3  # iter(loader) is the first data call
    assert trace.frame.height == closed and trace.end.status == "profiler_error"


def test_a_row_failing_on_the_writers_thread_mid_run_switches_profiling_off(tmp_path, monkeypatch):
    """Rows are built on the writer's thread: a fault there is noticed at the next step, and the
    trace ends as a profiler error with the rows before the fault."""
    cfg = small()
    plain = train(*make_loop(cfg))
    original = StepTimes.row

    def flaky(self, *args, **kwargs):
        if self.index == 2:
            raise RuntimeError("injected")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StepTimes, "row", flaky)
    model, opt, loader = make_loop(cfg)

    writers = []

    def row_failed():
        """Let the writer's thread meet the fault before step 5 ends (it may already have been noticed)."""
        deadline = time.monotonic() + 10
        while writers[0].row_error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writers[0].row_error is not None

    with (
        pytest.warns(GpuAnalyzeWarning, match="switched off.*injected") as record,
        analyzer.profile(model, out=str(tmp_path / "t.arrow"), flush_every_steps=1) as prof,
    ):
        losses = train_with_fault(model, opt, loader, {1: lambda: writers.append(prof._writer), 5: row_failed})
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

    writers = []

    def disk_gone():
        writers.append(prof._writer)
        prof._writer._file.close()

    def slow_disk():
        """Let time pass (as a slow disk would) until the writer's thread has met the failure."""
        deadline = time.monotonic() + 10
        while writers[0].error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writers[0].error is not None

    with (
        pytest.warns(GpuAnalyzeWarning, match="switched off.*closed file") as record,
        analyzer.profile(model, out=str(tmp_path / "t.arrow"), flush_every_steps=1) as prof,
    ):
        # the file is created at the first step boundary; the steps after 3 write to a closed file
        losses = train_with_fault(model, opt, loader, {3: disk_gone, 5: slow_disk})
    assert len(record) == 1
    assert losses == plain
    assert not prof.enabled
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
    km = report.metrics.kernels  # no GPU kernel; the windows' CPU op times (ingest/cpu_ops.py)
    assert km is not None and km.kernel_count == 0 and km.steps == 4 and km.totals_ms["cpu_op_ms"] > 0
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

    import gpuanalyze.ingest.trace.writer

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gpuanalyze.ingest.trace.writer.os, "fsync", no_space)
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
        losses = train_with_fault(model, opt, loader, {4: lambda: shutil.rmtree(out_dir)})
    assert losses == plain
    assert_no_hooks_left(model)


# -- training-side edges --------------------------------------------------------------------------


def train_accumulating(model, opt, loader, every):
    """Gradient accumulation: an optimizer step every ``every`` batches."""
    losses = []
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / every
        loss.backward()
        if i % every == every - 1:
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


def test_gradient_accumulation_gives_one_row_per_optimizer_step_from_the_first(tmp_path):
    cfg = small(steps=12, sample_cost_s=0.001)
    plain = train_accumulating(*make_loop(cfg), every=4)
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        losses = train_accumulating(model, opt, loader, every=4)
    assert losses == plain
    assert_no_hooks_left(model)
    f = load_trace(prof.path).frame
    assert f.get_column(S.STEP).to_list() == [0, 1, 2]  # 12 batches / 4 = 3 optimizer steps, the first one too
    assert f.get_column(S.BATCH_SAMPLES).to_list() == [32, 32, 32]
    assert (f.get_column(S.DATA_WAIT_MS) >= 4 * 8 * 1.0).all()  # four batches of 8 samples x 1 ms each
    assert (f.get_column(S.OPTIMIZER_MS) > 0).all()
    end = load_trace(prof.path).end
    assert end is not None and (end.fetches, end.fetch_samples) == (12, 8)  # one fetch per micro-batch of 8


def test_an_evaluation_loader_is_neither_data_wait_nor_training_samples(tmp_path):
    """Every 4th step a validation pass (model.eval(), torch.no_grad()) fetches 4 batches of 8 samples from a
    loader that sleeps 4 ms per sample: its time is the step's host time, its samples are not trained."""
    model, opt, loader = make_loop(small(steps=12))
    _, _, val = make_loop(small(steps=4, sample_cost_s=0.004))
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i % 4 == 3:
                model.eval()
                with torch.no_grad():
                    for vx, vy in val:
                        torch.nn.functional.mse_loss(model(vx), vy)
                model.train()
    f = load_trace(prof.path).frame
    assert f.get_column(S.BATCH_SAMPLES).to_list() == [8] * 12  # only the training batch of each step
    assert f.get_column(S.DATA_WAIT_MS).max() < 4 * 8 * 4.0 / 2  # the 128 ms validation fetches are not data wait
    spike = f.filter(pl.col(S.STEP) % 4 == 0).filter(pl.col(S.STEP) > 0)
    assert (spike.get_column(S.WALL_MS) > 4 * 8 * 4.0).all()  # the validation pass is in the next step's time


def test_a_loop_that_never_steps_an_optimizer_gets_a_row_per_forward(tmp_path):
    model, _, loader = make_loop(small())
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
                    p.grad = None
    assert load_trace(prof.path).frame.height == 12


@pytest.mark.parametrize("how", ["simplefilter", "pytest_filterwarnings"])
def test_warnings_as_errors_never_stop_training(tmp_path, capsys, how):
    """`python -W error` / filterwarnings=error: our warning is printed, not raised into the loop."""
    out = tmp_path / "t.arrow"
    out.write_bytes(b"keep me")
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with warnings.catch_warnings():
        if how == "simplefilter":
            warnings.simplefilter("error")
        else:
            warnings.filterwarnings("error", category=GpuAnalyzeWarning)
        with analyzer.profile(model, out=str(out)) as prof:
            losses = train(model, opt, loader)
    assert losses == plain and prof.error is None
    assert f"writing {tmp_path / 't-1.arrow'} instead" in capsys.readouterr().err
    assert out.read_bytes() == b"keep me" and load_trace(prof.path).frame.height == 12
    assert_no_hooks_left(model)


def test_internal_fault_under_warnings_as_errors_switches_off_quietly(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(StepTimes, "row", lambda *a, **k: 1 / 0)
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
            losses = train(model, opt, loader)
    assert losses == plain and isinstance(prof.error, ZeroDivisionError)
    assert capsys.readouterr().err.count("profiling switched off") == 1
    assert_no_hooks_left(model)


class UnprintableError(Exception):
    def __str__(self):
        raise RuntimeError("__str__ is broken too")


def test_an_exception_with_a_broken_str_propagates_and_the_next_profile_records(tmp_path):
    model, opt, loader = make_loop(small())
    raised = UnprintableError()
    with pytest.raises(UnprintableError) as caught, analyzer.profile(model, out=str(tmp_path / "a.arrow")) as prof:
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if i == 2:
                raise raised
    assert caught.value is raised
    assert_no_hooks_left(model)
    end = load_trace(prof.path).end
    assert end.status == "exception" and end.exception == "UnprintableError: <unprintable>"
    with analyzer.profile(model, out=str(tmp_path / "b.arrow")) as again:
        train(model, opt, loader)
    assert again.error is None and load_trace(again.path).frame.height == 12


def test_the_trace_name_is_chosen_and_created_in_one_step(tmp_path, monkeypatch):
    """Another process creating the same name between our choice and our open: we move on to the
    next name, and the warning names the file this process writes."""
    from gpuanalyze.ingest.trace.writer import TraceWriter

    out = tmp_path / "t.arrow"
    original = TraceWriter.open

    def racing_open(self):
        if self.path == out:
            out.write_bytes(b"the other process's trace")  # it won the race for t.arrow
        return original(self)

    monkeypatch.setattr(TraceWriter, "open", racing_open)
    model, opt, loader = make_loop(small())
    with pytest.warns(GpuAnalyzeWarning) as record, analyzer.profile(model, out=str(out)) as prof:
        train(model, opt, loader)
    assert prof.path == tmp_path / "t-1.arrow"
    assert [str(w.message) for w in record] == [
        f"gpuanalyze: {out} exists and overwrite=False; writing {prof.path} instead"
    ]
    assert out.read_bytes() == b"the other process's trace" and load_trace(prof.path).frame.height == 12


def test_secrets_in_argv_are_not_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(
        "sys.argv", ["train.py", "--hf-token=hf_abc", "--api_key", "sk-123", "WANDB_API_KEY=w1", "--lr", "3"]
    )
    model, opt, loader = make_loop(small())
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        train(model, opt, loader)
    argv = load_trace(prof.path).run.argv
    assert argv == "train.py --hf-token=*** --api_key *** WANDB_API_KEY=*** --lr 3"


# -- models, compile, custom loaders, CPU quietness ----------------------------------------------


def gan():
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    D = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return G, D, torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)


def train_gan(G, D, opt_g, opt_d, steps=6):
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        z, real = torch.randn(16, 4, generator=g), torch.randn(16, 8, generator=g)
        d_loss = D(real).mean() - D(G(z).detach()).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = D(G(z)).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        losses.append((float(d_loss.detach()), float(g_loss.detach())))
    return losses


@pytest.mark.parametrize("wrap", ["list", "dict", "moduledict"])
def test_each_model_forward_is_timed_under_its_own_name(tmp_path, wrap):
    plain = train_gan(*gan())
    G, D, opt_g, opt_d = gan()
    models = {"list": [G, D], "dict": {"gen": G, "disc": D}, "moduledict": torch.nn.ModuleDict({"gen": G, "disc": D})}
    with analyzer.profile(models[wrap], out=str(tmp_path / "t.arrow")) as prof:
        losses = train_gan(G, D, opt_g, opt_d)
    assert losses == plain
    assert_no_hooks_left(G)
    assert_no_hooks_left(D)
    trace = load_trace(prof.path)
    names = ("Sequential", "Sequential#2") if wrap == "list" else ("gen", "disc")
    assert trace.run.models == names
    f = trace.frame
    assert f.height == 6  # one row per step of the first optimizer seen (D's), the first one too
    per_model = f.get_column(S.MODEL_FORWARD_MS).to_list()
    assert all(set(m) == set(names) and all(v > 0 for v in m.values()) for m in per_model)
    for row, m in zip(f.get_column(S.FORWARD_MS).to_list(), per_model, strict=True):
        assert row == pytest.approx(sum(m.values()), rel=1e-6)  # G and D run one after the other


def _count_batch(seen: list[int], module: object, args: object, output: torch.Tensor) -> None:
    seen.append(output.shape[0])


def test_the_model_can_be_copied_and_saved_during_the_profile(tmp_path):
    """An EMA model made with deepcopy, a whole-model torch.save: the copies are plain modules,
    and the profiled model's own hooks still run (inside the timed call)."""
    import copy
    import io

    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    seen: list[int] = []
    model.register_forward_hook(functools.partial(_count_batch, seen))  # picklable, as torch.save needs
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        losses = train(model, opt, loader)
        ema = copy.deepcopy(model)
        torch.save(model, io.BytesIO())
    assert losses == plain and len(seen) == 12
    assert "_compiled_call_impl" not in vars(ema)
    x = torch.ones(2, 32)
    assert torch.equal(ema(x), model(x)) and len(seen) == 13  # the copy's hook has its own list
    with torch.no_grad():
        ema[0].weight.zero_()
    assert not torch.equal(ema(x), model(x))  # the copy runs its own weights, not the profiled model's
    model._forward_hooks.clear()
    assert_no_hooks_left(model)
    assert (load_trace(prof.path).frame.get_column(S.FORWARD_MS) > 0).all()


@pytest.mark.slow
def test_a_model_compiled_in_place_during_the_profile_keeps_its_compiled_call(tmp_path):
    model, opt, loader = make_loop(small())
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        for i, (x, y) in enumerate(loader):
            if i == 6:
                model.compile(backend="aot_eager")
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    assert vars(model)["_compiled_call_impl"] is not None  # torch's, left in place
    forward = load_trace(prof.path).frame.get_column(S.FORWARD_MS).to_list()
    assert all(v > 0 for v in forward[:6]) and forward[6:] == [0.0] * 6  # compiled: no longer timed


@pytest.mark.parametrize("bad", [3, "model", [torch.nn.Linear(2, 2), "x"], [], torch.nn.ModuleDict()])
def test_what_cannot_be_timed_is_a_clear_type_error(bad):
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        analyzer.profile(bad)


def test_the_same_module_twice_is_a_type_error():
    m = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match="twice"):
        analyzer.profile([m, m])


def test_without_a_model_the_optimizers_model_is_found(tmp_path):
    cfg = small()
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    with analyzer.profile(out=str(tmp_path / "t.arrow")) as prof:
        losses = train(model, opt, loader)
    assert losses == plain
    assert_no_hooks_left(model)
    trace = load_trace(prof.path)
    assert trace.run.models == ("Sequential",) and trace.run.model_params == sum(p.numel() for p in model.parameters())
    f = trace.frame
    assert f.height == 12 and (f.get_column(S.FORWARD_MS).tail(11) > 0).all()  # found at the first optimizer step


def test_a_custom_loader_is_timed_as_data_wait(tmp_path):
    """nanoGPT-style get_batch() (no DataLoader) sleeping 30 ms a step, wrapped in prof.data()."""
    model, opt, loader = make_loop(small())
    g = torch.Generator().manual_seed(0)

    def get_batch():
        time.sleep(0.030)
        return torch.randn(8, 32, generator=g), torch.randn(8, 1, generator=g)

    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        for _ in range(6):
            with prof.data():
                x, y = get_batch()
                list(zip(range(1), loader, strict=False))  # a DataLoader inside is not counted twice
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    f = load_trace(prof.path).frame
    waits = f.get_column(S.DATA_WAIT_MS)
    assert f.height == 6 and (waits >= 30.0).all()
    assert (waits < f.get_column(S.WALL_MS)).all()
    assert (f.get_column(S.DATA_CPU_MS) < 0.5 * waits).all()  # sleeping, not computing


def test_data_cpu_time_and_batch_bytes_are_recorded(tmp_path):
    """A Dataset that computes in __getitem__ (CPU-bound loading) against one that sleeps (I/O-bound):
    the recorded CPU time tells them apart, which the worker projection needs."""
    from torch.utils.data import DataLoader, Dataset

    class Spin(Dataset):
        def __init__(self, spin: bool) -> None:
            self.spin = spin

        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            t0 = time.thread_time()
            if self.spin:
                while time.thread_time() - t0 < 0.001:  # 1 ms of CPU, however loaded the machine
                    pass
            else:
                time.sleep(0.001)
            return torch.ones(32), torch.ones(1)

    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cpu_ms = {}
    for spin in (True, False):
        out = tmp_path / f"{spin}.arrow"
        with analyzer.profile(model, out=str(out)):
            for x, y in DataLoader(Spin(spin), batch_size=8):
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad()
        trace = load_trace(out)
        f = trace.frame
        cpu_ms[spin] = f.get_column(S.DATA_CPU_MS).mean()
        assert (f.get_column(S.DATA_CPU_MS) <= f.get_column(S.DATA_WAIT_MS) + 0.01).all()
        assert trace.end.batch_bytes == 8 * 32 * 4 + 8 * 4
    # 8 samples per batch, 1 ms of CPU each when spinning; sleeping costs ~0.05 ms of CPU per sample
    assert cpu_ms[True] >= 8.0 and cpu_ms[False] < 0.25 * cpu_ms[True], cpu_ms


def test_prof_data_is_harmless_when_profiling_is_off(tmp_path):
    model = torch.nn.Linear(2, 2)
    with (
        analyzer.profile(model, out=str(tmp_path / "a.arrow")),
        pytest.warns(GpuAnalyzeWarning, match="already active"),
        analyzer.profile(model, out=str(tmp_path / "b.arrow")) as inactive,
        inactive.data(),
    ):
        x = torch.ones(2)
    assert x.sum() == 2


def test_cpu_runs_have_no_kernel_windows_and_no_profiler_noise(tmp_path, capfd):
    model, opt, loader = make_loop(small(steps=20))
    with analyzer.profile(model, out=str(tmp_path / "a.arrow"), window_first=2, window_every=5) as prof:
        train(model, opt, loader)
    assert load_trace(prof.path).frame.get_column(S.KERNEL_STATS).null_count() == 20  # off by default on CPU
    model, opt, loader = make_loop(small(steps=20))
    with analyzer.profile(model, out=str(tmp_path / "b.arrow"), kernel_windows=True, window_first=2, window_every=5):
        train(model, opt, loader)
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_start" not in err


def test_other_stderr_output_during_a_window_start_is_kept(capfd):
    import os

    from analyzer.record.windows import quiet_profiler

    with quiet_profiler():
        os.write(2, b"USDT: noise\nuser line\n")
    assert capfd.readouterr().err == "user line\n"


@pytest.mark.slow
def test_torch_compile_inside_the_block_has_no_graph_breaks(tmp_path):
    from torch._dynamo.utils import counters

    cfg = small()

    def compiled_run(profile):
        torch._dynamo.reset()
        counters.clear()
        model, opt, loader = make_loop(cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ctx = analyzer.profile(model, out=str(tmp_path / f"{profile}.arrow")) if profile else None
            prof = ctx.__enter__() if ctx else None
            fast = torch.compile(model, backend="aot_eager")
            losses = train(fast, opt, loader)
            if ctx:
                ctx.__exit__(None, None, None)
        graphs = counters["stats"]["unique_graphs"]
        fast(torch.ones(8, 32))  # after the profile: no recompilation
        return losses, prof, model, dict(counters["graph_break"]), graphs, counters["stats"]["unique_graphs"]

    plain, *_ = compiled_run(None)
    losses, prof, model, breaks, graphs, graphs_after = compiled_run("p")
    assert losses == plain
    assert breaks == {} and graphs == graphs_after == 1
    assert_no_hooks_left(model)
    f = load_trace(prof.path).frame
    assert f.height == 12 and (f.get_column(S.FORWARD_MS) > 0).all()


RACER = """
import json, sys, time, warnings
import torch
import analyzer
out, start = sys.argv[1], float(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
time.sleep(max(0.0, start - time.time()))  # every process reaches its first step together
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with analyzer.profile(model, out=out) as prof:
        for _ in range(5):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
print(json.dumps({"path": str(prof.path), "warnings": [str(w.message) for w in seen]}))
"""


@pytest.mark.slow
def test_processes_starting_together_with_the_same_out_each_get_their_own_file(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "trace.arrow"
    start = time.time() + 5.0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(out), str(start)], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(3)
    ]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    paths = sorted(r["path"] for r in results)
    assert paths == sorted(str(tmp_path / n) for n in ("trace.arrow", "trace-1.arrow", "trace-2.arrow"))
    for r in results:
        assert load_trace(r["path"]).frame.height == 5
        if r["path"] == str(out):
            assert r["warnings"] == []
        else:  # the warning names the file this process writes
            assert r["warnings"] == [f"gpuanalyze: {out} exists and overwrite=False; writing {r['path']} instead"]


@pytest.mark.slow
def test_forked_dataloader_workers_never_write_traces(tmp_path):
    """Workers forked from a process with an automatic profile (what `gpuanalyze run` arms) re-arm and
    never write: only the training process has a trace."""
    cfg = small(num_workers=2, sample_cost_s=0.001)
    plain = train(*make_loop(cfg))
    model, opt, loader = make_loop(cfg)
    loader.multiprocessing_context = "fork"
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.record.profiler import Profiler

    with Profiler(None, options=ProfileOptions(out=tmp_path / "t.arrow"), recorder="run") as prof:
        losses = train(model, opt, loader)
    assert losses == plain
    assert_no_hooks_left(model)
    assert [p.name for p in tmp_path.iterdir()] == ["t.arrow"]
    trace = load_trace(prof.path)
    assert trace.complete and trace.frame.height == 12 and trace.end.loader_workers == 2


def test_two_forwards_per_step_before_the_first_optimizer_step_are_one_step(tmp_path):
    """A step that runs the model twice (two views, one loss): the first row is one optimizer step too."""
    model, opt, loader = make_loop(small())
    with analyzer.profile(model, out=str(tmp_path / "t.arrow")) as prof:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y) + torch.nn.functional.mse_loss(model(x * 0.5), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    f = load_trace(prof.path).frame
    assert f.height == 12 and f.get_column(S.BATCH_SAMPLES).to_list() == [8] * 12
