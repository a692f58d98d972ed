"""The backward patch: ``torch.autograd.backward``, which ``Tensor.backward`` calls through the module attribute."""

from __future__ import annotations

from analyzer.record.timed_call import Before, Patch, Report, timed_wrapper


def backward_patches(report: Report, before: list[Before]) -> list[Patch]:
    import torch

    return [(torch.autograd, "backward", lambda original: timed_wrapper(original, "backward", report, before))]
