"""Facts about machines, used by both the analysis and the benchmarks: the GPU datasheet,
measured ceilings, the environment check and collective-bandwidth formulas."""
