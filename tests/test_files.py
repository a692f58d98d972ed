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


@pytest.mark.parametrize(
    ("args", "victim"),
    [
        (["export", "{d}/a.arrow", "--chrome-trace", "{d}/a.arrow"], "a.arrow"),
        (["export", "{d}/t.rank0.arrow", "--chrome-trace", "{d}/t.rank1.arrow"], "t.rank1.arrow"),
        (["export", "{d}/runs", "--chrome-trace", "{d}/runs/r.arrow"], "runs/r.arrow"),
        (["report", "{d}/a.arrow", "-o", "{d}/a.arrow"], "a.arrow"),
        (["report", "{d}/a.arrow", "-o", "{d}/hard.arrow"], "hard.arrow"),
    ],
)
def test_an_output_that_is_an_input_is_refused_even_with_force(tmp_path, args, victim):
    """--force replaces an earlier output, never what the command reads (the trace, a rank file beside
    it, a trace beneath the input directory, a hard link to it)."""
    import os
    import shutil

    from typer.testing import CliRunner

    from analyzer.cli import app
    from tests.conftest import SAMPLES, make_row, write_trace

    sample = SAMPLES / "cpu_data_loading.arrow"
    for name in ("a.arrow", "runs/r.arrow"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(sample, tmp_path / name)
    for rank in (0, 1):
        rows = [make_row(i, rank=rank) for i in range(20)]
        write_trace(tmp_path / f"t.rank{rank}.arrow", rows, run={"world_size": 2, "rank": rank})
    os.link(tmp_path / "a.arrow", tmp_path / "hard.arrow")
    before = (tmp_path / victim).read_bytes()
    result = CliRunner().invoke(app, [a.format(d=tmp_path) for a in args] + ["--force"])
    assert result.exit_code == 2, result.output
    assert "an input is never overwritten" in result.output and "Traceback" not in result.output
    assert (tmp_path / victim).read_bytes() == before


def test_force_still_replaces_an_earlier_export_beside_the_trace(tmp_path):
    import shutil

    from typer.testing import CliRunner

    from analyzer.cli import app
    from tests.conftest import SAMPLES

    shutil.copy(SAMPLES / "cpu_data_loading.arrow", tmp_path / "trace.arrow")
    (tmp_path / "trace.json").write_text("{}")
    args = ["export", str(tmp_path / "trace.arrow"), "--chrome-trace", str(tmp_path / "trace.json"), "--force"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "trace.json").stat().st_size > 2
