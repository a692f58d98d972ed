"""The spine's acceptance test: a plain loop wrapped only in analyzer.profile, judged by the CLI."""

import json

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner

import analyzer
from analyzer.cli import app
from tests.scenarios.loops import make_loop, one_thread, scenario, train


def _verdict(tmp_path, name):
    cfg = scenario(name, steps=25)
    out = tmp_path / f"{name}.arrow"
    with one_thread():  # the cause stays the cause beside other work (loops.one_thread)
        model, optimizer, loader = make_loop(cfg)
        with analyzer.profile(model, out=str(out)):
            train(model, optimizer, loader)
    result = CliRunner().invoke(app, [str(out), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.slow
def test_slow_dataset_is_data_loading(tmp_path):
    data = _verdict(tmp_path, "data_loading")
    assert data["bottleneck"] == "data_loading"
    assert data["findings"][0]["share"] >= 0.2


@pytest.mark.slow
def test_fast_dataset_is_not_data_loading(tmp_path):
    data = _verdict(tmp_path, "healthy")
    assert data["bottleneck"] != "data_loading"
    assert data["share"]["data_wait"] < 0.2
