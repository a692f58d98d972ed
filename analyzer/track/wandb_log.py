"""Log a flat summary (and the HTML report) to Weights & Biases: the active run, or a new one.

A new run is made inside ``tracker_call`` (the command line redacted) and captures no code, requirements or
console output (``save_code=False``, ``x_save_requirements=False``, ``console="off"``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from analyzer.render.flat_summary import Scalar

#: Seconds a new run may take to start before W&B gives up (its default is 90; a dead server then
#: holds the command ~60 s); ``WANDB_INIT_TIMEOUT``, when the user sets it, wins.
INIT_TIMEOUT_S = 10.0


def init_timeout() -> float:
    """The user's ``WANDB_INIT_TIMEOUT`` when it is a positive number of seconds, else INIT_TIMEOUT_S."""
    try:
        value = float(os.environ.get("WANDB_INIT_TIMEOUT", ""))
    except ValueError:
        return INIT_TIMEOUT_S
    return value if value > 0 else INIT_TIMEOUT_S


def new_run_settings() -> Any:
    """The settings of a run gpuanalyze creates (inside ``tracker_call``, so ``sys.argv`` is redacted):
    the program named, no code, requirements or console capture."""
    import wandb

    return wandb.Settings(
        program=sys.argv[0] if sys.argv else "gpuanalyze",
        save_code=False,
        x_save_requirements=False,
        console="off",
        init_timeout=init_timeout(),
    )


def log_wandb(values: dict[str, Scalar], html: Path | None, run_name: str) -> str:
    """Every value into the run summary (``gpuanalyze/*``), the report as a run file and an artifact;
    returns the run id. With WANDB_MODE=offline it all stays in the local ``wandb/`` directory."""
    import wandb

    active = wandb.run
    run = active if active is not None else wandb.init(project="gpuanalyze", name=run_name, settings=new_run_settings())
    try:
        run.summary.update({f"gpuanalyze/{k}": v for k, v in values.items() if v is not None})
        if html is not None:
            from analyzer.files import write_bytes

            kept = Path(run.dir) / html.name  # the run's own files directory: uploaded with the run
            write_bytes(kept, html.read_bytes(), force=False)
            run.save(str(kept), base_path=str(kept.parent), policy="now")
            artifact = wandb.Artifact("gpuanalyze-report", type="gpuanalyze-report")
            artifact.add_file(str(html))
            run.log_artifact(artifact)
        return str(run.id)
    finally:
        if active is None:
            run.finish()
