"""NVTX ranges around the host-side phases of a step (``analyzer.profile(nvtx=True)`` on a CUDA run), beside the
step and forward/backward/optimizer ranges of nvtx_marks.py, so an Nsight Systems capture of the run shows
where the loop waited for data, copied a batch to the GPU and waited for the GPU; ``gpuanalyze`` reads them
back from the export as those phases (schema.EXPORT_PHASE_NAMES):

- ``gpuanalyze:data_wait`` around each DataLoader ``__next__``;
- ``gpuanalyze:h2d`` around ``Tensor.to``/``Tensor.cuda`` calls that move a CPU tensor to a CUDA device
  (``.to(torch.float16)`` of a CPU tensor, or any call on a CUDA tensor, is not a copy to the GPU);
- ``gpuanalyze:sync`` around ``torch.cuda.synchronize`` and ``Tensor.item``/``tolist``/``cpu`` of a CUDA tensor.

They are class-level wrappers like patches.py's, installed only with ``nvtx=True`` on a CUDA run and removed
(before patches.py's: they wrap its wrappers) when the profile ends; without ``nvtx`` nothing is installed.
A wrapper calls the original unchanged, and emits nothing while ``torch.compile`` traces (no graph break);
a failure of NVTX itself is caught (a range not emitted), never the training's. Ranges are start/end ranges
(``range_start``/``range_end``): an exception in the call still ends its range, and nothing is left pushed on
the thread's NVTX stack.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from gpuanalyze.ingest.trace import schema as S

DATA, H2D, SYNC = (S.EXPORT_PHASE_NAMES[p] for p in (S.DATA_WAIT_MS, S.H2D_MS, S.SYNC_MS))
_NO_RANGE = object()


def _cuda_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names a CUDA device (a device, its string or number, a CUDA tensor)."""
    import torch

    dev = kwargs.get("device", args[0] if args else None)
    if isinstance(dev, torch.Tensor):
        return bool(dev.is_cuda)
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, str):
        return dev.startswith("cuda")
    return isinstance(dev, int) and not isinstance(dev, bool)


class NvtxPhases:
    """Installs the phase wrappers (``install``) and takes them off (``remove``)."""

    def __init__(self, nvtx: Any) -> None:
        self._start: Callable[[str], Any] = nvtx.range_start
        self._end: Callable[[Any], None] = nvtx.range_end
        self._saved: list[tuple[Any, str, Any, bool]] = []

    def install(self) -> None:
        import torch
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        always: Callable[..., bool] = lambda *a, **k: True  # noqa: E731
        on_cuda: Callable[..., bool] = lambda t, *a, **k: bool(t.is_cuda)  # noqa: E731
        self._wrap(_BaseDataLoaderIter, "__next__", DATA, always)
        self._wrap(torch.Tensor, "to", H2D, lambda t, *a, **k: not t.is_cuda and _cuda_target(a, k))
        self._wrap(torch.Tensor, "cuda", H2D, lambda t, *a, **k: not t.is_cuda)
        self._wrap(torch.cuda, "synchronize", SYNC, always)
        for name in ("item", "tolist", "cpu"):
            self._wrap(torch.Tensor, name, SYNC, on_cuda)

    def remove(self) -> None:
        while self._saved:
            owner, name, original, own = self._saved.pop()
            if own:
                setattr(owner, name, original)
            else:  # it was inherited (Tensor.to is TensorBase's): inherited again
                delattr(owner, name)

    def _wrap(self, owner: Any, name: str, label: str, applies: Callable[..., bool]) -> None:
        import torch

        own = name in getattr(owner, "__dict__", {})
        original = owner.__dict__[name] if own else getattr(owner, name)
        self._saved.append((owner, name, original, own))
        start, end, compiling = self._start, self._end, torch.compiler.is_compiling

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                return original(*args, **kwargs)
            try:
                rid = start(label) if applies(*args, **kwargs) else _NO_RANGE
            except Exception:  # noqa: BLE001 - NVTX or the check failed: no range, the call runs as ever
                rid = _NO_RANGE
            if rid is _NO_RANGE:
                return original(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                with contextlib.suppress(Exception):  # a range not closed is NVTX's loss, never the loop's
                    end(rid)

        setattr(owner, name, functools.wraps(original)(wrapper))


def nvtx_phases(nvtx: bool, cuda: Any) -> NvtxPhases | None:
    """The phase wrappers of a CUDA run with ``nvtx`` (installed), else None."""
    if not nvtx:
        return None
    phases = NvtxPhases(cuda.nvtx)
    phases.install()
    return phases
