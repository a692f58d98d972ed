"""`profile(out=..., overwrite=True)` replaces only a regular file: a FIFO, socket,
device node, link or directory at ``out`` is left as it is and the trace goes to the next free name."""

from __future__ import annotations

import os
import socket
import stat
import warnings
from pathlib import Path

import pytest
import torch

import analyzer
from analyzer.record.paths import create_new


def _create(path):
    with open(path, "x") as fh:
        fh.write("new")


def _fifo(p):
    os.mkfifo(p)


def _socket(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def _link(p):
    target = p.parent / "target.txt"
    target.write_text("keep")
    p.symlink_to(target)


def _dir(p):
    p.mkdir()


@pytest.mark.parametrize("make", [_fifo, _socket, _link, _dir], ids=["fifo", "socket", "symlink", "directory"])
def test_overwrite_never_removes_what_is_not_a_regular_file(tmp_path, make):
    target = tmp_path / "t.arrow"
    make(target)
    before = os.lstat(target).st_mode
    got = create_new(target, _create, overwrite=True)
    assert got == tmp_path / "t-1.arrow" and got.read_text() == "new"
    assert os.lstat(target).st_mode == before
    if stat.S_ISLNK(before):
        assert (tmp_path / "target.txt").read_text() == "keep"


def test_overwrite_replaces_a_regular_file(tmp_path):
    target = tmp_path / "t.arrow"
    target.write_text("old")
    assert create_new(target, _create, overwrite=True) == target and target.read_text() == "new"


def _refuse(path):
    raise PermissionError(path)


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="no /dev/null")
def test_dev_null_is_never_removed(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "unlink", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("pathlib.Path.unlink", lambda self, *a, **k: calls.append(self))
    with pytest.raises(OSError):
        create_new(Path("/dev/null"), _refuse, overwrite=True)
    assert calls == []  # as root the old code deleted /dev/null here


def test_profile_with_overwrite_keeps_a_fifo(tmp_path):
    out = tmp_path / "t.arrow"
    os.mkfifo(out)
    model = torch.nn.Linear(4, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with analyzer.profile(model, out=str(out), overwrite=True) as prof:
            for _ in range(3):
                model(torch.ones(1, 4)).sum().backward()
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert prof.path == tmp_path / "t-1.arrow" and prof.path.is_file()
    assert any("not a regular file" in str(w.message) for w in caught)
