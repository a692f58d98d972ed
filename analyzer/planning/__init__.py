"""Planning on top of a verdict: cost per run, compare runs or servers, GPU what-ifs, training memory, MFU."""
