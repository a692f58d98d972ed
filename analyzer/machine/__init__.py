"""Facts about machines, used by both the analysis and the benchmarks: the GPU datasheet,
measured ceilings and collective-bandwidth formulas."""
