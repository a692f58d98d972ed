"""Where the blocking calls come from: each host-device sync call site's ``file:line function``, found once per
site, stored in the end marker with its calls and blocked time (record/sync_sites.py). A sync that torch itself
makes on the user's behalf (formatting a tensor) is charged to the user's line."""

import sys

import pytest

torch = pytest.importorskip("torch")

import analyzer  # noqa: E402
from analyzer.record.sync_sites import SyncSites  # noqa: E402
from gpuanalyze.ingest.trace.reader import load_trace  # noqa: E402


def _line(offset: int = 0) -> int:
    return sys._getframe(1).f_lineno + offset


def test_sync_call_sites_are_stored_per_user_line_with_their_counts(tmp_path):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = analyzer.profile(model, out=str(tmp_path / "t.arrow"))
    with prof:
        prof._patches.install_sync(prof._on_patched_call)  # a CUDA run installs it; this CPU test does by hand
        for _ in range(5):
            loss = model(torch.ones(2, 4)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            loss.item()  # the first site, 5 calls
            item_line = _line(-1)
            f"{loss.detach():.3f}"  # torch's Tensor.__format__ calls .item(): charged here
            format_line = _line(-1)
    sites = {s.frame: s for s in load_trace(prof.path).end.sync_sites or ()}
    here = f"{__file__}:{item_line} test_sync_call_sites_are_stored_per_user_line_with_their_counts"
    assert sites[here].count == 5 and sites[here].ms >= 0
    formatted = f"{__file__}:{format_line} test_sync_call_sites_are_stored_per_user_line_with_their_counts"
    assert sites[formatted].count == 5
    assert all("site-packages/torch" not in s for s in sites)


def test_sites_keep_the_most_blocked_and_name_one_line_once():
    sites = SyncSites()
    frame = sys._getframe()
    for line, calls, ns in ((1, 3, 2_000_000), (2, 1, 1_000_000)):  # two keys, named from the same user line
        sites.at((id(frame.f_code), line), frame)[:] = [calls, ns]
    (site,) = sites.stored() or ()
    assert site.count == 4 and site.ms == pytest.approx(3.0)
    assert SyncSites().stored() is None
