"""The timeline's id arrays (timeline/model.py) are as narrow as their values allow, with the same values, order
and equalities: correlation ids and thread ids are the longest integer arrays a capture's conversion holds."""

from __future__ import annotations

from array import array

import numpy as np

from gpuanalyze.ingest.timeline.blocking_calls import HostOps
from gpuanalyze.ingest.timeline.model import _ids, _thread_codes


def test_correlation_ids_are_int32_where_every_one_fits_and_keep_their_values():
    fits = array("q", [-1, 0, 7, 2**31 - 1, -(2**31)])
    got = _ids(fits)
    assert got.dtype == np.int32 and got.tolist() == fits.tolist()
    wide = array("q", [-1, 2**31])
    assert _ids(wide).dtype == np.int64 and _ids(wide).tolist() == wide.tolist()
    assert _ids(array("q")).size == 0


def _ops(tids: list[int]) -> HostOps:
    start = np.arange(len(tids), dtype=float)
    return HostOps(start, start + 1, np.array(tids, np.int64), np.zeros(len(tids), np.int32), ())


def test_thread_ids_of_one_process_become_int32_codes_with_the_same_order_and_equalities():
    pid = 4_242 << 24 | 1 << 56  # an Nsight Systems globalTid: hardware id and pid above the thread's 24 bits
    calls = [pid | 17, pid | 9, pid | 17, pid | 300]
    ops, frames = _ops([pid | 9, pid | 17, pid | 17, pid | 5]), _ops([pid | 300])
    rt, got_ops, got_frames = _thread_codes(np.array(calls, np.int64), ops, frames)
    assert rt.dtype == got_ops.tid.dtype == got_frames.tid.dtype == np.int32
    every = np.concatenate([calls, ops.tid, frames.tid])
    coded = np.concatenate([rt, got_ops.tid, got_frames.tid])
    assert (np.argsort(every, kind="stable") == np.argsort(coded, kind="stable")).all()
    assert ((every[:, None] == every[None, :]) == (coded[:, None] == coded[None, :])).all()
    assert got_ops.start is ops.start and got_ops.name is ops.name  # only the thread ids are new


def test_thread_ids_too_far_apart_for_int32_are_kept_as_they_are():
    calls = np.array([1, 2**40], np.int64)
    rt, ops, _ = _thread_codes(calls, _ops([1]), _ops([]))
    assert rt is calls and ops.tid.dtype == np.int64 and ops.tid.tolist() == [1]
