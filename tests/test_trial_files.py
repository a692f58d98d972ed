"""What a `run --try` trial changed among the user's files, and whose trial variables count."""

import sys

import pytest

from analyzer.run import trial_env, trial_files
from analyzer.run.trial_files import Files

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _project(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    (work / "ckpt.pt").write_bytes(b"weights")
    (work / "metrics.csv").write_text("step,loss\n")
    (work / "runs" / "old.log").write_text("x")
    monkeypatch.chdir(work)
    return work


def test_a_file_rewritten_appended_replaced_or_removed_is_named(tmp_path, monkeypatch):
    work = _project(tmp_path, monkeypatch)
    elsewhere = tmp_path / "data.bin"
    elsewhere.write_bytes(b"d")
    files = Files(["python", "train.py", f"--data={elsewhere}"], [work / "out"])
    assert files.complete and files.changed() == []
    (work / "metrics.csv").write_text("step,loss\n1,0.5\n")  # appended
    (work / "ckpt.tmp").write_bytes(b"weights")
    (work / "ckpt.tmp").replace(work / "ckpt.pt")  # the same bytes, a new inode
    (work / "runs" / "old.log").unlink()
    elsewhere.write_bytes(b"ee")  # named on the command line, outside the working directory
    assert set(files.changed()) == {"ckpt.pt", "metrics.csv", "runs/old.log", str(elsewhere)}
    assert files.changed() == []  # each check is against the one before


def test_new_files_bytecode_our_own_output_and_virtual_environments_are_not_changes(tmp_path, monkeypatch):
    work = _project(tmp_path, monkeypatch)
    (work / ".venv").mkdir()
    (work / ".venv" / "pyvenv.cfg").write_text("home = /usr")
    (work / "__pycache__").mkdir()
    log = (work / "try.log").open("w")  # `gpuanalyze run --try ... > try.log` in the working directory
    (work / "out").mkdir()
    (work / "out" / "trace.arrow").write_bytes(b"t")
    try:
        files = Files(["python", "train.py"], [work / "out"])
        (work / "lightning_logs" / "version_0").mkdir(parents=True)  # a new run directory: not the user's
        (work / "lightning_logs" / "version_0" / "events").write_text("e")
        (work / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"pyc")
        (work / ".venv" / "pyvenv.cfg").write_text("home = /opt")
        (work / "out" / "trace.arrow").write_bytes(b"the trials' own")
        log.write("the trials' output")
        log.flush()
        assert files.changed() == []
        (work / "lightning_logs" / "version_0" / "events").write_text("again")  # what an earlier trial wrote
        assert files.changed() == ["lightning_logs/version_0/events"]
    finally:
        log.close()


def test_the_record_is_bounded_and_says_so(tmp_path, monkeypatch):
    work = _project(tmp_path, monkeypatch)
    monkeypatch.setattr(trial_files, "MAX_FILES", 2)
    files = Files(["python", "train.py"], [work / "out"])
    assert not files.complete and sorted(files.last) == ["ckpt.pt", "metrics.csv"]  # breadth first, in order
    (work / "ckpt.pt").write_bytes(b"other weights")
    assert files.changed() == ["ckpt.pt"]


def test_trial_variables_count_only_with_the_launchers_token(tmp_path):
    token = trial_env.new_token(tmp_path)
    assert trial_env.genuine({trial_env.TOKEN: token})
    value, _, path = token.partition(":")
    assert not trial_env.genuine({trial_env.TOKEN: f"{value[:-1]}0:{path}"})  # another value
    assert not trial_env.genuine({trial_env.TOKEN: f"{value}:{tmp_path / 'elsewhere'}"})
    assert not trial_env.genuine({})
    (tmp_path / "token").unlink()  # the trials ended: a variable left in a shell no longer counts
    assert not trial_env.genuine({trial_env.TOKEN: token})
    assert trial_env.is_trial_variable("GPUANALYZE_TRY_STOP_AFTER") and trial_env.is_trial_variable("GPUANALYZE_TRIAL")
    assert not trial_env.is_trial_variable("GPUANALYZE_RUN")
