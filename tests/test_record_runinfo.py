"""Run information of a recording: placement, run ids; and trace name choice (redaction: test_redact.py)."""

import pytest

from analyzer.record.paths import create_new
from analyzer.record.run_facts import Placement, run_id


def test_run_id_comes_from_the_environment_first(monkeypatch):
    monkeypatch.setenv("GPUANALYZE_RUN_ID", "job-42")
    assert run_id(Placement()) == "job-42"
    monkeypatch.delenv("GPUANALYZE_RUN_ID")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "elastic-7")
    assert run_id(Placement(rank=1, world_size=2)).startswith("elastic-7.0.")
    assert run_id(Placement()) != run_id(Placement())  # a single process: a fresh id each time


def test_placement_reads_torchrun_variables_before_init(monkeypatch):
    pytest.importorskip("torch")
    from analyzer.record.run_facts import placement

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert placement() == Placement(rank=3, world_size=4, local_rank=1)
    monkeypatch.setenv("RANK", "9")  # inconsistent: ignored
    assert placement() == Placement()


def test_create_new_moves_on_when_a_name_is_taken_meanwhile(tmp_path):
    target = tmp_path / "t.arrow"
    (tmp_path / "t-1.arrow").write_text("old")

    def create(path):
        if path == target:
            path.write_text("another process")  # created between "free?" and "open"
        with open(path, "x") as fh:
            fh.write("mine")

    assert create_new(target, create, overwrite=False) == tmp_path / "t-2.arrow"
    assert (tmp_path / "t-2.arrow").read_text() == "mine" and target.read_text() == "another process"


def test_create_new_overwrites_only_when_asked(tmp_path):
    target = tmp_path / "t.arrow"
    target.write_text("old")

    def create(path):
        with open(path, "x") as fh:
            fh.write("new")

    assert create_new(target, create, overwrite=True) == target and target.read_text() == "new"
