"""Logging a report to experiment trackers (MLflow, Weights & Biases): `--log`, the callbacks' ``log_to=``."""
