"""BabelStream-style kernels for CuPy: float4-vectorised grid-stride loops, dot with a block reduction."""

from __future__ import annotations

import numpy as np

_SRC = r"""
extern "C" {
__global__ void copy_k(const float4* __restrict__ a, float4* __restrict__ c, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)blockDim.x * gridDim.x)
    c[i] = a[i];
}
__global__ void scale_k(const float4* __restrict__ a, float4* __restrict__ c, float s, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)blockDim.x * gridDim.x) {
    float4 x = a[i]; c[i] = make_float4(s * x.x, s * x.y, s * x.z, s * x.w);
  }
}
__global__ void add_k(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                      long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)blockDim.x * gridDim.x) {
    float4 x = a[i], y = b[i]; c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}
__global__ void triad_k(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                        float s, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)blockDim.x * gridDim.x) {
    float4 x = a[i], y = b[i]; c[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
  }
}
__global__ void dot_k(const float4* __restrict__ a, const float4* __restrict__ b, double* partial, long long n4) {
  __shared__ double sh[256];
  double acc = 0.0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)blockDim.x * gridDim.x) {
    float4 x = a[i], y = b[i];
    acc += (double)(x.x * y.x) + (double)(x.y * y.y) + (double)(x.z * y.z) + (double)(x.w * y.w);
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
}
"""
TPB = 256


class CupyStream:
    """Three float32 arrays of n elements on the current device (n a multiple of 1024)."""

    def __init__(self, n: int, scalar: float, init: tuple[float, float, float], sm_count: int) -> None:
        import cupy

        assert n % (4 * TPB) == 0
        self.cp = cupy
        module = cupy.RawModule(code=_SRC)
        self.k = {name: module.get_function(f"{name}_k") for name in ("copy", "scale", "add", "triad", "dot")}
        self.n, self.n4 = n, np.int64(n // 4)
        self.s = np.float32(scalar)
        self.a, self.b, self.c = (cupy.full(n, v, dtype=cupy.float32) for v in init)
        self.grid = (n // 4 + TPB - 1) // TPB
        self.dot_grid = sm_count * 8
        self.partial = cupy.zeros(self.dot_grid, dtype=cupy.float64)

    def run(self, variant: str) -> None:
        a4, b4, c4 = self.a, self.b, self.c
        g, t = (self.grid,), (TPB,)
        if variant == "copy":
            self.k["copy"](g, t, (a4, c4, self.n4))
        elif variant == "scale":
            self.k["scale"](g, t, (a4, c4, self.s, self.n4))
        elif variant == "add":
            self.k["add"](g, t, (a4, b4, c4, self.n4))
        elif variant == "triad":
            self.k["triad"](g, t, (a4, b4, c4, self.s, self.n4))
        else:
            self.k["dot"]((self.dot_grid,), t, (a4, b4, self.partial, self.n4))

    def c_equals_any(self, values: tuple[np.float32, ...]) -> bool:
        c = self.c
        ok = self.cp.zeros(c.shape, dtype=bool)
        for v in values:
            ok |= c == v
        return bool(ok.all())

    def dot_value(self) -> float:
        return float(self.partial.sum())

    def sync(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()
