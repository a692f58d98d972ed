"""`gpuanalyze run` / `python -m analyzer.run`: a command profiled without changing it."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from analyzer.run import env_vars
from analyzer.run.launch import child_env
from tests.conftest import rows_on_disk

runner = CliRunner()

TRAIN = textwrap.dedent("""
    import json, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class SlowDataset(Dataset):
        def __len__(self):
            return 8 * 20

        def __getitem__(self, i):
            time.sleep(0.002)
            g = torch.Generator().manual_seed(i)
            return torch.randn(16, generator=g), torch.randn(1, generator=g)

    torch.manual_seed(0)
    torch.set_num_threads(1)  # the loader stays the cause however loaded the box is (loops.one_thread)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for x, y in DataLoader(SlowDataset(), batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().item())
    print("LOSSES", json.dumps(losses), flush=True)
    sys.exit(3)
""")

FOREVER = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0:
            print("step", step, flush=True)
""")

DDP = textwrap.dedent("""
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(15):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
""")


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUANALYZE_")}
    env.update(extra)
    return env


# -- fast: configuration, the bootstrap, bad input ---------------------------------------------


def test_options_travel_through_the_environment(tmp_path):
    from analyzer.record.profile_options import ProfileOptions

    options = ProfileOptions(device="cpu", kernel_windows=True, window_first=7, tags={"exp": "a", "seed": "1"})
    env = env_vars.env_for(options, tmp_path, "rid")
    assert env[env_vars.ON] == "1" and env[env_vars.OUT] == str(tmp_path) and env[env_vars.RUN_ID] == "rid"
    back = env_vars.options_from_env(env)
    assert back.out == tmp_path / "trace.arrow"
    assert (back.device, back.kernel_windows, back.window_first, back.tags) == ("cpu", True, 7, options.tags)
    assert env_vars.options_from_env({env_vars.variable("kernel_windows"): "auto"}).kernel_windows is None


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("GPUANALYZE_WINDOW_FIRST", "soon", "GPUANALYZE_WINDOW_FIRST='soon'"),
        ("GPUANALYZE_KERNEL_WINDOWS", "maybe", "1/0"),
        ("GPUANALYZE_DEVICE", "tpu", "device"),
        ("GPUANALYZE_TAGS", "novalue", "key=value"),
    ],
)
def test_a_bad_variable_names_itself(name, value, says):
    with pytest.raises(GpuAnalyzeError, match=says):
        env_vars.options_from_env({name: value})


@pytest.mark.parametrize("value", ["x,y", "a=b,c=d", '{"j":1}', "quote ' and \"", "line\nbreak", "ünï ☃", ""])
def test_any_tag_value_round_trips_through_the_environment(tmp_path, value):
    from analyzer.record.profile_options import ProfileOptions

    tags = {"b": value, "k,=": "v"}
    env = env_vars.env_for(ProfileOptions(tags=tags), tmp_path, "rid")
    assert env_vars.options_from_env(env).tags == tags


def test_the_older_comma_form_of_tags_is_still_read():
    assert env_vars.options_from_env({env_vars.TAGS: "exp=a, seed=1"}).tags == {"exp": "a", "seed": "1"}
    with pytest.raises(GpuAnalyzeError, match="JSON object"):
        env_vars.options_from_env({env_vars.TAGS: '{"exp": 3}'})


