"""Per-name facts of an Nsight Systems export's rows (nsys/rows.py), made once per distinct name."""

from __future__ import annotations

from gpuanalyze.ingest.nsys.rows import Interned


def test_interned_tables_cover_the_keys_added_between_calls():
    # each batch of a stepped capture adds names (ProfilerStep#N): a table made earlier must grow with them
    facts = Interned(lambda key: (key, len(key) % 2 == 0))
    assert [facts[k] for k in ("a", "bb", "a")] == [0, 1, 0]
    assert facts.table(1, bool).tolist() == [False, True]
    assert [facts[k] for k in ("ccc", "dd")] == [2, 3]
    assert facts.table(1, bool).tolist() == [False, True, False, True]
    assert facts.table(0, object).tolist() == ["a", "bb", "ccc", "dd"]
