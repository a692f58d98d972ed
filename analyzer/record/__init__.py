"""Record stage: hooks that time a PyTorch training loop and hand rows to the trace writer."""