def test_a_bad_inherited_variable_is_said_first_and_the_command_is_not_run(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("GPUANALYZE_WINDOW_FIRST", "soon")
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", "--out", str(out), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert result.exit_code == 2
    first = result.output.strip().splitlines()[0]
    assert "recording would be off" in first and "GPUANALYZE_WINDOW_FIRST='soon'" in first
    assert "optimizer step" not in result.output
    assert not marker.exists() and not out.exists()


def test_the_bootstrap_runs_the_users_sitecustomize_and_stays_idle_without_torch(tmp_path):
    from analyzer.record.profile_options import ProfileOptions

    user = tmp_path / "usersite"
    user.mkdir()
    marker = tmp_path / "marker"
    (user / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = _env(**env_vars.env_for(ProfileOptions(), tmp_path, "x"))
    env["PYTHONPATH"] = env_vars.pythonpath(str(user))
    done = subprocess.run(
        [sys.executable, "-c", "import sitecustomize, sys; print(sitecustomize.__file__); print(sorted(sys.modules))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stderr == ""
    first, modules = done.stdout.splitlines()
    assert first == str(user / "sitecustomize.py") and marker.read_text() == "ran"
    assert "'torch'" not in modules and "'pyarrow'" not in modules  # nothing heavy until torch is imported
    assert not list(tmp_path.glob("*.arrow"))


def test_the_child_environment_puts_the_bootstrap_first(tmp_path, monkeypatch):
    from analyzer.record.profile_options import ProfileOptions

    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    env = child_env(ProfileOptions(), tmp_path, "rid")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(env_vars.bootstrap_dir()), "/somewhere"]
    assert (env_vars.bootstrap_dir() / "sitecustomize.py").is_file()


def test_print_env_shows_what_a_scheduler_sets(tmp_path):
    result = runner.invoke(app, ["run", "--print-env", "--out", str(tmp_path), "--tag", "exp=a b"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "export GPUANALYZE_RUN=1" in lines
    assert f"export GPUANALYZE_OUT={tmp_path}" in lines
    assert """export GPUANALYZE_TAGS='{"exp":"a b"}'""" in lines
    assert any(line.startswith(f"export PYTHONPATH={env_vars.bootstrap_dir()}") for line in lines)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run"], "give the command to run"),
        (["run", "--", "no-such-command-gpuanalyze"], "cannot run 'no-such-command-gpuanalyze'"),
        (["run", "--window-every", "1", "--", "true"], "window_every"),
        (["run", "--tag", "x", "--", "true"], "key=value"),
        (["run", "--out", "/no/such/parent/dir", "--", "true"], "no such directory"),
    ],
)
def test_bad_run_input_is_one_line_and_exit_2(args, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert says in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # no output directory left behind


def test_a_command_without_python_training_says_no_trace(tmp_path):
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "o"), "--", "true"])
    assert result.exit_code == 0
    assert "no trace written" in result.output


# -- slow: real commands -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_script_runs_unchanged_and_is_analysed(tmp_path):
    """python -m analyzer.run -- python -W error train.py: same losses, exit status passed through,
    one row per optimizer step, the user's own sitecustomize still runs, secrets not stored."""
    pytest.importorskip("torch")
    from gpuanalyze.ingest.trace.reader import load_trace

    script = _script(tmp_path, "train.py", TRAIN)
    user = tmp_path / "usersite"
    user.mkdir()
    marker = tmp_path / "marker"
    (user / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    env = _env(PYTHONPATH=str(user))
    plain = subprocess.run(
        [sys.executable, "-W", "error", str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert plain.returncode == 3, plain.stderr
    out = tmp_path / "out"
    user_command = [sys.executable, "-W", "error", str(script), "--hf-token=hf_secret", "--lr", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "analyzer.run", "--out", str(out), "--", *user_command],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    losses = [line for line in done.stdout.splitlines() if line.startswith("LOSSES")]
    assert losses == [line for line in plain.stdout.splitlines() if line.startswith("LOSSES")]
    assert "DATA LOADING" in done.stdout
    assert f"exited with status 3; traces in {out}" in done.stderr
    assert marker.read_text() == "ran\n" * 3  # plain run, launcher, profiled child
    assert sorted(p.name for p in out.iterdir()) == ["trace.arrow"]
    trace = load_trace(out / "trace.arrow")
    assert trace.complete and trace.end.status == "ok" and trace.frame.height == 20
    assert trace.run.recorder == "run" and trace.run.models == ("Sequential",)
    assert "hf_secret" not in trace.run.argv and "--hf-token=***" in trace.run.argv


@pytest.mark.slow
def test_the_variables_alone_profile_an_unchanged_command(tmp_path):
    """What a scheduler does: the printed variables in the environment, the job's own command."""
    pytest.importorskip("torch")
    from gpuanalyze.ingest.trace.reader import load_trace

    out = tmp_path / "traces"  # not there yet: the first profiled process creates it
    printed = runner.invoke(app, ["run", "--print-env", "--out", str(out), "--tag", "job=7"]).output
    env = _env(GPUANALYZE_RUN_ID="job-7")
    for line in printed.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = subprocess.run(["sh", "-c", f"echo {value}"], capture_output=True, text=True, env=env).stdout.strip()
    script = _script(tmp_path, "short.py", FOREVER.replace("while True:", "for _ in range(30):"))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trace = load_trace(out / "trace.arrow")
    assert trace.frame.height == 30 and trace.run.run_id == "job-7" and trace.tags == {"job": "7"}


@pytest.mark.slow
def test_torchrun_ranks_each_write_a_trace(tmp_path):
    pytest.importorskip("torch")
    from gpuanalyze.ingest.trace.reader import load_trace

    script = _script(tmp_path, "ddp.py", DDP)
    out = tmp_path / "out"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)]
    done = subprocess.run(
        [sys.executable, "-m", "analyzer.run", "--out", str(out), "--json", "--", *torchrun],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["trace.rank0.arrow", "trace.rank1.arrow"]
    traces = [load_trace(out / f"trace.rank{r}.arrow") for r in (0, 1)]
    assert [(t.run.rank, t.run.world_size, t.frame.height) for t in traces] == [(0, 2, 15), (1, 2, 15)]
    assert traces[0].run.run_id == traces[1].run.run_id
    report = json.loads(done.stdout)
    assert report["ranks"] == 2 and report["complete"]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, "interrupted"), (signal.SIGTERM, None)])
def test_signals_reach_the_command_and_its_fate_is_passed_on(tmp_path, signum, status):
    """Sent to the launcher (no terminal): passed to the command; the launcher then ends the same way,
    after reporting what was recorded."""
    pytest.importorskip("torch")
    from gpuanalyze.ingest.trace.reader import load_trace

    script = _script(tmp_path, "forever.py", FOREVER)
    out = tmp_path / "out"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "analyzer.run", "--out", str(out), "--", sys.executable, str(script)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = launcher.stdout.readline()
            if line.startswith("step 60") or not line:
                break
        # the writer thread has put 60 rows on disk (SIGTERM writes nothing more at exit)
        while time.monotonic() < deadline and rows_on_disk(out / "trace.arrow") < 60:
            time.sleep(0.05)
        launcher.send_signal(signum)
        stdout, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == -signum, stderr
    assert f"killed by signal {signum}" in stderr and "Traceback (most recent call last)" not in stdout
    trace = load_trace(out / "trace.arrow")
    assert trace.frame.height >= 60
    if status is None:  # SIGTERM kills Python outright: the trace was not closed, and the report says so
        assert not trace.complete and "ended without closing" in stdout.replace("\n", " ").replace("│", "")
    else:  # Ctrl-C: KeyboardInterrupt unwinds, and the trace records it
        assert trace.complete and trace.end.status == status


def test_a_hostile_out_path_reaches_the_terminal_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "o\x1b]0;X\x07\u202e"
    result = runner.invoke(app, ["run", "--out", name, "--", sys.executable, "-c", "pass"])
    assert "no trace written" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\u202e" not in result.output
    assert "o\\x1b]0;X\\x07\\u202e" in result.output
