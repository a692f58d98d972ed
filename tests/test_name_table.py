from __future__ import annotations

from gpuanalyze.ingest.timeline.kernel_names import MAX_NAME_CHARS
from gpuanalyze.ingest.timeline.name_table import NameTable


def test_a_name_seen_again_gets_its_first_id():
    table = NameTable(limit=8, other="(other)")
    assert [table.id(n) for n in ("a", "b", "a", "c", "b")] == [0, 1, 0, 2, 1]
    assert table.names == ["a", "b", "c"]


def test_names_past_the_limit_share_the_other_name_and_known_ones_keep_theirs():
    table = NameTable(limit=2, other="(other)")
    assert table.id("a") == 0 and table.id("b") == 1
    assert table.id("c") == table.id("d") == 2
    assert table.id("a") == 0
    assert table.names == ["a", "b", "(other)"]


def test_long_names_are_cut_so_two_that_differ_past_the_cut_are_one():
    table = NameTable(limit=8, other="(other)")
    stem = "k" * MAX_NAME_CHARS
    assert table.id(stem + "x") == table.id(stem + "y") == 0
    assert table.names == [stem]
