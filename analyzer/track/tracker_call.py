"""What a tracker sees of this process while gpuanalyze logs to it, and how long it may take.

Trackers read the process's command line into their run records (W&B stores ``sys.argv`` as the
run's ``args`` and its program; MLflow ``sys.argv[0]`` as the source name), and online they upload
them. While a tracker is called, ``sys.argv`` is the one the trace stores: redacted by the trace's
own rule (``gpuanalyze.ingest.trace.redact.redact_argv``: ``--hf-token ***``), one definition for both.

An unreachable MLflow server is retried 7 times with a doubling back-off by default (about 250 s
before the error): unless the user set them, a call here gets a short timeout and one retry.

A SIGTERM or SIGHUP (a cancelled CI job, a closed terminal) during the call ends the process with
the status it would have had (128 + the signal), but through the ``with`` blocks, so the temporary
report is removed; only where the signal's handler is the default one, and in the main thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from gpuanalyze.ingest.trace.redact import redact_argv

#: MLflow's HTTP settings for a call from gpuanalyze, each used only when the user has not set it.
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}


@contextlib.contextmanager
def tracker_call() -> Iterator[list[str]]:
    """Inside: ``sys.argv`` redacted (yielded) and MLflow's short HTTP defaults; both restored after."""
    saved_argv = sys.argv
    added = [name for name in MLFLOW_HTTP_DEFAULTS if name not in os.environ]
    sys.argv = redact_argv(saved_argv)
    for name in added:
        os.environ[name] = MLFLOW_HTTP_DEFAULTS[name]
    try:
        with _signals_unwind():
            yield sys.argv
    finally:
        sys.argv = saved_argv
        for name in added:
            os.environ.pop(name, None)


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    saved: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                saved[sig] = signal.signal(sig, _exit_through_finally)
    try:
        yield
    finally:
        for sig in saved:
            signal.signal(sig, signal.SIG_DFL)


class Terminated(SystemExit):
    """A SIGTERM/SIGHUP during a tracker call: this process ends (a tracker's own ``sys.exit`` does not)."""


def _exit_through_finally(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(128 + signum)
