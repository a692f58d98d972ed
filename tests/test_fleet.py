"""`gpuanalyze fleet`: a directory mixing good, multi-rank and broken runs, end to end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import SAMPLES, make_row, write_trace
from tests.scale_fixtures import write_ranks

runner = CliRunner()


@pytest.fixture
def fleet_dir(tmp_path):
    root = tmp_path / "fleet"
    (root / "ddp").mkdir(parents=True)
    write_ranks(root / "ddp", 4, 60, stragglers={2: ("forward", 6.0)})  # one run of 4 ranks
    (root / "team" / "a").mkdir(parents=True)
    write_trace(root / "team" / "a" / "loader.arrow", [make_row(i, wall=20.0, data=10.0) for i in range(30)])
    write_trace(root / "team" / "healthy.arrow", [make_row(i, wall=20.0) for i in range(30)])
    for sample in SAMPLES.glob("cpu_ddp_straggler.rank*.arrow"):  # a rank group beside other runs
        shutil.copy(sample, root / "team" / sample.name)
    (root / "team" / "broken.arrow").write_bytes(b"not a trace")
    (root / "notes.txt").write_text("not a trace name: ignored")
    return root


def _fleet(*args):
    result = runner.invoke(app, ["fleet", *map(str, args), "--workers", "1"])
    assert result.exit_code == 0, result.output
    return result


def test_fleet_ranks_good_and_multi_rank_runs_and_notes_the_broken_one(fleet_dir):
    data = json.loads(_fleet(fleet_dir, "--json", "--price-per-gpu-hour", "2", "--steps-per-run", "1e6").output)
    runs = {r["run"]: r for r in data["runs"]}
    assert set(runs) == {"ddp", "team/a/loader.arrow", "team/healthy.arrow", "team/cpu_ddp_straggler.rank*.arrow"}
    assert runs["ddp"]["ranks"] == 4 and runs["team/cpu_ddp_straggler.rank*.arrow"]["ranks"] == 2  # grouped
    assert runs["team/a/loader.arrow"]["bottleneck"] == "data_loading"
    assert runs["team/healthy.arrow"]["bottleneck"] == "none"
    assert [s["run"] for s in data["skipped"]] == ["team/broken.arrow"]
    assert "not a gpuanalyze trace" in data["skipped"][0]["reason"]
    assert data["ranked_by"] == "saved_usd_per_run"
    saved = [r["saved_usd_per_run"] for r in data["runs"]]
    assert saved == sorted(saved, reverse=True) and saved[0] > saved[-1] == 0.0
    assert [r["rank"] for r in data["runs"]] == [1, 2, 3, 4]
    top = data["runs"][0]
    rounded = 1e-4  # the JSON's numbers have 6 significant digits
    assert top["saved_usd_per_run"] == pytest.approx(top["saved_gpu_hours_per_run"] * 2, rel=rounded)
    assert top["saved_gpu_hours_per_run"] == pytest.approx(
        top["saved_ms_per_step"] * 1e6 * top["ranks"] / 3.6e6, rel=rounded
    )


def test_fleet_without_a_price_ranks_by_gpu_hours_and_hours_per_run_uses_each_step_time(fleet_dir):
    data = json.loads(_fleet(fleet_dir, "--json", "--hours-per-run", "10").output)
    assert data["ranked_by"] == "saved_gpu_hours_per_run"
    for r in data["runs"]:
        assert r["saved_usd_per_run"] is None
        assert r["gpu_hours_per_run"] == pytest.approx(10 * r["ranks"])  # 10 h at today's step time
    hours = [r["saved_gpu_hours_per_run"] for r in data["runs"]]
    assert hours == sorted(hours, reverse=True)
    plain = json.loads(_fleet(fleet_dir, "--json").output)
    assert plain["ranked_by"] == "saved_gpu_ms_per_step" and plain["runs"][0]["gpu_hours_per_run"] is None


def test_fleet_table_at_80_columns(fleet_dir):
    result = _fleet(fleet_dir, "--price-per-gpu-hour", "2", "--steps-per-run", "1e6")
    assert "4 run(s) beneath" in result.output and "skipped team/broken.arrow" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps-per-run", "10", "--hours-per-run", "1"], "give the run length once"),
        (["--hours-per-run", "-1"], "--hours-per-run must be positive"),
        (["--engine", "spark"], "choose one of local, ray"),
    ],
)
def test_fleet_bad_options_are_one_line(fleet_dir, args, message):
    result = runner.invoke(app, ["fleet", str(fleet_dir), *args])
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_fleet_of_nothing_is_one_line(tmp_path):
    result = runner.invoke(app, ["fleet", str(tmp_path)])
    assert result.exit_code == 2 and "no .arrow or profiler .json(.gz) traces beneath" in result.output
    result = runner.invoke(app, ["fleet", str(tmp_path / "absent")])
    assert result.exit_code == 2 and "no such file or directory" in result.output


@pytest.mark.slow
def test_fleet_on_the_process_pool_equals_serial(fleet_dir):
    serial = json.loads(_fleet(fleet_dir, "--json", "--steps-per-run", "1e5").output)
    result = runner.invoke(app, ["fleet", str(fleet_dir), "--json", "--steps-per-run", "1e5", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == serial


@pytest.mark.slow
def test_fleet_on_ray_equals_serial(fleet_dir):
    """A local Ray limited to 2 CPUs; skipped when Ray is not installed or cannot start here."""
    import logging

    ray = pytest.importorskip("ray")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types when it cannot start
        pytest.skip(f"Ray cannot start here: {exc}")
    try:
        serial = json.loads(_fleet(fleet_dir, "--json").output)
        result = runner.invoke(app, ["fleet", str(fleet_dir), "--json", "--engine", "ray"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output) == serial
    finally:
        ray.shutdown()


def test_fleet_of_a_url_names_runs_under_it():
    """An fsspec URL (memory://, as s3:// would be; serial here: a memory file system is per process)."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.makedirs("/fleet-test/ddp", exist_ok=True)
    try:
        for sample in SAMPLES.glob("cpu_ddp_straggler.rank*.arrow"):
            fs.pipe(f"/fleet-test/ddp/{sample.name}", sample.read_bytes())
        fs.pipe("/fleet-test/a/loader.arrow", (SAMPLES / "cpu_data_loading.arrow").read_bytes())
        fs.pipe("/fleet-test/broken.arrow", b"not a trace")
        data = json.loads(_fleet("memory://fleet-test", "--json").output)
        assert sorted((r["run"], r["ranks"]) for r in data["runs"]) == [("a/loader.arrow", 1), ("ddp", 2)]
        saved = [r["saved_gpu_ms_per_step"] for r in data["runs"]]
        assert saved == sorted(saved, reverse=True)  # ranked by what the top fix saves
        assert [s["run"] for s in data["skipped"]] == ["broken.arrow"]
    finally:
        fs.rm("/fleet-test", recursive=True)


def dies_on_killme(job):
    """A fleet task whose worker is killed (like the OOM killer) on the run named killme."""
    import os
    import signal

    from analyzer.fleet.run_row import analyse_run

    if "killme" in job.run.name:
        os.kill(os.getpid(), signal.SIGKILL)
    return analyse_run(job)


@pytest.mark.slow  # spawns processes (the marker's definition, pyproject.toml)
def test_fleet_survives_a_killed_worker(tmp_path):
    from analyzer.fleet.fleet_options import FleetOptions
    from analyzer.fleet.triage import WORKER_DIED, triage

    root = tmp_path / "fleet"
    root.mkdir()
    for name in ("a", "b", "killme", "c", "d"):
        write_trace(root / f"{name}.arrow", [make_row(i, wall=20.0) for i in range(30)])
    fleet = triage(str(root), FleetOptions(workers=2), task=dies_on_killme)
    assert sorted(r.run for r in fleet.rows) == ["a.arrow", "b.arrow", "c.arrow", "d.arrow"]
    assert [(s.run, s.reason) for s in fleet.skipped] == [("killme.arrow", WORKER_DIED)]


def _in_memory_where_possible(tmp_path):
    """A directory in RAM where the system has one (Linux's /dev/shm), else under ``tmp_path``: on a disk,
    removing each of 1,100 nested directories took ~2.5 ms (3 s), on /dev/shm 0.1 ms."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return tempfile.TemporaryDirectory(dir=shm, prefix="gpuanalyze-test-")
    return contextlib.nullcontext(str(tmp_path))


def test_fleet_on_a_very_deep_tree_stops_at_the_depth_bound_with_a_note(tmp_path):
    from analyzer.fleet.discover import MAX_DEPTH

    with _in_memory_where_possible(tmp_path) as base:
        root = Path(base) / "fleet"
        (root / "a").mkdir(parents=True)
        write_trace(root / "a" / "shallow.arrow", [make_row(i, wall=20.0) for i in range(30)])
        deep = root
        for _ in range(1100):  # os.walk recursed once per level: RecursionError
            deep = deep / "d"
            deep.mkdir()  # one level at a time (parents=True recurses too)
        try:
            result = _fleet(root)
        finally:
            while deep != root:  # shutil.rmtree (pytest's clean-up too) recurses per level as well
                deep.rmdir()
                deep = deep.parent
    assert "Traceback" not in result.output and "1 run(s) beneath" in result.output
    assert f"deeper than {MAX_DEPTH} levels" in result.output


def test_fleet_of_an_unreachable_url_is_one_line_with_the_host_and_the_reason():
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class Unreachable(MemoryFileSystem):
        protocol = ("unreachable",)

        def isdir(self, path):
            raise ConnectionRefusedError("Cannot connect to host runs.example:443 [Connection refused]")

    fsspec.register_implementation("unreachable", Unreachable, clobber=True)
    result = runner.invoke(app, ["fleet", "unreachable://runs.example/team/", "--workers", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert "runs.example" in line and "ConnectionRefusedError" in line and "Connection refused" in line


def test_fleet_lays_its_table_out_for_width(fleet_dir):
    wide = _fleet(fleet_dir, "--width", "160").output
    narrow = _fleet(fleet_dir, "--width", "60").output
    assert max(len(line) for line in narrow.splitlines()) <= 60
    assert max(len(line) for line in wide.splitlines()) > 60


def test_fleet_json_says_what_trace_json_says_under_the_same_keys(fleet_dir):
    """One vocabulary (docs/json.md, "Other commands"): the verdict, confidence and mean step time of a run
    under the keys and values `gpuanalyze TRACE --json` gives them."""
    trace = fleet_dir / "team" / "a" / "loader.arrow"
    single = json.loads(runner.invoke(app, [str(trace), "--json"]).output)
    data = json.loads(_fleet(fleet_dir, "--json").output)
    row = next(r for r in data["runs"] if r["run"] == "team/a/loader.arrow")
    for key in ("bottleneck", "confidence", "confidence_level", "step_time_mean_ms"):
        assert (
            row[key] == pytest.approx(single[key], abs=1e-3) if isinstance(row[key], float) else row[key] == single[key]
        )
    assert "verdict" not in row and "step_ms" not in row


def test_fleet_of_a_malformed_url_is_one_line():
    result = runner.invoke(app, ["fleet", "http://[::1/runs", "--workers", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert "not a valid URL" in line  # was exit 0: an empty table and the client's TypeError as a skipped run


def test_a_fleet_whose_every_run_is_skipped_is_an_error_with_the_first_reason(tmp_path):
    root = tmp_path / "fleet"
    root.mkdir()
    (root / "t.arrow").write_bytes(b"junk")
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["fleet", str(root), "--workers", "1", *extra])
        assert result.exit_code == 2, result.output  # was exit 0 with an empty table
        (line,) = result.output.strip().splitlines()
        assert "none of its 1 run(s) could be analysed" in line and "not an Arrow IPC stream" in line


def test_fleet_at_80_columns_gives_each_run_one_line_and_leaves_out_trials_and_marks_a_live_run(tmp_path):
    from gpuanalyze.ingest.trace.runinfo import EndInfo
    from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions
    from tests.conftest import as_run

    root = tmp_path / "runs"
    deep = root / "a_very_long_team_directory_name" / "with" / "nested" / "levels"
    deep.mkdir(parents=True)
    shutil.copy(SAMPLES / "cpu_data_loading.arrow", deep / "experiment-2026-12-06-lr3e-4-bs256.arrow")
    for n, trial in enumerate(("baseline", "num_workers-5")):  # what `gpuanalyze run --try` leaves
        (root / "try" / f"trial-{n}-{trial}").mkdir(parents=True)
        run = as_run({"host": "test", "argv": "train.py"})
        rows = [make_row(i, wall=20.0, data=10.0) for i in range(30)]
        writer = TraceWriter(
            path=root / "try" / f"trial-{n}-{trial}" / "trace.arrow",
            run=run,
            tags={"gpuanalyze_trial": trial},
            options=WriterOptions(fsync=False),
        )
        writer.open()
        for row in rows:
            writer.add(row)
        writer.close(EndInfo(status="trial_stop", steps=30))
    live = TraceWriter(path=root / "live.arrow", run=as_run(None), options=WriterOptions(fsync=False))
    live.open()
    for i in range(30):
        live.add(make_row(i, wall=20.0, data=10.0))
    live.flush()
    try:
        shown = runner.invoke(app, ["fleet", str(root), "--workers", "1"], env={"COLUMNS": "80"})
        data = json.loads(_fleet(root, "--json").output)
    finally:
        live.close(EndInfo(status="ok"))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert max(map(len, lines)) <= 80
    full = "a_very_long_team_directory_name/with/nested/levels/experiment-2026-12-06-lr3e-4-bs256.arrow"
    (name_line,) = [line for line in lines if line.startswith("a_very_long")]
    name = name_line.split("  ")[0]
    assert "…" in name and full.startswith(name.split("…")[0]) and full.endswith(name.split("…")[1])
    assert name_line.rstrip().endswith("12.1")  # the last column, whole, on the name's line
    assert next(lines[i + 1] for i, line in enumerate(lines) if line.startswith("live.arrow")).startswith(
        "1 rank(s), still being written"
    )
    assert {r["run"]: r["state"] for r in data["runs"]} == {full: "ok", "live.arrow": "live"}
    assert any("left out 2 trial(s) of `gpuanalyze run --try`" in n for n in data["notes"])
