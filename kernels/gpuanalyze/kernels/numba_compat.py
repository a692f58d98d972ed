"""Let numba-cuda 0.68.0 import on numpy >= 2.5, which removed ``np.row_stack``.

Seen on the H200 machine (numba-cuda 0.68.0, numpy 2.5.2): compiling any kernel failed with
"module 'numpy' has no attribute 'row_stack'". ``row_stack`` was an alias of ``vstack``.
Import this before compiling numba.cuda kernels.
"""

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
