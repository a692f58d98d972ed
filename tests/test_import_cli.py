import json

from typer.testing import CliRunner

from analyzer.cli import app
from tests.kineto_fixtures import two_step_trace, write

runner = CliRunner()


def test_import_never_writes_over_its_input_or_an_existing_file(tmp_path):
    src = write(tmp_path / "t.json", two_step_trace())
    before = src.read_bytes()
    result = runner.invoke(app, ["import", str(src), "-o", str(src), "--force"])
    assert result.exit_code == 2 and src.read_bytes() == before
    out = tmp_path / "out.arrow"
    out.write_text("mine")
    result = runner.invoke(app, ["import", str(src), "-o", str(out)])
    assert result.exit_code == 2 and "--force" in result.output and out.read_text() == "mine"
    assert runner.invoke(app, ["import", str(src), "-o", str(out), "--force"]).exit_code == 0
    assert json.loads(runner.invoke(app, [str(out), "--json"]).output)["steps"] == 2


def test_directory_of_rank_traces(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for r in range(2):
        write(run / f"rank{r}.json", two_step_trace(rank=r, world=2))
    data = json.loads(runner.invoke(app, [str(run), "--json"]).output)
    assert data["ranks"] == 2 and data["steps"] == 4


def test_directory_with_a_missing_rank_says_so(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run / "rank0.json", two_step_trace(rank=0, world=3))
    data = json.loads(runner.invoke(app, [str(run), "--json"]).output)
    assert any("2 of 3 rank(s) have no trace" in n for n in data["notes"])


def test_directory_mixing_two_runs_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run / "a.json", two_step_trace(rank=0, world=2))
    write(run / "b.json", two_step_trace(rank=0, world=2))
    result = runner.invoke(app, [str(run)])
    assert result.exit_code == 2 and "mixes runs" in result.output


def test_imported_kernel_evidence_reaches_the_report(tmp_path):
    src = write(tmp_path / "t.json", two_step_trace())
    result = runner.invoke(app, [str(src)])
    assert result.exit_code == 0 and "GPU kernels" in result.output and "volta_sgemm" in result.output
    data = json.loads(runner.invoke(app, [str(src), "--json"]).output)
    assert set(data["gpu"]) == {"busy_pct", "idle_pct", "compute_pct", "non_compute_pct"}


def test_an_import_says_what_it_said_when_read_back_from_its_file(tmp_path):
    """An import's notes are stored with its rows (gpuanalyze.notes): the .arrow, or a cached import, reports what
    the import of the capture itself reported."""
    from tests.nsys_fixtures import Export, build_export

    src = build_export(tmp_path / "cap.sqlite", Export(steps=3))
    out = tmp_path / "cap.arrow"
    assert runner.invoke(app, ["import", str(src), "-o", str(out)]).exit_code == 0
    direct = json.loads(runner.invoke(app, [str(src), "--json"]).output)["notes"]
    stored = json.loads(runner.invoke(app, [str(out), "--json"]).output)["notes"]
    assert any(n.startswith("imported from Nsight Systems") for n in direct) and stored == direct


def test_stored_notes_that_are_not_a_list_of_text_are_dropped_with_one_note(tmp_path):
    import pyarrow as pa

    from gpuanalyze.ingest.trace import schema as S
    from gpuanalyze.ingest.trace.reader import load_trace

    src = write(tmp_path / "t.json", two_step_trace())
    out = tmp_path / "t.arrow"
    assert runner.invoke(app, ["import", str(src), "-o", str(out)]).exit_code == 0
    table = pa.ipc.open_stream(out.read_bytes()).read_all()
    for bad, said in ((b'{"a": 1}', "not a list"), (b'["kept", 7, "also kept"]', "dropped 1 stored note")):
        meta = {**(table.schema.metadata or {}), S.META_NOTES: bad}
        with pa.OSFile(str(out), "wb") as fh, pa.ipc.new_stream(fh, table.schema.with_metadata(meta)) as w:
            w.write_table(table)
        notes = load_trace(out).notes
        assert any(said in n for n in notes)
        assert ("kept" in notes and "also kept" in notes) == (said != "not a list")
