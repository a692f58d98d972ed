"""The notes of a capture's ranks are said once, naming the ranks a note or a clause is true of."""

from gpuanalyze.ingest.nsys.notes import merge_rank_notes


def test_a_note_every_rank_has_is_said_once_without_ranks():
    assert merge_rank_notes([["imported", "a"], ["imported", "a"]]) == ["imported", "a"]


def test_a_note_some_ranks_have_names_them():
    got = merge_rank_notes([["x"], ["y"], ["x"]])
    assert got == ["x (on ranks 0, 2)", "y (on rank 1)"]


def test_a_clause_only_some_ranks_have_names_them():
    head = "17 iterations found"
    got = merge_rank_notes([[head], [f"{head}; 9.5 ms before the first is not analysed"]])
    assert got == [f"{head}; 9.5 ms before the first is not analysed (on rank 1)"]


def test_one_rank_keeps_its_notes():
    assert merge_rank_notes([["a; b", "a; b"]]) == ["a; b"]
