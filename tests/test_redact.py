"""One redaction for every command line shown or stored (gpuanalyze.ingest.trace.redact): the rule itself, and each
output (terminal, --json, HTML, tracker payload, an imported trace) on an Nsight Systems capture, a Kineto trace and
one of our traces that hold secrets."""

from __future__ import annotations

import json
import sqlite3
import sys

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.redact import REDACTED, redact_argv, redact_command
from gpuanalyze.ingest.trace.runinfo import RunInfo, read_run
from tests.conftest import make_row, write_trace
from tests.kineto_fixtures import two_step_trace, write
from tests.nsys_fixtures import Export, build_export

runner = CliRunner()
HF = "hf_" + "Q" * 34
OPENAI = "sk-proj-" + "W" * 40
SECRETS = (HF, "PLANTEDAPIKEY1", "PLANTEDWANDB2", OPENAI, "hunter2pw")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--hf-token=abc"], ["--hf-token=***"]),
        (["--hf_token", "abc", "--lr", "3"], ["--hf_token", "***", "--lr", "3"]),
        (["--api-key", "sk"], ["--api-key", "***"]),
        (
            ["--db-password=p", "--client_secret", "s", "--oauth", "o"],
            ["--db-password=***", "--client_secret", "***", "--oauth", "***"],
        ),
        (["-token=abc", "--hfToken", "t"], ["-token=***", "--hfToken", "***"]),
        (
            ["HF_TOKEN=abc", "AWS_SECRET_ACCESS_KEY=x", "+model.api_key=k"],
            ["HF_TOKEN=***", "AWS_SECRET_ACCESS_KEY=***", "+model.api_key=***"],
        ),
        (["--push-token", "--lr"], ["--push-token", "--lr"]),  # no value follows: nothing to hide
        (["--data", "s3://user:pa55@bucket/x"], ["--data", "s3://user:***@bucket/x"]),
        (["--url=https://h/x?sig=1&token=abc#f"], ["--url=https://h/x?sig=1&token=***#f"]),
        (["-H", "Authorization: Bearer abcdefgh123"], ["-H", "Authorization: Bearer ***"]),
        ([f"--model=x/{HF}", "ghp_" + "a" * 36, "AKIAIOSFODNN7EXAMPLE"], ["--model=x/***", "***", "***"]),
        (["bash", "-c", f"python t.py --api-key k {OPENAI}"], ["bash", "-c", "python t.py --api-key *** ***"]),
        (  # not secrets: names that only contain a secret word, values of other options
            ["train.py", "--lr=3", "BATCH=8", "--name", "key-run", "--tokenizer", "gpt2", "--max-new-tokens", "64"],
            ["train.py", "--lr=3", "BATCH=8", "--name", "key-run", "--tokenizer", "gpt2", "--max-new-tokens", "64"],
        ),
    ],
)
def test_secret_values_are_redacted(argv, expected):
    assert redact_argv(argv) == expected
    assert redact_argv(expected) == expected  # redacting twice changes nothing
    assert REDACTED == "***"


def test_a_command_line_string_keeps_its_spacing():
    assert (
        redact_command("python  t.py --hf-token abc\tWANDB_API_KEY=k")
        == "python  t.py --hf-token ***\tWANDB_API_KEY=***"
    )


def test_run_info_holds_its_command_line_redacted_however_it_is_made():
    line = f"python t.py --hf-token {HF} --lr 3"
    assert RunInfo(argv=line).argv == "python t.py --hf-token *** --lr 3"
    assert read_run(json.dumps({"argv": line, "rank": "x"}).encode())[0].argv == "python t.py --hf-token *** --lr 3"


