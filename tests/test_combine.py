"""Per-step sums over ranks (analyzer.analysis.combine.StepSums)."""

import numpy as np

from analyzer.analysis.combine import _SUMS, StepSums


def _sums(steps: list[int], value: float, *, writeable: bool) -> StepSums:
    out = StepSums()
    out.steps = np.array(steps, dtype=np.int64)
    out.sums = {k: np.full(len(steps), value) for k in _SUMS}
    for a in out.sums.values():
        a.flags.writeable = writeable
    return out


def test_sums_handed_over_read_only_still_take_later_ranks():
    """A worker's result can arrive as read-only buffers (Ray's zero-copy objects): the first is taken
    over and the next ranks are added to it, the read-only input left as it was."""
    total = StepSums()
    first = _sums([1, 2, 3], 1.0, writeable=False)
    total.absorb(first)
    total.absorb(_sums([1, 2, 3], 2.0, writeable=False))
    total.absorb(_sums([3, 4], 4.0, writeable=True))
    assert total.steps.tolist() == [1, 2, 3, 4]
    assert total.sums["wall"].tolist() == [3.0, 3.0, 7.0, 4.0]
    assert first.sums["wall"].tolist() == [1.0, 1.0, 1.0]


def test_sums_handed_over_writeable_are_taken_not_copied():
    total = StepSums()
    first = _sums([5, 6], 1.0, writeable=True)
    total.absorb(first)
    assert total.sums["idle"] is first.sums["idle"]
