"""`gpuanalyze import DIR -o OUTDIR` and `gpuanalyze DIR` on Kineto rank files: one .arrow per rank,
in parallel, reusing up-to-date imports; the safe-write rules of every output file."""

import json
import os

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.measure import storage
from analyzer.measure.import_cache import cache_root
from analyzer.measure.inputs import measure
from analyzer.measure.rank_tasks import PROVENANCE, recorded_provenance
from gpuanalyze.ingest.trace.reader import load_trace
from tests.kineto_fixtures import two_step_trace, write

runner = CliRunner()


def _ranks(d, n=3, world=None):
    d.mkdir(exist_ok=True)
    for r in range(n):
        write(d / f"rank{r}.json.gz", two_step_trace(rank=r, world=world or n), gz=True)
    return d


def _lines(result):
    return result.output.strip().splitlines()


def test_import_dir_writes_one_arrow_per_rank_and_reuses_them(tmp_path):
    src, out = _ranks(tmp_path / "src"), tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in out.iterdir())
    assert files == ["rank0.arrow", "rank1.arrow", "rank2.arrow"]
    assert [load_trace(out / f).run.rank for f in files] == [0, 1, 2]
    assert PROVENANCE in load_trace(out / "rank0.arrow").tags
    before = {f: (out / f).stat().st_mtime_ns for f in files}
    inode = (out / "rank1.arrow").stat().st_ino
    again = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert again.exit_code == 0 and again.output.count("reused (up to date)") == 3
    assert {f: (out / f).stat().st_mtime_ns for f in files} == before
    # a changed source is imported again; the others are reused
    old_mtime = (src / "rank1.json.gz").stat().st_mtime_ns
    write(src / "rank1.json.gz", two_step_trace(rank=1, world=3), gz=True)
    # a coarse file-system clock may give the rewrite the same mtime: make it visibly later
    os.utime(src / "rank1.json.gz", ns=(old_mtime + 10**9, old_mtime + 10**9))
    third = runner.invoke(app, ["import", str(src), "-o", str(out), "--force"])
    assert third.output.count("reused") == 2 and (out / "rank1.arrow").stat().st_ino != inode  # replaced
    data = json.loads(runner.invoke(app, [str(out), "--json"]).output)
    assert data["ranks"] == 3 and data["steps"] == 6


def test_import_dir_rules(tmp_path):
    src = _ranks(tmp_path / "src", 2)
    missing = runner.invoke(app, ["import", str(src), "-o", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such directory" in missing.output and len(_lines(missing)) == 1
    assert not (tmp_path / "nope").exists()
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank0.arrow").write_text("mine")
    refused = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert refused.exit_code == 2 and "--force" in refused.output and (out / "rank0.arrow").read_text() == "mine"
    assert not (out / "rank1.arrow").exists()  # nothing is written when one output would be overwritten
    (out / "rank0.arrow").unlink()
    os.mkfifo(out / "rank0.arrow")
    fifo = runner.invoke(app, ["import", str(src), "-o", str(out), "--force"])
    assert fifo.exit_code == 0 and "not a regular file" in fifo.output  # that rank is skipped, the FIFO kept
    assert (out / "rank0.arrow").is_fifo() and (out / "rank1.arrow").is_file()


def test_import_dir_skips_files_that_are_not_traces_with_a_note(tmp_path):
    src = _ranks(tmp_path / "src", 2)
    (src / "config.json").write_text('{"lr": 0.1}')
    out = tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert result.exit_code == 0 and "note: skipped config.json: the trace has no events" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["rank0.arrow", "rank1.arrow"]


def test_single_file_import_uses_the_safe_write(tmp_path):
    src = write(tmp_path / "t.json", two_step_trace())
    out = tmp_path / "out.arrow"
    (tmp_path / "out.arrow.tmp").symlink_to(tmp_path / "victim")
    (tmp_path / "victim").write_text("keep")
    assert runner.invoke(app, ["import", str(src), "-o", str(out)]).exit_code == 0
    assert (tmp_path / "victim").read_text() == "keep"
    devnull = runner.invoke(app, ["import", str(src), "-o", "/dev/null", "--force"])
    assert devnull.exit_code == 2 and "not a regular file" in devnull.output
    deep = runner.invoke(app, ["import", str(src), "-o", str(tmp_path / "a" / "b.arrow")])
    assert deep.exit_code == 2 and not (tmp_path / "a").exists()


def test_analysing_a_kineto_directory_caches_its_imports(tmp_path):
    src = _ranks(tmp_path / "src", 2)
    first = measure(src)
    cached = [p for p in cache_root().rglob("*.arrow")]
    assert sorted(p.name for p in cached) == ["rank0.arrow", "rank1.arrow"]
    stamps = {p: p.stat().st_mtime_ns for p in cached}
    second = measure(src)
    assert {p: p.stat().st_mtime_ns for p in cached} == stamps  # reused, not rewritten
    assert second.metrics.steps == first.metrics.steps == 4
    assert all(recorded_provenance(str(p)) for p in cached)


def test_a_read_only_cache_falls_back_to_a_temporary_directory(tmp_path, monkeypatch):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    monkeypatch.setenv("GPUANALYZE_CACHE", str(blocked / "cache"))
    assert measure(_ranks(tmp_path / "src", 2)).metrics.ranks == 2


def test_directories_given_as_urls(tmp_path):
    """fsspec URLs (here memory://, in-process) go through the same path as s3:// with s3fs installed."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    src = _ranks(tmp_path / "src", 2)
    for p in src.iterdir():
        fs.pipe(f"/runs/k/{p.name}", p.read_bytes())
    local = measure(src)
    remote = measure("memory://runs/k")
    assert remote.metrics.steps == local.metrics.steps and remote.run.rank == 0
    out = tmp_path / "out"
    out.mkdir()
    assert runner.invoke(app, ["import", "memory://runs/k", "-o", str(out)]).exit_code == 0
    for p in out.iterdir():
        fs.pipe(f"/runs/arrow/{p.name}", p.read_bytes())
    again = measure("memory://runs/arrow")
    assert again.metrics.share == local.metrics.share
    assert storage.list_dir("memory://runs/arrow")[0].name == "rank0.arrow"


@pytest.mark.slow
def test_parallel_import_on_the_process_pool(tmp_path):
    src, out = _ranks(tmp_path / "src", 4), tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["import", str(src), "-o", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    serial = measure(out, workers=1)
    parallel = measure(src, workers=2)
    assert parallel.metrics.share == serial.metrics.share and parallel.metrics.kernels == serial.metrics.kernels


def test_two_sources_with_one_output_name_are_refused(tmp_path):
    src = _ranks(tmp_path / "src", 1)
    write(src / "rank0.json", two_step_trace(rank=0, world=1))  # rank0.json and rank0.json.gz -> rank0.arrow
    out = tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert result.exit_code == 2 and "would both import to rank0.arrow" in result.output
    assert list(out.iterdir()) == []


def test_import_of_a_directory_whose_only_nsys_export_is_broken_is_one_line_naming_it(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "report1.sqlite").write_bytes(b"SQLite format 3\x00")
    res = CliRunner().invoke(app, ["import", str(src), "-o", str(out)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "Traceback" not in res.output
    assert "report1.sqlite: not a readable SQLite database" in res.output
    assert list(out.iterdir()) == []
