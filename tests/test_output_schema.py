"""Every command's --json and each MCP tool's result validates against the JSON Schema shipped in the package, which
(with docs/json.md's lists) is what scripts/json_schema.py makes of the declared structs today."""

from __future__ import annotations

import importlib.util
import json
import shutil

import msgspec
import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.render.output import SCHEMA_PATH, dumps
from tests.conftest import ROOT, SAMPLES, make_row, write_trace
from tests.kineto_fixtures import loader_bound_trace, write

runner = CliRunner()
SCHEMA = json.loads(SCHEMA_PATH.read_text())


def validate(data: object, name: str) -> None:
    """``data`` (parsed JSON) is a ``name`` of the shipped schema: every declared key, no other, each of its type."""
    validator = Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{name}"})
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300] for e in validator.iter_errors(data)]
    assert not errors, errors[:5]


def _json(args: list[str], code: int = 0) -> object:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def _script():
    spec = importlib.util.spec_from_file_location("json_schema", ROOT / "scripts" / "json_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_schema_and_the_docs_lists_are_current():
    script = _script()
    assert SCHEMA_PATH.read_text() == script.schema_text(), "run python scripts/json_schema.py"
    assert script.documented((ROOT / "docs" / "json.md").read_text()) == script.tables()


def test_the_schema_refuses_a_key_it_does_not_declare_and_a_missing_one(tmp_path):
    data = _json([str(SAMPLES / "cpu_healthy.arrow"), "--json"])
    validate(data, "Report")
    with pytest.raises(AssertionError, match="step_time_ms"):
        validate({**data, "step_time_ms": 1.0}, "Report")
    with pytest.raises(AssertionError, match="'trace' is a required property"):
        validate({k: v for k, v in data.items() if k != "trace"}, "Report")


@pytest.mark.parametrize(
    "name", ["cpu_data_loading.arrow", "cpu_ddp_straggler.rank0.arrow", "h200_small_batch.arrow", "kineto"]
)
def test_the_report_validates_with_cost_mfu_ranks_and_idle_owners(name, tmp_path):
    trace = write(tmp_path / "t.json", loader_bound_trace(4000.0)) if name == "kineto" else SAMPLES / name
    args = [str(trace), "--json", "--steps-per-run", "1e5", "--price-per-gpu-hour", "2", "--flops-per-step", "1e9"]
    data = _json(args)
    validate(data, "Report")
    assert data["cost"] and data["mfu"] and data["findings"]
    assert name != "kineto" or data["idle_owners"]["per_step"]
    assert name != "cpu_ddp_straggler.rank0.arrow" or len(data["per_rank"]) == 2


def test_run_prints_a_report_or_an_array_of_them(tmp_path):
    from analyzer.api import analyze
    from analyzer.run.summary import json_text

    report = analyze(SAMPLES / "cpu_healthy.arrow")
    validate(json.loads(json_text([report])), "Report")
    both = json.loads(json_text([report, report]))
    assert len(both) == 2
    for item in both:
        validate(item, "Report")


def test_compare_with_a_gate_and_run_options_validate(tmp_path):
    before, after = tmp_path / "before.arrow", tmp_path / "after.arrow"
    write_trace(before, [make_row(i, wall=20.0, fwd=7.0) for i in range(40)])
    write_trace(after, [make_row(i, wall=30.0, fwd=17.0) for i in range(40)])
    data = _json(["compare", str(before), str(after), "--fail-if-slower", "5", "--json"], code=1)
    validate(data, "Comparison")
    assert data["gate"]["failed"] and data["options"][0]["step_time_mean_ms"] == pytest.approx(20.0)
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text('name = "A"\nprice_per_gpu_hour = 1.2\nhours_per_run = 80\n')
    b.write_text('name = "B"\nprice_per_gpu_hour = 2.4\nhours_per_run = 35\n')
    validate(_json(["compare", str(a), str(b), "--json"]), "Comparison")


def test_fleet_validates(tmp_path):
    root = tmp_path / "fleet"
    root.mkdir()
    shutil.copy(SAMPLES / "cpu_data_loading.arrow", root)
    (root / "broken.arrow").write_bytes(b"not a trace")
    data = _json(["fleet", str(root), "--workers", "1", "--steps-per-run", "1e4", "--json"])
    validate(data, "Fleet")
    assert data["runs"] and data["skipped"]


def test_the_trials_json_is_the_declared_one(tmp_path):
    from analyzer.render.output.commands import Trials
    from analyzer.run.trial_output import as_dict
    from tests.test_try import _result

    data = as_dict(_result(tmp_path, 13.0, low=11.0, high=14.0))
    validate(json.loads(dumps(msgspec.convert(data, Trials))), "Trials")  # as `run --try --json` prints it
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({**data, "new_key": 1}, Trials)  # a key added inside is refused until declared


def test_every_mcp_tool_result_validates(tmp_path, monkeypatch):
    import analyzer.agents.tool_worker as W

    shutil.copy(SAMPLES / "h200_small_batch.arrow", tmp_path)
    shutil.copy(SAMPLES / "cpu_healthy.arrow", tmp_path)
    monkeypatch.setattr(W, "ROOTS", [str(tmp_path.resolve())])
    for result, name in (
        (W.list_traces("."), "TraceList"),
        (W.analyze_trace("h200_small_batch.arrow"), "Report"),
        (W.explain_finding("h200_small_batch.arrow"), "Explained"),
        (W.compare_runs("cpu_healthy.arrow", "h200_small_batch.arrow"), "Comparison"),
        (W.triage_fleet("."), "Fleet"),
    ):
        validate(json.loads(W.bounded(result, 1 << 20)), name)
