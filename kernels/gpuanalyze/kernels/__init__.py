"""Benchmark kernels that measure this machine's own ceilings (CuPy, Numba CUDA, CPU)."""
