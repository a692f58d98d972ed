"""How many samples a batch holds, from what a DataLoader or a forward call carries (analyzer/record/batch.py)."""

import pytest

torch = pytest.importorskip("torch")

from analyzer.record.batch import batch_size_of  # noqa: E402


def test_the_leading_dimension_is_the_samples():
    assert batch_size_of((torch.zeros(8, 3, 32, 32), torch.zeros(8))) == 8
    assert batch_size_of([torch.zeros(4, 16)]) == 4
    assert batch_size_of({"input_ids": torch.zeros(2, 128, dtype=torch.long)}) == 2
    assert batch_size_of((torch.tensor(1.0),)) is None and batch_size_of(("text",)) is None


def test_a_sequence_first_input_takes_the_dimension_its_targets_share():
    """A GRU's [T, B, F] input beside [B, 1] targets holds B samples, not T: the dimension every tensor has."""
    assert batch_size_of((torch.zeros(20, 2, 32), torch.zeros(2, 1))) == 2
    # where the targets have the leading dimension too, it stays (nothing says otherwise)
    assert batch_size_of((torch.zeros(20, 2, 32), torch.zeros(20, 2))) == 20
    # no dimension in common: the leading one
    assert batch_size_of((torch.zeros(20, 2, 32), torch.zeros(7))) == 20
