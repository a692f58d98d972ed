"""The host-device sync patch: ``torch.cuda.synchronize`` and the Tensor methods that copy to the host (``item``,
``tolist``, ``cpu``); installed only when the model runs on a GPU, where they wait for it."""

from __future__ import annotations

from analyzer.record.timed_call import Patch, Report, timed_wrapper


def sync_patches(report: Report) -> list[Patch]:
    import torch

    owners = [(torch.cuda, "synchronize"), *((torch.Tensor, name) for name in ("item", "tolist", "cpu"))]
    return [(owner, name, lambda original: timed_wrapper(original, "sync", report, [])) for owner, name in owners]
