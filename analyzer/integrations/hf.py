"""A Hugging Face callback: ``Trainer(..., callbacks=[GpuAnalyzeCallback(out="trace.arrow")])``.

Steps come from the Trainer: a trace row per ``on_step_end``, i.e. per optimizer step (with
``gradient_accumulation_steps=k`` one row covers k micro-batches); the model's forward is timed
with its hooks; evaluation inside ``train`` is left out of the step it interrupts. At the end
the verdict goes to the Trainer's log (``trainer.log`` with ``gpuanalyze/*`` numbers, so every
``report_to`` integration gets them, and ``state.log_history``), to the ``transformers.trainer``
logger, and the report is printed on the main process. Trainer callbacks are not told when
``train()`` raises, so the callback wraps that Trainer's ``train`` (found when the Trainer is
created) to close the trace on an exception too. Needs ``pip install 'gpuanalyze[hf]'``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

try:
    from transformers import Trainer, TrainerCallback
    from transformers.utils import logging as hf_logging
except ImportError as _missing:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "analyzer.integrations.hf needs Hugging Face transformers: pip install 'gpuanalyze[hf]'"
    ) from _missing

from analyzer.integrations._session import SessionCallback

_log = hf_logging.get_logger("transformers.trainer")


class GpuAnalyzeCallback(SessionCallback, TrainerCallback):
    """Profile ``trainer.train()`` into ``out`` (each rank: ``<stem>.rank<N><suffix>``); ``profile_options``
    are ``analyzer.profile``'s options; ``report=False`` skips printing the report;
    ``log_to="mlflow"``, ``"wandb"`` or both also logs the verdict and the HTML report there (docs/trackers.md)."""

    RECORDER = "transformers"
    LOGGER = _log
    _trainer: Any = None
    """The Trainer this callback was made for (found on the stack when it is created)."""
    _evaluating = False

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = _calling_trainer()
        if trainer is not None and self._trainer is None:
            self._trainer = trainer
            _close_on_exception(trainer, self)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self._trainer is None:
            self._trainer = _calling_trainer()
        self._evaluating = False
        # the Trainer fetches batches ahead of the step that uses them: count what the model sees
        self._session.start(model, forward_hooks=True, samples_from_loader=False)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._session.step()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._evaluating = True

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._evaluating:
            self._evaluating = False
            self._session.skip()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._session.profiler is None:
            return
        self.path = self._session.end()
        if not state.is_world_process_zero:
            return
        report = self._session.analyse(self.path)
        if report is None:
            return
        from analyzer.run.summary import summary

        values = summary(report)
        state.log_history.append({f"gpuanalyze/{k}": v for k, v in values.items()} | {"step": state.global_step})
        numbers = {f"gpuanalyze/{k}": float(v) for k, v in values.items() if isinstance(v, int | float)}
        if self._trainer is not None:
            try:
                self._trainer.log(numbers)
            except Exception as exc:  # noqa: BLE001 - a report_to integration's problem must not fail train()
                _log.warning("gpuanalyze: could not log to the trainer (%s)", exc)

    def _train_raised(self, exc: BaseException) -> None:
        if self._session.profiler is not None:
            self.path = self._session.end(exc)


def _calling_trainer() -> Any:
    """The Trainer whose callback handler is calling us (found on the stack; None if not there)."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _close_on_exception(trainer: Any, callback: GpuAnalyzeCallback) -> None:
    original = trainer.train

    @functools.wraps(original)
    def train(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except BaseException as exc:
            callback._train_raised(exc)
            raise

    trainer.train = train
