"""Log a flat summary (and the HTML report) to MLflow: the active run, or a new one."""

from __future__ import annotations

from pathlib import Path

from analyzer.render.flat_summary import Scalar, numbers, texts


def log_mlflow(values: dict[str, Scalar], html: Path | None, run_name: str) -> str:
    """Numbers as metrics, text as tags (``gpuanalyze/*``), the report under ``gpuanalyze/``; returns the run id."""
    import mlflow

    active = mlflow.active_run()
    run = active if active is not None else mlflow.start_run(run_name=run_name)
    try:
        mlflow.log_metrics(numbers(values))
        mlflow.set_tags(texts(values))
        if html is not None:
            mlflow.log_artifact(str(html), artifact_path="gpuanalyze")
        return str(run.info.run_id)
    finally:
        if active is None:
            mlflow.end_run()
