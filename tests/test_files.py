"""Output files: never over what the user has unless asked, never through links or special files."""

import os

import pytest

from analyzer.errors import GpuAnalyzeError
from analyzer.files import write_bytes, write_file


def test_creates_a_new_file_and_leaves_no_temporary(tmp_path):
    write_bytes(tmp_path / "out.bin", b"data", force=False)
    assert (tmp_path / "out.bin").read_bytes() == b"data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_an_existing_file_needs_force(tmp_path):
    out = tmp_path / "out.bin"
    out.write_bytes(b"precious")
    with pytest.raises(GpuAnalyzeError, match="--force"):
        write_bytes(out, b"new", force=False)
    assert out.read_bytes() == b"precious"
    write_bytes(out, b"new", force=True)
    assert out.read_bytes() == b"new"


@pytest.mark.parametrize("force", [False, True])
def test_links_and_special_files_are_never_replaced(tmp_path, force):
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (link, fifo, tmp_path):
        with pytest.raises(GpuAnalyzeError, match=r"refusing|regular|directory"):
            write_bytes(path, b"x", force=force)
    assert target.read_bytes() == b"precious" and link.is_symlink() and fifo.exists()


def test_a_planted_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "out.bin.tmp").symlink_to(victim)
    write_bytes(tmp_path / "out.bin", b"data", force=False)
    assert victim.read_bytes() == b"precious" and (tmp_path / "out.bin").read_bytes() == b"data"


def test_parent_directories_are_never_created(tmp_path):
    with pytest.raises(GpuAnalyzeError, match="no such directory"):
        write_bytes(tmp_path / "missing" / "out.bin", b"x", force=True)
    assert not (tmp_path / "missing").exists()


def test_a_failing_writer_leaves_nothing_behind(tmp_path):
    def broken(fh):
        fh.write(b"half")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        write_file(tmp_path / "out.bin", broken, force=False)
    assert list(tmp_path.iterdir()) == []


def test_new_files_get_the_umask_permissions_and_replaced_files_keep_theirs(tmp_path):
    import stat

    old = os.umask(0o022)
    try:
        out = tmp_path / "r.html"
        write_bytes(out, b"a", force=False)
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        out.chmod(0o600)
        write_bytes(out, b"b", force=True)
        assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_bytes() == b"b"
    finally:
        os.umask(old)
