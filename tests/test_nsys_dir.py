"""A directory of per-rank Nsight Systems captures (``nsys profile -o report.%q{RANK}``: one export per process) is
the ranks of one run: each the RANK its process ran with where the capture recorded it, else ranked in the natural
order of the file names, imported once each into the cache or `import -o`, analysed out of core like Kineto rank
files, locally or on Ray."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3

import pytest
from typer.testing import CliRunner

from analyzer.api import analyze
from analyzer.cli import app
from analyzer.measure.inputs import measure
from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.nsys.load import rank_order
from gpuanalyze.ingest.nsys.meta import read_meta
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import SHARED
from tests.nsys_fixtures import Export, build_export

runner = CliRunner()
#: file -> steps: report.10 is rank 2 (after report.2), whatever the directory listing's order
CAPTURES = {"report.1.sqlite": 4, "report.10.sqlite": 6, "report.2.sqlite": 5}


def _captures(d, captures=CAPTURES):
    d.mkdir(exist_ok=True)
    for name, steps in captures.items():
        build_export(d / name, Export(pids=(100 + steps,), steps=steps))
    return d


def test_captures_are_ranked_by_the_natural_order_of_their_names():
    assert rank_order(["r.10.sqlite", "r.2.sqlite", "r.1.sqlite"]) == {
        "r.1.sqlite": 0,
        "r.2.sqlite": 1,
        "r.10.sqlite": 2,
    }
    assert rank_order(["b.sqlite", "a.nsys-rep"]) == {"a.nsys-rep": 0, "b.sqlite": 1}


def test_a_directory_of_per_rank_captures_is_one_run_in_memory_and_out_of_core(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _captures(tmp_path / "run")
    trace = load_any(d)
    steps = {r: n for r, n in trace.frame.group_by("rank").len().iter_rows()}
    assert steps == {0: 4, 1: 5, 2: 6} and trace.run.world_size == 3
    assert any("3 Nsight Systems capture(s), one rank each" in n for n in trace.notes)
    got = measure(d)
    assert got.metrics.accounting.rows == 15 and got.run.world_size == 3
    assert any("natural order" in n for n in got.notes)
    data = json.loads(runner.invoke(app, [str(d), "--json"]).output)
    assert data["ranks"] == 3 and data["steps"] == 15


def test_import_dir_writes_each_capture_as_its_rank(tmp_path):
    d, out = _captures(tmp_path / "run"), tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["import", str(d), "-o", str(out)])
    assert result.exit_code == 0, result.output
    runs = {p.name: load_trace(p) for p in sorted(out.iterdir())}
    assert {n: (t.run.rank, t.run.world_size, t.frame.height) for n, t in runs.items()} == {
        "report.1.arrow": (0, 3, 4),
        "report.2.arrow": (1, 3, 5),
        "report.10.arrow": (2, 3, 6),
    }
    again = runner.invoke(app, ["import", str(d), "-o", str(out)])
    assert again.exit_code == 0 and again.output.count("reused (up to date)") == 3


def test_a_capture_added_renumbers_the_ranks_and_their_imports_are_redone(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _captures(tmp_path / "run")
    assert measure(d).metrics.accounting.rows == 15
    build_export(d / "report.0.sqlite", Export(pids=(99,), steps=3))  # rank 0 now: the others move up one
    got = measure(d)  # the cached imports hold the old ranks: redone, not merged as duplicate ranks
    assert got.metrics.accounting.rows == 18 and got.run.world_size == 4


def test_a_capture_of_several_processes_in_a_directory_is_skipped_and_named(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _captures(tmp_path / "run", {"report.0.sqlite": 4, "report.1.sqlite": 5})
    build_export(d / "node.sqlite", Export(pids=(200, 201), steps=3))
    got = measure(d)
    assert got.metrics.accounting.rows == 9
    assert any(n.startswith("skipped node.sqlite: 2 processes ran GPU work") for n in got.notes)
    result = runner.invoke(app, [str(d)])
    assert result.exit_code == 0 and "gpuanalyze" in result.output


def _placed(d, places, world):
    """Captures named against their rank order, each run with RANK and WORLD_SIZE (torchrun's environment)."""
    d.mkdir(exist_ok=True)
    for name, rank in places.items():
        env = (f'RANK="{rank}"', "HF_TOKEN=hf_secretvalue", f'WORLD_SIZE="{world}"')
        build_export(d / name, Export(pids=(300 + rank,), steps=3 + rank, env=env))
    return d


@pytest.mark.parametrize(
    ("env", "place"),
    [
        (('RANK="3"', 'WORLD_SIZE="8"'), (3, 8)),
        (("RANK=0", "WORLD_SIZE=1"), (0, 1)),
        (('RANK="8"', 'WORLD_SIZE="8"'), None),  # not a rank of that world
        (('RANK="3"',), None),
        (("rank=3", "WORLD_SIZE=8"), None),
        (('RANK="x"', 'WORLD_SIZE="8"'), None),
        ((), None),
    ],
)
def test_a_capture_s_place_is_read_from_its_process_environment(tmp_path, env, place):
    path = build_export(tmp_path / "r.sqlite", Export(env=env))
    with NsysDb(path) as db:
        assert read_meta(db).place == place


def test_per_rank_captures_are_the_rank_their_process_ran_as_and_secrets_stay_out(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _placed(tmp_path / "run", {"a.sqlite": 2, "b.sqlite": 0, "c.sqlite": 1}, world=3)  # names against ranks
    trace = load_any(d)
    steps = {r: n for r, n in trace.frame.group_by("rank").len().iter_rows()}
    assert steps == {0: 3, 1: 4, 2: 5} and trace.run.world_size == 3
    got = measure(d)
    assert got.metrics.accounting.rows == 12 and got.run.world_size == 3
    out = tmp_path / "out"
    out.mkdir()
    assert runner.invoke(app, ["import", str(d), "-o", str(out)]).exit_code == 0
    assert {p.name: load_trace(p).run.rank for p in out.iterdir()} == {"a.arrow": 2, "b.arrow": 0, "c.arrow": 1}
    result = runner.invoke(app, [str(d), "--json"])
    assert result.exit_code == 0 and "secretvalue" not in result.output + repr(trace.notes) + repr(got.notes)


def test_a_rank_without_its_capture_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _placed(tmp_path / "run", {"report.0.sqlite": 0, "report.2.sqlite": 2}, world=3)
    missing = "1 of 3 rank(s) have no trace here (ranks 1)"
    assert any(missing in n for n in load_any(d).notes) and any(missing in n for n in measure(d).notes)
    alone = load_any(d / "report.2.sqlite")  # one rank's capture alone is still that rank, as a Kineto rank file is
    assert alone.frame.get_column("rank").unique().to_list() == [2] and alone.run.world_size == 3
    assert any("rank and world size: the RANK and WORLD_SIZE its process ran with" in n for n in alone.notes)
    assert not any("no trace here" in n for n in alone.notes)  # said of the directory, once
    for notes in (load_any(d).notes, measure(d).notes):  # each said once, however many ranks
        assert sum("no trace here" in n for n in notes) == 1 and sum("WORLD_SIZE" in n for n in notes) == 1


def test_two_captures_of_one_rank_are_two_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _placed(tmp_path / "run", {"report.0.sqlite": 0}, world=2)
    _placed(d, {"old.report.0.sqlite": 0}, world=2)
    result = runner.invoke(app, [str(d)], terminal_width=80)
    assert result.exit_code != 0 and "rank 0 appears in both" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_a_capture_of_several_processes_keeps_their_device_order_whatever_its_environment(tmp_path):
    path = build_export(tmp_path / "node.sqlite", Export(pids=(200, 201), env=('RANK="5"', 'WORLD_SIZE="8"')))
    trace = load_any(path)
    assert sorted(trace.frame.get_column("rank").unique().to_list()) == [0, 1] and trace.run.world_size == 2


@pytest.mark.slow
def test_per_rank_captures_give_the_local_answer_on_ray(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    d = _captures(tmp_path / "run")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types when it cannot start
        pytest.skip(f"Ray cannot start here: {exc}")
    try:
        local = measure(d, workers=2)
        os.environ.pop("RAY_ADDRESS", None)
        remote = measure(d, engine="ray", workers=2)
    finally:
        ray.shutdown()
    assert remote.metrics.accounting.rows == local.metrics.accounting.rows == 15
    assert remote.metrics.share == local.metrics.share and remote.run == local.run and remote.notes == local.notes


def _one_process(src, dst, pid):
    """``src`` with every row of the other processes deleted: the capture ``pid`` alone would have made."""
    shutil.copyfile(src, dst)
    with sqlite3.connect(dst) as conn:
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for c in {r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')} & {"globalPid", "globalTid"}:
                other = f"typeof({c}) = 'integer' AND (({c} >> 24) & 16777215) != ?"
                conn.execute(f'DELETE FROM "{t}" WHERE {other}', (pid,))
    return dst


@pytest.mark.skipif(not (SHARED / "nsys_traces").is_dir(), reason="../shared/nsys_traces is not here")
def test_a_real_two_rank_capture_split_per_rank_gives_the_same_answer(tmp_path, monkeypatch):
    """The shared 2-GPU training capture, and the same capture cut into the two per-rank captures its processes
    would have written (`nsys profile -o report.%q{RANK}`): the same ranks, step rows and verdict."""
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    src = SHARED / "nsys_traces" / "nsysai_mfu_train_2gpu_before.sqlite"
    d = tmp_path / "ranks"
    d.mkdir()
    for rank, pid in enumerate((144, 145)):  # its processes, in the rank order of their devices
        _one_process(src, d / f"report.{rank}.sqlite", pid)
    whole, split = load_any(src), load_any(d)
    cols = [c for c in whole.frame.columns if c != "start_unix_ns"]
    assert split.frame.select(cols).equals(whole.frame.select(cols)) and split.run.world_size == 2
    a, b = analyze(src), analyze(d)
    assert (a.bottleneck, a.metrics.step_mean_ms, a.metrics.steps) == (
        b.bottleneck,
        b.metrics.step_mean_ms,
        b.metrics.steps,
    )
