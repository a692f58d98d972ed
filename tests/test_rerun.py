"""Every printed command runs as printed: advice that re-runs the script names the run's own command
(redacted), and one placeholder where the trace records none."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from analyzer.analysis.rerun import ARGV_CHARS, UNKNOWN_COMMAND, rerun_command
from analyzer.cli import app
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import RunInfo
from tests.conftest import SAMPLES, write_trace


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ("slow_io.py", "python slow_io.py"),
        ("/home/me/train.py --lr 3 --hf-token ***", "python /home/me/train.py --lr 3 --hf-token '***'"),  # as stored
        ("train.py --name a;rm $HOME", "python train.py --name 'a;rm' '$HOME'"),  # sys.argv's words, joined
    ],
)
def test_the_recorded_command_is_rerun_quoted_for_a_shell(argv, command):
    assert rerun_command(RunInfo(argv=argv)) == command


@pytest.mark.parametrize(
    "run",
    [
        RunInfo(),  # an imported trace
        RunInfo(argv="-c"),  # python -c
        RunInfo(argv="/venv/lib/ipykernel_launcher.py -f /tmp/kernel.json"),  # a notebook
        RunInfo(argv="train.py", world_size=2),  # one rank of a torchrun job: the launcher is not recorded
        RunInfo(argv="train.py " + "x" * ARGV_CHARS),  # cut when recorded
    ],
)
def test_a_trace_without_a_command_to_rerun_gets_the_one_placeholder(run):
    assert rerun_command(run) == UNKNOWN_COMMAND


def _loader_trace(path, argv):
    """The bundled data-loading sample as if recorded by ``argv``."""
    sample = load_trace(SAMPLES / "cpu_data_loading.arrow")
    run = msgspec.structs.replace(sample.run, argv=argv)
    return write_trace(path, sample.frame.to_dicts(), run=run, end=sample.end)


def _box_text(output: str) -> str:
    """The terminal report's words with the box drawing and the wrapping taken out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


def test_measure_do_json_and_html_name_the_runs_own_command_at_80_columns(tmp_path):
    trace = _loader_trace(tmp_path / "t.arrow", "slow_io.py --hf-token ***")  # as the recorder stores it
    shown = CliRunner().invoke(app, [str(trace), "--width", "80"])
    assert shown.exit_code == 0, shown.output
    assert max(len(line) for line in shown.output.splitlines()) <= 80
    data = json.loads(CliRunner().invoke(app, [str(trace), "--json"]).output)
    trial = data["findings"][0]["settling_trial"]
    assert trial.startswith("gpuanalyze run --try --candidates num_workers=")
    assert trial.endswith(" -- python slow_io.py --hf-token '***'")
    box = _box_text(shown.output)
    assert "measure " in box and trial in box
    assert "train.py" not in shown.output
    pytest.importorskip("plotly")
    html = tmp_path / "r.html"
    assert CliRunner().invoke(app, ["report", str(trace), "-o", str(html)]).exit_code == 0
    assert trial.replace("'", "&#x27;") in html.read_text()


def test_without_a_recorded_command_every_line_says_the_one_placeholder(tmp_path):
    trace = _loader_trace(tmp_path / "t.arrow", None)
    data = json.loads(CliRunner().invoke(app, [str(trace), "--json"]).output)
    assert data["findings"][0]["settling_trial"].endswith(f" -- {UNKNOWN_COMMAND}")
    shown = CliRunner().invoke(app, [str(trace), "--width", "80"]).output
    assert "train.py" not in shown and f"-- {UNKNOWN_COMMAND}" in _box_text(shown)


SLOW_IO = textwrap.dedent("""
    import time, torch
    from torch.utils.data import DataLoader, Dataset

    class SlowStorage(Dataset):  # each sample waits on storage: the loader dominates even on a busy host
        def __len__(self):
            return 8 * 40

        def __getitem__(self, i):
            time.sleep(0.005)
            return torch.full((16,), float(i)), torch.ones(1)

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(SlowStorage(), batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
""")


@pytest.mark.slow
def test_the_measure_line_of_gpuanalyze_run_runs_as_printed(tmp_path):
    """`gpuanalyze run -- python slow_io.py` at 80 columns prints a `measure` line; pasted into a shell
    in the same directory it runs the trials of that script."""
    pytest.importorskip("torch")
    (tmp_path / "slow_io.py").write_text(SLOW_IO)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUANALYZE_")}
    env |= {"COLUMNS": "80", "PATH": str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")}
    done = subprocess.run(
        "gpuanalyze run -- python slow_io.py", shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    measure = re.search(r"measure (gpuanalyze run .*? -- python slow_io\.py) \(", _box_text(done.stdout))
    assert measure, done.stdout
    tried = subprocess.run(measure.group(1), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert tried.returncode == 0, tried.stderr
    assert "candidate 1" in tried.stdout and "num_workers" in tried.stdout, tried.stdout
