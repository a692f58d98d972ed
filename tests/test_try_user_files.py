"""`run --try` cannot lose the user's data and measures like the run: real trials of a resuming,
checkpointing script (slow tier)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuanalyze.ingest.sources import load_any

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

RESUMING = textwrap.dedent("""
    import json, os, sys, warnings, torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    skip = os.environ.get("GPUANALYZE_TRIAL") == "1" and "--ignore-trial" not in sys.argv
    if os.environ.get("PROBE"):  # how the trial is scheduled, written outside the working directory
        # /proc/self/autogroup may be absent or empty (a container without autogroup): None then
        shown = open("/proc/self/autogroup").read().split() if os.path.exists("/proc/self/autogroup") else []
        group = shown[0] if shown else None
        facts = {"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "autogroup": group,
                 "nice": os.getpriority(os.PRIO_PROCESS, 0)}
        open(os.environ["PROBE"], "a").write(json.dumps(facts) + "\\n")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    if os.path.exists("ckpt.pt"):  # resume
        state = torch.load("ckpt.pt")
        model.load_state_dict(state["model"])
        step = state["step"]
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), batch_size=8, drop_last=False))
    warnings.warn("the script's own warning")
    try:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if not skip:
                with open("metrics.csv", "a") as f:
                    f.write(f"{step},{loss.item():.4f}\\n")
    finally:
        torch.save({"model": model.state_dict(), "step": step}, "ckpt.pt")  # unguarded
""")


def _gpuanalyze(work, *args, env=None, nice=0):
    return subprocess.run(
        [sys.executable, "-m", "analyzer.run", *args],
        cwd=work,
        env={**os.environ, **(env or {})},
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def work(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(RESUMING)
    subprocess.run([sys.executable, "train.py"], cwd=work, check=True, timeout=120)  # an earlier run's files
    return work


def _files(work):
    return {name: (work / name).read_bytes() for name in ("ckpt.pt", "metrics.csv")}


def test_trials_leave_a_resuming_scripts_files_byte_identical_and_run_like_the_caller(work, tmp_path):
    before = _files(work)
    probe = tmp_path / "probe.jsonl"
    proc = _gpuanalyze(
        work, "--try", "--try-warmup", "1", "--try-steps", "3", "--candidates", "batch_size=16", "--json",
        "--out", "out", "--", sys.executable, "train.py", env={"PROBE": str(probe)}, nice=3,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _files(work) == before  # its finally: never ran, its loop skipped its writes
    said = " ".join(proc.stderr.split())  # wrapped at 80 columns
    assert said.startswith("gpuanalyze: --try will run your command 3 times (2 baselines, 1 candidates)")
    assert max(len(line) for line in proc.stderr.splitlines()) <= 80
    data = json.loads(proc.stdout)
    assert [t["outcome"] for t in data["trials"]] == ["stopped"] * 3 and data["files_changed"] is None
    base, _, larger = data["trials"]
    assert base["measured_samples"] == 8 and larger["measured_samples"] == 16  # its BatchSampler, scaled
    assert any("batch_size 8 -> 16" in line for line in larger["loaders_changed"])
    assert data["warnings"] == ["UserWarning: the script's own warning"] and "own warning" not in proc.stderr
    for trial in data["trials"]:
        assert load_any(Path(trial["directory"]) / "trace.arrow").end.steps == 4
    ours = Path("/proc/self/autogroup")
    our_group = (ours.read_text().split() or [None])[0] if ours.exists() else None
    for facts in map(json.loads, probe.read_text().splitlines()):
        assert facts["sid"] == os.getsid(0) and facts["pgid"] == facts["pid"] != os.getpgid(0)  # a group, no session
        assert facts["nice"] == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)  # the caller's priority
        assert facts["autogroup"] == our_group  # the caller's scheduling group (None where none is shown)


def test_a_trial_that_changes_the_users_files_stops_the_trials_and_names_them(work):
    before = _files(work)
    proc = _gpuanalyze(
        work, "--try", "--try-warmup", "1", "--try-steps", "3", "--out", "out", "--width", "80",
        "--", sys.executable, "train.py", "--ignore-trial",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert [p.name for p in (work / "out").iterdir()] == ["trial-0-baseline"]  # no second trial
    stopped = " ".join(proc.stdout[proc.stdout.index("gpuanalyze: stopped:") :].split())
    assert stopped.startswith("gpuanalyze: stopped: baseline changed metrics.csv; no trial ran after it")
    assert 'os.environ.get("GPUANALYZE_TRIAL") != "1"' in stopped
    assert _files(work)["ckpt.pt"] == before["ckpt.pt"]  # its finally: did not run
    grown = _files(work)["metrics.csv"].decode().splitlines()
    assert len(grown) == len(before["metrics.csv"].decode().splitlines()) + 3  # one trial: it stops in step 4
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80


def test_trial_variables_left_in_the_environment_do_not_cut_a_plain_run(work):
    env = {"GPUANALYZE_TRIAL": "1", "GPUANALYZE_TRY_STOP_AFTER": "2"}
    proc = _gpuanalyze(work, "--out", "plain", "--", sys.executable, "train.py", env=env)
    assert proc.returncode == 0, proc.stderr
    assert load_any(work / "plain" / "trace.arrow").end.steps == 32  # every step, not 2
    (note,) = [line for line in proc.stderr.splitlines() if "ignored" in line]
    assert note == (
        "gpuanalyze: GPUANALYZE_TRIAL, GPUANALYZE_TRY_STOP_AFTER ignored: not set by a running "
        "`gpuanalyze run --try` (unset them)"
    )
