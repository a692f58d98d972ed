"""numba.cuda kernels under the CUDA simulator, against numpy references (runs in CI)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

SCRIPT = textwrap.dedent("""
    from gpuanalyze.kernels.matmul_numba import NumbaMatmul

    mm = NumbaMatmul(40)     # not a multiple of the tile: exercises the edge guards
    assert mm.max_rel_error(rows=40) < 1e-5, mm.max_rel_error(rows=40)
    print("SIM-OK")
""")


@pytest.mark.slow
def test_numba_kernels_under_the_simulator():
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SIM-OK" in result.stdout
