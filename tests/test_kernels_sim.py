"""numba.cuda kernels under the CUDA simulator, against numpy references (runs in CI)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

SCRIPT = textwrap.dedent("""
    import numpy as np
    from numba import cuda
    from gpuanalyze.kernels.babelstream import VARIANTS, verify, expected
    from gpuanalyze.kernels.stream_numba import NumbaStream
    from gpuanalyze.kernels.matmul_numba import NumbaMatmul
    from gpuanalyze.kernels.ring_add import _add_k

    n = 2048
    impl = NumbaStream(n, 0.4, (0.1, 0.2, 0.0), blocks=2)
    for v in VARIANTS:
        verify(impl, v, n)   # raises VerificationError on any wrong element
    mm = NumbaMatmul(40)     # not a multiple of the tile: exercises the edge guards
    assert mm.max_rel_error(rows=40) < 1e-5, mm.max_rel_error(rows=40)
    a = cuda.to_device(np.arange(300, dtype=np.float32)); b = cuda.to_device(np.ones(300, dtype=np.float32))
    _add_k[2, 32](a, b)
    assert np.array_equal(a.copy_to_host(), np.arange(300, dtype=np.float32) + 1)
    print("SIM-OK")
""")


@pytest.mark.slow
def test_numba_kernels_under_the_simulator():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SIM-OK" in result.stdout
