"""`gpuanalyze bench` on the cpu backend, end to end, and the ceilings it feeds into analysis."""

import dataclasses
import json
import os

import msgspec
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.machine.ceilings_store import this_host
from tests.conftest import make_row
from tests.test_output_schema import validate

runner = CliRunner()


@pytest.fixture(autouse=True)
def small_cpu_matmul(request, monkeypatch):
    """The cpu backend's matmul on 128x128 matrices, its plan (dtypes, tolerances, timer, runs) as it is: these tests
    check what `bench` does around a measurement (files, merges, output); the quick pass's 1024x1024 matmuls cost
    ~1 s of CPU per run. The slow test here, tests/test_kernels_cpu.py and tests/test_render_bench.py measure at the
    real size."""
    if request.node.get_closest_marker("slow"):
        return
    from gpuanalyze.kernels import matmul

    plan = matmul._plan

    def small(backend, quick):
        real = plan(backend, quick)
        if backend.name != "cpu":
            return real
        return dataclasses.replace(real, n=128, make=lambda dtype: matmul._NumpyMatmul(128, dtype))

    monkeypatch.setattr(matmul, "_plan", small)


@pytest.fixture
def ceilings_path(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "ceilings.json"
    path.parent.mkdir()
    monkeypatch.setenv("GPUANALYZE_CEILINGS", str(path))
    return path


@pytest.mark.slow
def test_bench_all_cpu_quick_json(ceilings_path, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "ceilings.json"
    result = runner.invoke(app, ["bench", "all", "--backend", "cpu", "--quick", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    validate(data, "Bench")  # the shipped JSON Schema (docs/json.md)
    assert data["backend"] == "cpu" and data["failed"] == []
    by = {}
    for r in data["results"]:
        assert {"benchmark", "backend", "value", "unit", "variant", "repeats", "min", "median", "max"} <= r.keys()
        by.setdefault(r["benchmark"], []).append(r)
    assert {"matmul", "allreduce"} <= by.keys()
    gloo2 = [r for r in by["allreduce"] if r["world_size"] == 2 and r["variant"].startswith("gloo")]
    assert gloo2 and all(r["busbw_gbps"] > 0 and r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) for r in gloo2)
    assert all(r["busbw_gbps"] == 0 for r in by["allreduce"] if r["world_size"] == 1)
    assert all(r["min"] <= r["value"] <= r["max"] for r in data["results"]), "min..max in the value's unit"
    assert json.loads(out.read_text())["results"] == data["results"]
    fp = data["fingerprint"]
    assert fp["backend"] == "cpu" and fp["host"] == this_host() and fp["device"] == data["device"]
    saved = json.loads(ceilings_path.read_text())["machines"]
    assert list(saved) == [f"{this_host()}/cpu/{data['device']}"]
    suites = next(iter(saved.values()))["suites"]
    assert set(suites) == {"matmul", "allreduce"}
    assert sum(len(s["results"]) for s in suites.values()) == len(data["results"])


def test_bench_unavailable_backend_is_one_line(ceilings_path, monkeypatch):
    """Runs everywhere: CuPy is made unavailable, so a success here is a failure (never a skip)."""
    from gpuanalyze.kernels import backend

    monkeypatch.setattr(backend, "cupy_unavailable", lambda: "CuPy sees no CUDA device")
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cupy"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0
    assert "gpuanalyze: error: backend cupy is unavailable: CuPy sees no CUDA device" in result.output
    assert not ceilings_path.exists()


def test_bench_out_in_a_missing_directory_fails_at_once_and_creates_nothing(ceilings_path, tmp_path):
    out = tmp_path / "missing" / "dir" / "x.json"
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "no such directory" in result.output
    assert "TFLOP" not in result.output  # refused before measuring
    assert not (tmp_path / "missing").exists() and not ceilings_path.exists()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "dir"])
def test_bench_out_refuses_links_and_special_files_even_with_force(ceilings_path, tmp_path, kind):
    target = tmp_path / "precious"
    target.write_text("keep")
    out = tmp_path / "out.json"
    if kind == "symlink":
        out.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out.mkdir()
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", "--out", str(out), "--force"])
    assert result.exit_code == 2 and "gpuanalyze: error:" in result.output
    assert target.read_text() == "keep" and not ceilings_path.exists()


def test_bench_out_with_force_replaces_a_regular_file(ceilings_path, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "mine.json"
    out.write_text("old")
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["results"][0]["benchmark"] == "matmul"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_bench_refuses_a_ceilings_location_in_a_missing_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUANALYZE_CEILINGS", str(tmp_path / "nowhere" / "c.json"))
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick"])
    assert result.exit_code == 2 and "no such directory" in result.output
    assert not (tmp_path / "nowhere").exists()


def test_bench_merges_into_the_saved_file_and_says_where(ceilings_path, tmp_path):
    """`bench matmul` replaces only this machine's matmul results; other suites and machines stay."""
    pytest.importorskip("torch")
    from analyzer.machine.ceilings_store import Fingerprint, SuiteRun, merge_runs
    from gpuanalyze.kernels.backend import select
    from gpuanalyze.kernels.suite import fingerprint

    mine = fingerprint(select("cpu"))
    other = Fingerprint(backend="cupy", device="NVIDIA H200", host="gpu-node")

    def run(fp, benchmark):
        return SuiteRun(measured_unix_s=1, quick=True, fingerprint=fp, results=[
            msgspec.Raw(msgspec.json.encode({"benchmark": benchmark, "value": 1.0, "suite": "x"}))])  # fmt: skip

    merge_runs(ceilings_path, {"matmul": run(mine, "matmul"), "allreduce": run(mine, "allreduce")}, mine)
    merge_runs(ceilings_path, {"matmul": run(other, "matmul")}, other)
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"saved matmul for {mine.describe()} (other results kept) in {ceilings_path}" in said
    assert f"  {ceilings_path}" in result.output.splitlines()
    machines = json.loads(ceilings_path.read_text())["machines"]
    assert set(machines) == {mine.key, other.key}
    assert set(machines[mine.key]["suites"]) == {"matmul", "allreduce"}
    assert machines[mine.key]["suites"]["matmul"]["results"][0]["value"] != 1.0  # replaced by the new run
    assert machines[mine.key]["suites"]["allreduce"]["results"][0]["value"] == 1.0  # kept
    assert machines[other.key]["suites"]["matmul"]["results"][0]["value"] == 1.0  # the other machine kept


def test_bench_json_keeps_stdout_json_and_says_where_on_stderr(ceilings_path):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["suite"] == "matmul"
    assert result.stderr.splitlines()[-1] == f"  {ceilings_path}"


def test_bench_says_the_duration_to_expect_first_and_a_line_as_each_suite_ends(ceilings_path):
    pytest.importorskip("torch")
    from gpuanalyze.kernels.suite import CPU_SECONDS, SUITES

    assert set(CPU_SECONDS) == set(SUITES)  # every suite has its measured duration
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", "--json"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("note: bench: matmul on cpu (") and f"expect ~{CPU_SECONDS['matmul'][0]} s" in " ".join(
        lines[:2]
    )
    assert any(line.startswith("note: bench: [1/1] matmul: 2 result(s) (") for line in lines)
    assert max(len(line) for line in lines if str(ceilings_path) not in line) <= 80  # a path is never folded


def test_bench_unknown_benchmark(ceilings_path):
    result = runner.invoke(app, ["bench", "flops", "--backend", "cpu"])
    assert result.exit_code == 2 and "unknown benchmark" in result.output


def test_bench_never_overwrites_out_without_force(ceilings_path, tmp_path):
    out = tmp_path / "mine.json"
    out.write_text("keep")
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", "--out", str(out)])
    assert result.exit_code == 2 and out.read_text() == "keep"


def test_bench_matmul_renders_a_table(ceilings_path):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    assert "matmul" in result.output and "fp32" in result.output


def _ceilings(path, tflops, *, host="test-host", fingerprint=True, **more):
    """A `bench --json` style file measured on ``host``'s CPU (no fingerprint: an older file)."""
    fp = {"backend": "cpu", "device": "CPU: test x4", "host": host} if fingerprint else None
    result = {"benchmark": "matmul", "variant": "fp32", "dtype": "float32", "value": tflops, "suite": "matmul"}
    path.write_text(
        json.dumps({"backend": "cpu", "device": "CPU: test x4", "fingerprint": fp, "results": [result], **more})
    )
    return path


def _cpu_trace(trace_factory, host="test-host"):
    return trace_factory(
        [make_row(i, wall=20.0, data=10.0, samples=32) for i in range(20)], run={"host": host, "device": "cpu"}
    )


def test_a_trace_gets_the_ceilings_of_the_machine_it_ran_on(trace_factory, ceilings_path):
    _ceilings(ceilings_path, 2.0)
    result = runner.invoke(app, [str(_cpu_trace(trace_factory)), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ceilings"] == str(ceilings_path)
    assert not any("not used" in note for note in data["notes"]), data["notes"]


def test_a_cached_ceiling_says_where_and_when_it_was_measured(ceilings_path):
    from analyzer.machine.ceilings import ceilings_for
    from gpuanalyze.ingest.trace.runinfo import RunInfo

    _ceilings(ceilings_path, 2.0, created_unix_s=1_796_000_000)
    c, note = ceilings_for(RunInfo(host="test-host", device="cpu"), None)
    assert note is None and c is not None and c.matmul_tflops == {"float32": 2.0}
    assert c.source("matmul") == f"`gpuanalyze bench matmul` on CPU: test x4, 2026-11-30 ({ceilings_path})"


@pytest.mark.parametrize(("explicit", "host", "fingerprint", "why"), [
    (False, "laptop", True, "on CPU: test x4 (cpu) on host laptop, not this trace's CPU on host test-host"),
    (True, "laptop", True, "were measured on CPU: test x4 (cpu) on host laptop"),
    (False, "test-host", False, "carry no machine fingerprint"),
])  # fmt: skip
def test_ceilings_of_another_machine_are_not_applied_and_a_note_says_why(
    trace_factory, ceilings_path, tmp_path, explicit, host, fingerprint, why
):
    trace = _cpu_trace(trace_factory)
    path = _ceilings(tmp_path / "theirs.json" if explicit else ceilings_path, 2.0, host=host, fingerprint=fingerprint)
    result = runner.invoke(app, [str(trace), "--json", *(["--ceilings", str(path)] if explicit else [])])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ceilings"] is None
    assert any(why in note and "not used" in note for note in data["notes"]), data["notes"]


def test_explicit_ceilings_file_must_be_valid(trace_factory, tmp_path, ceilings_path):
    trace = trace_factory([make_row(i) for i in range(5)])
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for path in (bad, tmp_path / "missing.json"):
        result = runner.invoke(app, [str(trace), "--ceilings", str(path)])
        assert result.exit_code == 2 and "gpuanalyze: error:" in result.output
