"""The PyTorch profiler (Kineto, Chrome trace JSON) importer: a bounded streaming parse into the timeline."""
