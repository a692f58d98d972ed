"""torch's own numbers on this GPU, measured the same way as `gpuanalyze bench --backend cupy`.

    python benchmarks/torch_reference.py [--elements 268435456] [--n 8192]

Prints JSON: device-to-device copy GB/s (bytes read + written, 1 GiB float32 like the memory
benchmark), bf16 and fp32 matmul TFLOP/s (median of 50 after 10 warm-ups), pinned and pageable
H2D GB/s for 256 MiB. Compare with the cupy results of the same run to judge our kernels.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics

import torch

from gpuanalyze.kernels.backend import TIMERS


def timed(fn, warmup: int = 10, repeats: int = 50) -> float:
    return statistics.median(TIMERS["torch"](fn, warmup, repeats))


def _copy_rate(elements: int) -> float:
    """Device-to-device copy GB/s (read + write), buffers freed on return."""
    src = torch.full((elements,), 0.1, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / timed(functools.partial(dst.copy_, src), 3, 20) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=2**28)
    parser.add_argument("--n", type=int, default=8192)
    args = parser.parse_args()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    out["d2d_copy_gbps"] = _copy_rate(args.elements)
    n = args.n
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
        # the same value distribution as the cupy benchmark (uniform in [-1, 1)): data changes GPU power and clocks
        a = (torch.rand(n, n, device="cuda") * 2 - 1).to(dtype)
        b = (torch.rand(n, n, device="cuda") * 2 - 1).to(dtype)
        out[f"matmul_{name}_tflops"] = 2 * n**3 / timed(functools.partial(torch.matmul, a, b)) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = True
    out["matmul_tf32_tflops"] = 2 * n**3 / timed(functools.partial(torch.matmul, a, b)) / 1e12
    size = 256 * 2**20
    dev = torch.empty(size // 4, device="cuda")
    for pinned in (True, False):
        host = torch.empty(size // 4, pin_memory=pinned)
        out[f"h2d_{'pinned' if pinned else 'pageable'}_gbps"] = (
            size / timed(functools.partial(dev.copy_, host, non_blocking=True), 2, 10) / 1e9
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
