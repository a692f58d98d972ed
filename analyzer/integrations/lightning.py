"""A Lightning callback: ``Trainer(callbacks=[GpuAnalyzeCallback(out="trace.arrow")])``.

Steps come from Lightning: a trace row per optimizer step (``trainer.global_step`` advancing, so
``accumulate_grad_batches`` gives one row per accumulated step); the forward phase runs from
``on_train_batch_start`` to ``on_before_backward`` (``training_step``, whatever it calls);
validation inside ``fit`` is left out of the step it interrupts. At the end the verdict is
logged (Python logging under ``lightning.pytorch``, and ``gpuanalyze/*`` values to the trainer's
loggers) and the report printed on global rank 0. Needs ``pip install 'gpuanalyze[lightning]'``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

try:
    import lightning.pytorch as pl
except ImportError as _missing:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "analyzer.integrations.lightning needs Lightning: pip install 'gpuanalyze[lightning]'"
    ) from _missing

from analyzer.integrations._session import SessionCallback

if TYPE_CHECKING:
    from analyzer.planning.outcome import Report

_log = logging.getLogger("lightning.pytorch.callbacks.gpuanalyze")


class GpuAnalyzeCallback(SessionCallback, pl.Callback):
    """Profile ``trainer.fit`` into ``out`` (each rank: ``<stem>.rank<N><suffix>``); ``profile_options``
    are ``analyzer.profile``'s options; ``report=False`` skips printing the report;
    ``log_to="mlflow"``, ``"wandb"`` or both also logs the verdict and the HTML report there (docs/trackers.md)."""

    RECORDER = "lightning"
    LOGGER = _log
    _last_step = 0
    """The trainer's global step when the last step row was written."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_step = trainer.global_step
        self._session.start(pl_module, forward_hooks=False)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        self._session.forward_begin()

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any) -> None:
        self._session.forward_end()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        self._session.forward_end()
        if trainer.global_step != self._last_step:  # the optimizer stepped in this batch
            self._last_step = trainer.global_step
            self._session.step()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._session.skip()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.path = self._session.end()
        if trainer.world_size > 1:
            trainer.strategy.barrier("gpuanalyze")  # every rank's trace is closed before rank 0 reads them
        if not trainer.is_global_zero:
            return
        report = self._session.analyse(self.path)
        if report is not None:
            _log_to_loggers(trainer, report)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.path = self._session.end(exception)


def _log_to_loggers(trainer: pl.Trainer, report: Report) -> None:
    from analyzer.run.summary import summary

    values = summary(report)
    numbers = {f"gpuanalyze/{k}": float(v) for k, v in values.items() if isinstance(v, int | float)}
    for logger in trainer.loggers:
        try:
            logger.log_metrics(numbers, step=trainer.global_step)
            logger.log_hyperparams({"gpuanalyze/bottleneck": report.bottleneck})
        except Exception as exc:  # noqa: BLE001 - a logger's problem must not fail the fit
            _log.warning("gpuanalyze: could not log to %s (%s)", type(logger).__name__, exc)