def _nsys_with_secrets(path):
    build_export(path, Export(steps=4))
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM META_DATA_CAPTURE")
    args = ["train.py", "--hf-token", HF, "--api-key=PLANTEDAPIKEY1", "WANDB_API_KEY=PLANTEDWANDB2", OPENAI]
    rows = [("PROCESS_0:COMMAND", "python")] + [(f"PROCESS_0:ARGUMENT_{i}", a) for i, a in enumerate(args)]
    conn.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def _kineto_with_secrets(path):
    doc = two_step_trace()
    doc["distributedInfo"] = {"backend": "nccl", "rank": f"--hf-token {HF}", "world_size": 1}
    doc["trace_args"] = f"python train.py --api-key=PLANTEDAPIKEY1 {OPENAI}"
    return write(path, doc)


def _arrow_with_secrets(tmp_path):
    """A trace whose writer stored the command line in clear (an older recorder, another tool)."""
    path = write_trace(tmp_path / "t.arrow", [make_row(i) for i in range(30)])
    argv = f"python train.py --hf-token {HF} --password hunter2pw WANDB_API_KEY=PLANTEDWANDB2"
    with pa.OSFile(str(path), "rb") as fh:
        table = pa.ipc.open_stream(fh).read_all()
    meta = {**table.schema.metadata, S.META_RUN: json.dumps({"argv": argv}).encode()}
    schema = table.schema.with_metadata(meta)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        w.write_table(table.replace_schema_metadata(meta))
        w.write_batch(pa.RecordBatch.from_pylist([], schema=schema), custom_metadata={S.END_KEY: b'{"status":"ok"}'})
    assert HF.encode() in path.read_bytes()
    return path


def _outputs(path, tmp_path) -> str:
    """What the terminal, --json and the HTML report show, and the trace `import` stores."""
    shown = []
    for args in ([str(path)], [str(path), "--json"]):
        result = runner.invoke(app, args)
        shown.append(result.output)
    html = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(path), "-o", str(html)])
    shown.append(result.output + (html.read_text() if html.exists() else ""))
    if path.suffix != ".arrow":
        stored = tmp_path / "imported.arrow"
        result = runner.invoke(app, ["import", str(path), str(stored)])
        shown.append(result.output + (stored.read_bytes().decode("latin-1") if stored.exists() else ""))
    return "\n".join(shown)


@pytest.mark.parametrize("source", ["nsys", "kineto", "arrow"])
def test_no_output_shows_or_stores_a_secret_of_the_command_line(tmp_path, source):
    make = {
        "nsys": lambda: _nsys_with_secrets(tmp_path / "cap.sqlite"),
        "kineto": lambda: _kineto_with_secrets(tmp_path / "k.json"),
        "arrow": lambda: _arrow_with_secrets(tmp_path),
    }[source]
    text = _outputs(make(), tmp_path)
    assert not [s for s in SECRETS if s[:10] in text], text[-2000:]  # not even a part
    if source == "nsys":
        assert "--hf-token ***" in text and "WANDB_API_KEY=***" in text  # the command is still shown


def test_the_tracker_payload_holds_no_secret(tmp_path, monkeypatch):
    """What `--log` hands a tracker (the summary, the HTML report, ``sys.argv`` while it is called)."""
    import analyzer.track.log_report as log_report
    from analyzer.track.log_options import LogOptions

    seen = []

    def fake(tracker, values, html, name):
        seen.append(json.dumps(values) + (html.read_text() if html is not None else "") + " ".join(sys.argv) + name)
        return "run-1"

    monkeypatch.setattr(log_report, "_log_one", fake)
    monkeypatch.setattr(LogOptions, "check_installed", lambda self: None)
    monkeypatch.setattr(sys, "argv", ["gpuanalyze", "cap.sqlite", "--log", "mlflow", "--hf-token", HF])
    from analyzer.api import analyze

    report = analyze(_nsys_with_secrets(tmp_path / "cap.sqlite"))
    assert log_report.log_report(report, LogOptions(to=("mlflow",))) == [
        "logged to mlflow run run-1 (metrics and HTML report)"
    ]
    assert seen and "--hf-token ***" in seen[0] and not [s for s in SECRETS if s in seen[0]]
