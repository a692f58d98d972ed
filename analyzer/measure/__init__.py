"""The measurement road every analysis takes: load what the user points at, reduce its ranks (here or on workers)."""
