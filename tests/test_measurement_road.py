"""One measurement road: a run as one file, as a directory of rank files and as trace.rank<N>.arrow
siblings gives the rules the same inputs, outlier steps left out on every path (analysis.road)."""

from __future__ import annotations

import shutil
from typing import Any

from analyzer import analyze
from analyzer.render.json_report import report_dict
from tests.conftest import make_row, write_trace

#: Steps far above the others (a stall, a checkpoint): the steady state leaves them out of the rules.
SLOW = (13, 27, 41)


def _rows(rank: int) -> list[dict[str, Any]]:
    return [
        make_row(
            i, rank=rank, wall=(60.0 if i in SLOW else 20.0 + 0.1 * (i % 5)), data=8.0, fwd=5.0, bwd=5.0, samples=8
        )
        for i in range(60)
    ]


def _same(a: dict[str, Any], b: dict[str, Any], *, also: tuple[str, ...] = ()) -> None:
    a, b = dict(a), dict(b)
    for key in ("path", "trace", *also):
        a.pop(key, None)
        b.pop(key, None)
    assert a == b


def test_one_rank_as_a_file_and_as_a_directory_gives_the_same_report(tmp_path):
    one = write_trace(tmp_path / "run.arrow", _rows(0))
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(one, d / "run.arrow")
    by_file, by_dir = analyze(one), analyze(d)
    assert by_file.steady is not None and set(SLOW) <= by_file.steady.left_out
    assert any("left out of the rules" in n for n in by_dir.notes)  # out of core leaves them out too
    _same(report_dict(by_file), report_dict(by_dir))


def test_two_ranks_as_one_file_a_directory_and_rank_siblings_give_the_same_report(tmp_path):
    both = write_trace(tmp_path / "both.arrow", _rows(0) + _rows(1), run={"world_size": 2})
    d = tmp_path / "dir"
    d.mkdir()
    for rank in (0, 1):
        write_trace(d / f"trace.rank{rank}.arrow", _rows(rank), run={"world_size": 2, "rank": rank})
    in_memory, by_dir, siblings = (report_dict(analyze(p)) for p in (both, d, d / "trace.rank0.arrow"))
    assert in_memory["steady_state"] is not None
    _same(by_dir, siblings)
    # the one file's own description (one writer's end marker of 120 rows, its run line) is not the rank
    # files'; everything measured and judged is the same
    _same(in_memory, by_dir, also=("run", "end"))
