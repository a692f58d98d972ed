"""Small real training loops shared by the tests, the sample-trace recorder and the benchmarks."""
