"""Planning on top of a verdict: cost per run, compare runs or servers, projection checks, MFU."""
