"""The Lightning and Hugging Face callbacks, with the real frameworks on CPU and tiny models built
from code and configs (nothing downloaded)."""

import importlib
import importlib.util
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from torch.optim import optimizer as optim_mod  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

from gpuanalyze.ingest.trace import schema as S  # noqa: E402
from gpuanalyze.ingest.trace.reader import load_trace  # noqa: E402
from tests.scenarios.loops import one_thread  # noqa: E402


def patched():
    """What the profiler patches while active (torch.compile as the frameworks left it: Lightning wraps it)."""
    return (DataLoader.__iter__, _BaseDataLoaderIter.__next__, torch.autograd.backward, torch.compile)


def assert_no_hooks_left(model, before):
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    assert not any("_compiled_call_impl" in vars(m) for m in model.modules())
    assert not optim_mod._global_optimizer_pre_hooks and not optim_mod._global_optimizer_post_hooks
    assert patched() == before


class SlowPairs(Dataset):
    """(x, y) pairs that take ``cost_s`` each to load: a slow dataset."""

    def __init__(self, n, cost_s):
        self.n, self.cost_s = n, cost_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.cost_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(8, generator=g), torch.randn(1, generator=g)


@pytest.mark.parametrize(
    ("module", "extra"), [("analyzer.integrations.lightning", "lightning"), ("analyzer.integrations.hf", "hf")]
)
def test_a_missing_framework_says_which_extra_to_install(monkeypatch, module, extra):
    hidden = "lightning.pytorch" if extra == "lightning" else "transformers"
    monkeypatch.setitem(sys.modules, hidden, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'gpuanalyze\[{extra}\]'"):
        importlib.import_module(module)


@pytest.mark.slow  # importing Lightning takes seconds
def test_callback_options_are_checked_when_it_is_made():
    pytest.importorskip("lightning")
    from analyzer.errors import GpuAnalyzeError
    from analyzer.integrations.lightning import GpuAnalyzeCallback

    with pytest.raises(GpuAnalyzeError, match="device"):
        GpuAnalyzeCallback(device="tpu")
    with pytest.raises(GpuAnalyzeError, match="manual_steps"):
        GpuAnalyzeCallback(manual_steps=False)
    with pytest.raises(GpuAnalyzeError, match="unexpected keyword"):
        GpuAnalyzeCallback(bogus=1)


# -- Lightning ---------------------------------------------------------------------------------


def _lightning_fit(tmp_path, *, accumulate, callback, fail_at=None):
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
            self.losses = []

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, idx):
            if fail_at is not None and idx == fail_at:
                raise ZeroDivisionError("user bug")
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            self.losses.append(float(loss.detach()))
            return loss

        def validation_step(self, batch, idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    pl.seed_everything(0, verbose=False)
    module = Regressor()
    trainer = pl.Trainer(
        max_epochs=2,
        accumulate_grad_batches=accumulate,
        callbacks=[callback] if callback else [],
        logger=CSVLogger(tmp_path / "logs"),
        accelerator="cpu",
        devices=1,
        limit_val_batches=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    loader = DataLoader(SlowPairs(40, 0.005), batch_size=4)
    with one_thread():  # the data wait stays the largest part beside other work (loops.one_thread)
        trainer.fit(module, loader, DataLoader(SlowPairs(8, 0.0), batch_size=4))
    return trainer, module


@pytest.mark.slow
def test_lightning_fit_gives_a_row_per_optimizer_step_and_the_verdict(tmp_path):
    pytest.importorskip("lightning")
    from analyzer.integrations.lightning import GpuAnalyzeCallback

    for accumulate in (1, 3):
        _, plain = _lightning_fit(tmp_path / f"plain{accumulate}", accumulate=accumulate, callback=None)
        callback = GpuAnalyzeCallback(out=tmp_path / f"l{accumulate}.arrow", report=False)
        before = patched()
        trainer, module = _lightning_fit(tmp_path / f"prof{accumulate}", accumulate=accumulate, callback=callback)
        assert module.losses == plain.losses  # bit-identical
        assert_no_hooks_left(module, before)
        trace = load_trace(callback.path)
        frame = trace.frame
        assert trace.complete and trace.run.recorder == "lightning"
        assert frame.height == trainer.global_step == 2 * -(-10 // accumulate)  # 10 batches an epoch, last partial
        samples = frame.get_column(S.BATCH_SAMPLES).to_list()
        assert samples[0] == 4 * accumulate and sum(samples) == 2 * 40
        assert (frame.get_column(S.FORWARD_MS) > 0).all() and (frame.get_column(S.BACKWARD_MS) > 0).all()
        assert callback.report is not None and callback.report.bottleneck == "data_loading"
        metrics = next((tmp_path / f"prof{accumulate}" / "logs").rglob("metrics.csv")).read_text()
        hparams = next((tmp_path / f"prof{accumulate}" / "logs").rglob("hparams.yaml")).read_text()
        assert "gpuanalyze/step_time_median_ms" in metrics and "data_loading" in hparams


@pytest.mark.slow
def test_lightning_fit_that_raises_closes_the_trace(tmp_path):
    pytest.importorskip("lightning")
    from analyzer.integrations.lightning import GpuAnalyzeCallback

    callback = GpuAnalyzeCallback(out=tmp_path / "t.arrow", report=False)
    before = patched()
    with pytest.raises(ZeroDivisionError):
        _lightning_fit(tmp_path, accumulate=1, callback=callback, fail_at=5)
    assert not optim_mod._global_optimizer_pre_hooks and patched() == before
    trace = load_trace(callback.path)
    assert trace.complete and trace.end.status == "exception" and "user bug" in trace.end.exception
    assert trace.frame.height == 5


# -- Hugging Face --------------------------------------------------------------------------------


class TokenDataset(Dataset):
    def __init__(self, n, cost_s):
        self.n, self.cost_s = n, cost_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.cost_s)
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def _hf_train(tmp_path, *, accumulate, callback, fail_at=None):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Failing(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            if fail_at is not None and self.state.global_step == fail_at:
                raise ZeroDivisionError("user bug")
            return super().compute_loss(model, inputs, *args, **kwargs)

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16, eos_token_id=0, bos_token_id=0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulate,
        num_train_epochs=1,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    # 50 ms per sample (200 ms per batch): the wait stays the largest cause however slow a loaded host
    # makes the tiny model's compute (0.1-0.8 s per step measured here); at 10 ms it fell below 5%
    trainer = Failing(
        model=model, args=args, train_dataset=TokenDataset(48, 0.05), callbacks=[callback] if callback else []
    )
    with one_thread():  # with the 50 ms, the wait stays the largest part beside other work (loops.one_thread)
        result = trainer.train()
    return trainer, model, result


@pytest.mark.slow
def test_hf_trainer_gives_a_row_per_optimizer_step_and_the_verdict(tmp_path):
    pytest.importorskip("transformers")
    from analyzer.integrations.hf import GpuAnalyzeCallback

    for accumulate in (1, 3):
        _, _, plain = _hf_train(tmp_path / f"plain{accumulate}", accumulate=accumulate, callback=None)
        callback = GpuAnalyzeCallback(out=tmp_path / f"h{accumulate}.arrow", report=False)
        before = patched()
        trainer, model, result = _hf_train(tmp_path / f"prof{accumulate}", accumulate=accumulate, callback=callback)
        assert result.training_loss == plain.training_loss  # bit-identical
        assert_no_hooks_left(model, before)
        trace = load_trace(callback.path)
        frame = trace.frame
        assert trace.complete and trace.run.recorder == "transformers" and trace.run.models == ("GPT2LMHeadModel",)
        assert frame.height == trainer.state.global_step == 12 // accumulate
        assert sum(frame.get_column(S.BATCH_SAMPLES).to_list()) == 48
        assert (frame.get_column(S.FORWARD_MS) > 0).all() and (frame.get_column(S.BACKWARD_MS) > 0).all()
        assert callback.report is not None and callback.report.bottleneck == "data_loading"
        verdicts = [e for e in trainer.state.log_history if "gpuanalyze/bottleneck" in e]
        assert [e["gpuanalyze/bottleneck"] for e in verdicts] == ["data_loading"]
        assert any(e.get("gpuanalyze/step_time_median_ms", 0) > 0 for e in trainer.state.log_history)  # trainer.log


@pytest.mark.slow
def test_hf_train_that_raises_closes_the_trace(tmp_path):
    pytest.importorskip("transformers")
    from analyzer.integrations.hf import GpuAnalyzeCallback

    callback = GpuAnalyzeCallback(out=tmp_path / "t.arrow", report=False)
    before = patched()
    with pytest.raises(ZeroDivisionError):
        _hf_train(tmp_path, accumulate=1, callback=callback, fail_at=4)
    assert not optim_mod._global_optimizer_pre_hooks and patched() == before
    trace = load_trace(callback.path)
    assert trace.complete and trace.end.status == "exception" and "user bug" in trace.end.exception
    assert trace.frame.height == 4


@pytest.mark.slow
def test_lightning_log_to_mlflow_fills_a_file_store_and_a_broken_tracker_only_warns(tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed (pip install 'gpuanalyze[mlflow]')")
    import mlflow

    from analyzer.errors import GpuAnalyzeWarning
    from analyzer.integrations.lightning import GpuAnalyzeCallback
    from analyzer.track import mlflow_log

    store = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(store)
    try:
        callback = GpuAnalyzeCallback(out=tmp_path / "l.arrow", report=False, log_to="mlflow")
        _lightning_fit(tmp_path / "fit", accumulate=1, callback=callback)
        (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
        assert run.data.tags["gpuanalyze/bottleneck"] == callback.report.bottleneck == "data_loading"
        assert run.data.metrics["gpuanalyze/steps"] == callback.report.metrics.steps

        def broken(*args, **kwargs):
            raise ConnectionError("tracking server down")

        monkeypatch.setattr(mlflow_log, "log_mlflow", broken)
        callback = GpuAnalyzeCallback(out=tmp_path / "b.arrow", report=False, log_to="mlflow")
        with pytest.warns(GpuAnalyzeWarning, match="could not log the report to mlflow"):
            _lightning_fit(tmp_path / "fit2", accumulate=1, callback=callback)
        assert callback.report is not None  # the fit finished and was analysed
    finally:
        mlflow.set_tracking_uri(None)
