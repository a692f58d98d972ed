"""`gpuanalyze run --try`: trials of the command, one per candidate setting, measured."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from analyzer.analysis.findings import Projection
from analyzer.analysis.fixes import BatchFix, MicroBatchFix, PrecisionFix, WorkerFix
from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from analyzer.run import trial_env
from analyzer.run.candidates import Candidate, derive, setting_of
from analyzer.run.candidates import given as given_candidates
from analyzer.run.trial_child import _batch_of, _override
from analyzer.run.trial_env import TrialSetting, parse_setting
from analyzer.run.trial_measure import Measured, beats
from analyzer.run.trial_output import as_dict, print_table, recommendation
from analyzer.run.trials import TrialRun, TryResult, _batch_notes
from analyzer.run.try_options import TryOptions
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace.reader import load_trace

runner = CliRunner()


# -- settings and their variables ---------------------------------------------------------------
def test_a_setting_parses_from_the_command_line_and_travels_through_the_environment():
    setting = parse_setting("num_workers=2, persistent_workers=true,prefetch_factor=4")
    assert setting.dataloader == (("num_workers", 2), ("persistent_workers", True), ("prefetch_factor", 4))
    assert setting.label() == "num_workers=2, persistent_workers=true, prefetch_factor=4"
    env = trial_env.env_for(setting, stop_after=25, log="/tmp/log", token="t:/x")
    assert env[trial_env.TRIAL] == "1" and env[trial_env.STOP_AFTER] == "25"
    assert env[trial_env.SETTING] == "num_workers=2,persistent_workers=true,prefetch_factor=4"
    assert trial_env.from_env(env) == (setting, 25)
    precision = parse_setting("autocast=BF16,tf32=1")
    assert trial_env.from_env(trial_env.env_for(precision, stop_after=3, log="", token="")) == (precision, 3)
    assert precision.needs_accelerator and not setting.needs_accelerator
    assert trial_env.from_env({}) == (TrialSetting(), None)
    assert TrialSetting().is_baseline and TrialSetting().slug() == "baseline"


_LOADER_VALUES = {
    "num_workers": st.integers(0, 64),
    "persistent_workers": st.booleans(),
    "pin_memory": st.booleans(),
    "prefetch_factor": st.integers(1, 16),
}


@st.composite
def _settings(draw):
    keys = draw(st.lists(st.sampled_from(sorted(_LOADER_VALUES)), unique=True))
    loader = tuple((k, draw(_LOADER_VALUES[k])) for k in keys)
    return TrialSetting(
        dataloader=loader, autocast=draw(st.sampled_from([None, "bf16", "fp16"])), tf32=draw(st.booleans())
    )


@given(_settings(), st.integers(1, 10_000))
def test_every_setting_survives_the_environment_and_the_command_line(setting, steps):
    assert trial_env.from_env(trial_env.env_for(setting, stop_after=steps, log="x", token="")) == (setting, steps)
    if not setting.is_baseline:
        assert parse_setting(setting.label()) == setting


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("bogus=1", "unknown setting 'bogus'"),
        ("num_workers", "is not key=value"),
        ("num_workers=two", "expected a whole number"),
        ("num_workers=-1", "must be at least 0"),
        ("prefetch_factor=0", "must be at least 1"),
        ("num_workers=99999999999999999999", "at most 256 in a trial"),  # started processes until load 440
        ("prefetch_factor=1000000", "at most 64 in a trial"),
        ("batch_size=99999999999", "at most 16,777,216 in a trial"),
        ("pin_memory=maybe", "expected true or false"),
        ("autocast=fp8", "use bf16 or fp16"),
        ("num_workers=1,num_workers=2", "given twice"),
        (",", "expected key=value"),
    ],
)
def test_a_bad_candidate_says_what_is_accepted(text, says):
    with pytest.raises(GpuAnalyzeError, match=says):
        parse_setting(text)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({trial_env.SETTING: "num_workers"}, "GPUANALYZE_TRY_SETTING 'num_workers': .* is not key=value"),
        ({trial_env.SETTING: "num_workers=two"}, "expected a whole number"),
        ({trial_env.SETTING: "sampler=2"}, "GPUANALYZE_TRY_SETTING 'sampler=2': unknown setting"),
        ({trial_env.STOP_AFTER: "ten"}, "GPUANALYZE_TRY_STOP_AFTER"),
        ({trial_env.STOP_AFTER: "0"}, "at least 1"),
    ],
)
def test_a_bad_trial_variable_names_itself(env, says):
    with pytest.raises(GpuAnalyzeError, match=says):
        trial_env.from_env(env)


def test_try_options_are_validated():
    assert TryOptions(steps=10, warmup=2).stop_after == 12
    for bad in ({"steps": 1}, {"warmup": -1}, {"time_limit_s": 0}, {"time_limit_s": float("nan")}):
        with pytest.raises(GpuAnalyzeError):
            TryOptions(**bad)
    with pytest.raises(GpuAnalyzeError, match="at least one setting"):
        TryOptions(candidates=(TrialSetting(),))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--try", "--try-steps", "1"], "--try-steps 1"),
        (["--try", "--try-time-limit", "-5"], "--try-time-limit"),
        (["--try", "--candidates", "bogus=1"], "unknown setting 'bogus'"),
        (["--try-steps", "5"], "need --try"),
        (["--candidates", "num_workers=2"], "need --try"),
    ],
)
def test_bad_try_input_is_one_line_and_exit_2(args, says, tmp_path):
    result = runner.invoke(app, ["run", "--out", str(tmp_path / "o"), *args, "--", sys.executable, "-c", "pass"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()  # nothing ran


# -- the child's override -------------------------------------------------------------------------
def test_the_override_replaces_what_the_script_passed_and_lists_the_changes():
    args = {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None, "pin_memory": False}
    changed = _override(args, {"num_workers": 2, "prefetch_factor": 4, "pin_memory": False})
    assert args == {"num_workers": 2, "persistent_workers": False, "prefetch_factor": 4, "pin_memory": False}
    assert changed == {"num_workers": [0, 2], "prefetch_factor": [None, 4]}  # pin_memory was already False


def test_worker_only_settings_are_skipped_for_a_loader_left_without_workers():
    args = {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None}
    changed = _override(args, {"persistent_workers": True, "prefetch_factor": 4})
    assert args == {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None}  # DataLoader would raise
    assert changed == {
        "persistent_workers": [False, "skipped: no workers"],
        "prefetch_factor": [None, "skipped: no workers"],
    }


# -- candidates -----------------------------------------------------------------------------------
def _projection(fix, step_ms=10.0, low=None, high=None):
    return Projection(step_ms=step_ms, current_ms=30.0, rule="r", bound="b", fix=fix, low_ms=low, high_ms=high)


def _report(*fixes, device="cpu", cpu_bf16=None):
    findings = [SimpleNamespace(bottleneck="data_loading", cause="c", projection=_projection(f)) for f in fixes]
    return SimpleNamespace(findings=findings, run=SimpleNamespace(device=device, cpu_bf16=cpu_bf16))


def test_candidates_start_with_the_projected_fix_and_stay_within_the_cores():
    report = _report(WorkerFix(3))
    found, notes = derive(report, cores=2, accelerator=False, current_workers=0)  # type: ignore[arg-type]
    labels = [c.setting.label() for c in found]
    assert labels[0] == "num_workers=3" and found[0].source == "projection" and found[0].projection is not None
    assert found[0].projection.step_ms == 10.0
    assert labels[1:] == [
        "num_workers=1",
        "num_workers=2",
        "num_workers=3, persistent_workers=true",  # with the projected worker count
        "num_workers=3, prefetch_factor=4",
    ]
    assert all(c.projection is None for c in found[1:])
    assert any("no accelerator" in n for n in notes)
    assert not any(c.setting.needs_accelerator for c in found)


def test_candidates_leave_out_the_current_worker_count_and_respect_many_cores():
    found, _ = derive(None, cores=64, accelerator=False, current_workers=2)
    workers = [dict(c.setting.dataloader)["num_workers"] for c in found if len(c.setting.dataloader) == 1]
    assert workers == [1, 4, 8]


def test_accelerator_settings_only_with_an_accelerator():
    report = _report(PrecisionFix("bfloat16"), device="cuda")
    on_gpu, _ = derive(report, cores=4, accelerator=True, current_workers=0)  # type: ignore[arg-type]
    labels = [c.setting.label() for c in on_gpu]
    assert labels[0] == "autocast=bf16" and on_gpu[0].source == "projection"
    assert {"autocast=fp16", "tf32=true", "num_workers=4, pin_memory=true"} <= set(labels)
    fp16 = _report(PrecisionFix("float16"), device="cuda")
    on_cpu, notes = derive(fp16, cores=4, accelerator=False, current_workers=0)  # type: ignore[arg-type]
    assert not any(c.setting.needs_accelerator for c in on_cpu)
    assert any("projected but not tried" in n and "autocast=fp16" in n for n in notes)


def test_a_cpu_with_native_bf16_tries_bf16_autocast():
    plain, notes = derive(_report(), cores=2, accelerator=False, current_workers=0)  # type: ignore[arg-type]
    assert "autocast=bf16" not in [c.setting.label() for c in plain] and any("no native bf16" in n for n in notes)
    native = _report(cpu_bf16="avx512_bf16")
    found, _ = derive(native, cores=2, accelerator=False, current_workers=0)  # type: ignore[arg-type]
    assert "autocast=bf16" in [c.setting.label() for c in found]
    assert not parse_setting("autocast=bf16").needs_accelerator and parse_setting("autocast=fp16").needs_accelerator
    asked, notes = given_candidates([parse_setting("tf32=1"), parse_setting("num_workers=1")], None, accelerator=False)
    assert [c.setting.label() for c in asked] == ["num_workers=1"] and "needs an accelerator" in notes[0]


def test_batch_size_candidates_come_from_the_baselines_loader():
    found, _ = derive(None, cores=1, accelerator=False, current_workers=0, current_batch=8)
    assert "batch_size=16" in [c.setting.label() for c in found]
    assert all(not c.setting.changes_batch for c in derive(None, cores=1, accelerator=False, current_workers=0)[0])
    report = _report(BatchFix(4))
    projected, _ = derive(report, cores=1, accelerator=False, current_workers=0, current_batch=8)  # type: ignore[arg-type]
    assert projected[0].setting.label() == "batch_size=32" and projected[0].source == "projection"
    micro = parse_setting("batch_size=16,accumulate=2")
    assert micro.changes_batch and micro.script == (("accumulate", 2),)
    env = trial_env.env_for(micro, stop_after=3, log="", token="")
    assert env["GPUANALYZE_TRIAL_ACCUMULATE"] == "2" and trial_env.from_env(env)[0] == micro
    assert parse_setting("eval_every=0").label() == "eval_every=0"
    with pytest.raises(GpuAnalyzeError, match="at least 1"):
        parse_setting("accumulate=0")
    with pytest.raises(GpuAnalyzeError, match="at least 1"):
        parse_setting("batch_size=0")


def _loader_arguments(**kwargs):
    import inspect

    from torch.utils.data import DataLoader

    bound = inspect.signature(DataLoader.__init__).bind(None, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def test_a_batch_sampler_loader_gets_the_trials_batch_or_says_why_not():
    pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    data = list(range(64))
    torchs = _loader_arguments(dataset=data, batch_sampler=BatchSampler(SequentialSampler(data), 8, False))
    assert _batch_of(torchs) == 8  # what the baseline logs: its batch candidate is 16
    assert _override(torchs, {"batch_size": 16}) == {"batch_size": [8, 16]}
    assert [len(b) for b in DataLoader(**torchs)] == [16] * 4  # DataLoader takes it (batch_size=16 would raise)

    class Buckets(BatchSampler):
        pass

    own = _loader_arguments(dataset=data, batch_sampler=Buckets(SequentialSampler(data), 8, False))
    assert _batch_of(own) is None  # no batch candidate from it
    assert _override(own, {"batch_size": 16}) == {"batch_size": [None, "skipped: batch_sampler Buckets"]}
    assert [len(b) for b in DataLoader(**own)] == [8] * 8
    unbatched = _loader_arguments(dataset=data, batch_size=None)
    assert _override(unbatched, {"batch_size": 16}) == {"batch_size": [None, "skipped: the loader does not batch"]}
    log = ({"event": "loader", "batch_size": None, "batch_sampler": "Buckets"},)
    baseline = TrialRun("baseline", TrialSetting(), None, "stopped", log=log)
    assert _batch_notes(baseline, []) == ["batch_size not tried: the DataLoader batches with its own Buckets"]


@pytest.mark.parametrize(
    "fix",
    [WorkerFix(4), WorkerFix(2, persistent=True), PrecisionFix("bfloat16"), BatchFix(2), MicroBatchFix(8, 2)],
)
def test_the_analysis_names_the_trial_that_settles_its_advice(fix):
    from analyzer.planning.settling_trial import candidate_text, settling_trial

    finding = SimpleNamespace(bottleneck="data_loading", cause="c", projection=_projection(fix))
    report = SimpleNamespace(findings=[finding], metrics=SimpleNamespace(batch_samples=8.0))
    line = settling_trial(report, "python train.py")  # type: ignore[arg-type]
    text = candidate_text(finding, 8.0)  # type: ignore[arg-type]
    assert line == f"gpuanalyze run --try --candidates {text} -- python train.py"
    assert parse_setting(text) == setting_of(fix, 8)  # the same setting run --try derives from it
    assert settling_trial(SimpleNamespace(findings=[], metrics=None)) is None  # type: ignore[arg-type]
    cheaper = SimpleNamespace(projection=_projection(None))
    assert candidate_text(cheaper) is None  # type: ignore[arg-type]


def test_the_try_says_whether_it_settles_the_analysis_advice(tmp_path):
    from analyzer.run.trial_output import against_projection

    result = _result(tmp_path, 13.0, low=11.0, high=14.0)
    candidate = result.trials[0][0]
    top = SimpleNamespace(bottleneck="data_loading", cause="c", projection=candidate.projection)
    result.report = SimpleNamespace(findings=[top])  # type: ignore[assignment]
    assert against_projection(result)[-1] == "the analysis' advice (data_loading/c: num_workers=2): " + (
        "confirmed: the measured best, beyond noise"
    )
    slow = _result(tmp_path, 29.95, low=11.0, high=14.0)
    slow.report = SimpleNamespace(findings=[top])  # type: ignore[assignment]
    lines = against_projection(slow)
    assert "slower than the projected range" in lines[0] and lines[-1].endswith("within the baselines' noise")


def test_the_top_findings_trial_is_recognised_by_its_setting_whatever_made_it_a_candidate(tmp_path):
    from analyzer.run.trial_output import against_projection

    result = _result(tmp_path, 13.0, low=11.0, high=14.0)
    setting = result.trials[0][0].setting
    result.trials[0] = (Candidate(setting, "given"), result.trials[0][1])  # tried as given, no projection on it
    top = SimpleNamespace(bottleneck="data_loading", cause="c", projection=_projection(WorkerFix(2)))
    result.report = SimpleNamespace(findings=[top])  # type: ignore[assignment]
    assert against_projection(result)[-1].startswith("the analysis' advice (data_loading/c: num_workers=2): confirmed")
    top.projection = _projection(WorkerFix(4))
    assert against_projection(result)[-1] == (
        "the analysis' advice (data_loading/c: num_workers=4) was not tried (--candidates num_workers=4 tries it)"
    )
    top.projection = _projection(None)
    assert "names no setting a trial can apply" in against_projection(result)[-1]


def test_a_projection_that_needs_code_changes_is_no_candidate():
    assert setting_of(BatchFix(4)) is None  # the baseline's batch size unknown
    assert setting_of(None) is None
    assert setting_of(WorkerFix(4)) == TrialSetting(dataloader=(("num_workers", 4),))


# -- measuring and recommending ------------------------------------------------------------------
def _measured(mean, stdev, steps=20, workers=0):
    return Measured(steps=steps, mean_ms=mean, stdev_ms=stdev, loader_workers=workers, end_status="trial_stop")


def test_a_candidate_beats_the_baseline_only_beyond_noise():
    base = _measured(30.0, 1.0)
    assert beats(base, _measured(20.0, 1.0))
    assert not beats(base, _measured(29.5, 1.0))  # within 2 standard errors
    assert not beats(base, _measured(29.5, 0.0001))  # beyond noise, but 1.7% is below the 3% minimum gain
    assert not beats(_measured(30.0, 30.0, steps=4), _measured(20.0, 30.0, steps=4))  # very noisy steps
    assert not beats(base, _measured(35.0, 1.0))


def _result(tmp_path, candidate_ms, low=None, high=None):
    projection = _projection(WorkerFix(2), step_ms=12.0, low=low, high=high)
    candidate = Candidate(TrialSetting(dataloader=(("num_workers", 2),)), "projection", projection, "data_loading/c")
    baseline = TrialRun("baseline", TrialSetting(), tmp_path, "stopped", 0, (), _measured(29.9, 1.0))
    again = TrialRun("baseline 2", TrialSetting(), tmp_path, "stopped", 0, (), _measured(30.1, 1.0))
    trial = TrialRun("candidate 1", candidate.setting, tmp_path, "stopped", 0, (), _measured(candidate_ms, 1.0, 20, 2))
    return TryResult(out_dir=tmp_path, baseline=baseline, repeats=[again], trials=[(candidate, trial)])


def test_the_result_shows_projection_interval_and_recommendation(tmp_path):
    data = as_dict(_result(tmp_path, 13.0, low=11.0, high=14.0))
    base, again, cand = data["trials"]
    assert again["vs_baseline_pct"] == pytest.approx(100 * (30.1 / 29.9 - 1))  # a repeat against the first
    assert data["baseline_spread_pct"] == pytest.approx(100 * 0.2 / 30)
    assert base["vs_baseline_pct"] is None and base["inside_interval"] == "n/a"
    assert cand["projected_ms"] == 12.0 and cand["inside_interval"] == "yes"
    assert cand["vs_baseline_pct"] == pytest.approx(100 * (13 / 30 - 1))
    assert data["recommended"]["dataloader"] == {"num_workers": 2}
    assert "recommended: num_workers=2" in data["recommendation"]
    assert as_dict(_result(tmp_path, 16.0, low=11.0, high=14.0))["trials"][2]["inside_interval"] == "no"
    assert as_dict(_result(tmp_path, 13.0))["trials"][2]["inside_interval"] == "n/a"  # no range projected
    assert data["within_noise_of_recommended"] == []
    two = _result(tmp_path, 13.0)
    other = TrialRun("candidate 2", parse_setting("num_workers=4"), tmp_path, "stopped", 0, (), _measured(13.2, 1.0))
    far = TrialRun("candidate 3", parse_setting("num_workers=1"), tmp_path, "stopped", 0, (), _measured(25.0, 1.0))
    two.trials += [(Candidate(other.setting, "standard"), other), (Candidate(far.setting, "standard"), far)]
    assert as_dict(two)["within_noise_of_recommended"] == ["num_workers=4"]
    assert recommendation(two).endswith("within noise of it: num_workers=4")
    same = _result(tmp_path, 29.9)
    assert same.best is None and "keep the current settings" in recommendation(same)


def test_the_table_shows_the_projected_interval_as_text(tmp_path, capsys):
    print_table(_result(tmp_path, 13.0, low=11.0, high=14.0), width=160)
    out = capsys.readouterr().out
    assert "projected ms" in out and "[11.00, 14.00]" in out  # brackets are not markup
    assert "13.00 ± 1.00" in out and "-56.7%" in out and "yes" in out and "ended" in out
    assert out.strip().splitlines()[-1].startswith("gpuanalyze: recommended: num_workers=2")
    assert "projected 12.00 ms [11.00, 14.00], measured 13.00 ms: inside the projected range" in out
    print_table(_result(tmp_path, 13.0), width=160)
    assert "[n/a]" in capsys.readouterr().out


def _crowded(tmp_path):
    result = _result(tmp_path, 13.0, low=11.0, high=14.0)
    result.notes.append("a long note " * 20)
    for n, label in enumerate(("num_workers=8,persistent_workers=true", "batch_size=16", "num_workers=1"), start=2):
        ended = "failed" if label == "num_workers=1" else "stopped"
        trial = TrialRun(f"candidate {n}", parse_setting(label), tmp_path, ended, 1, (), _measured(1234.5, 100.25))
        result.trials.append((Candidate(trial.setting, "standard"), trial))
    return result


@pytest.mark.parametrize("width", [60, 80, 120, 160])
def test_the_table_fits_the_width_it_is_given(tmp_path, capsys, width):
    print_table(_crowded(tmp_path), width=width)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= width
    assert any("12.00" in line for line in lines) and any("candidate 1" in line for line in lines)


def test_at_80_columns_no_value_is_split(tmp_path, capsys):
    print_table(_crowded(tmp_path), width=80)
    words = capsys.readouterr().out.split()
    for value in ("persistent_workers=true", "num_workers=8", "batch_size=16", "1234.50", "100.25", "+4015.0%"):
        assert value in words, value  # whole, on one line (it was 'persistent_w' / 'orkers=true')
    assert "[11.00, 14.00]" in " ".join(words) and "failed (exit 1)" in " ".join(words)


def test_the_table_takes_its_width_from_columns_in_a_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "70")
    print_table(_result(tmp_path, 13.0, low=11.0, high=14.0))  # stdout is not a terminal here
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 70 and any("12.00" in line for line in lines)


def test_the_trials_warnings_come_once_after_the_table(tmp_path, capsys):
    result = _result(tmp_path, 13.0)
    warned = ({"event": "warning", "text": "UserWarning: this DataLoader will create 8 worker processes"},) * 2
    result.repeats[0] = dataclasses.replace(result.repeats[0], log=warned)
    result.trials[0] = (result.trials[0][0], dataclasses.replace(result.trials[0][1], log=warned))
    print_table(result, width=200)
    out = capsys.readouterr().out
    assert out.count("this DataLoader will create 8 worker processes") == 1
    assert "warning (from 2 of the trials; all in their trial-log.jsonl)" in out
    assert as_dict(result)["warnings"] == ["UserWarning: this DataLoader will create 8 worker processes"]


# -- the noise rule: repeated baselines -------------------------------------------------------
def test_a_change_inside_the_baselines_own_spread_is_not_beyond_noise():
    beyond_noise = beats

    steady = 0.05  # steps so even that within-trial noise alone would call -8.9% real
    baselines = [_measured(28.5, steady), _measured(31.5, steady)]  # run to run: 10% apart
    candidate = _measured(27.33, steady)  # -8.9% against their mean
    assert beats(baselines[1], candidate)  # the old rule, one baseline and its steps' variation
    assert not beyond_noise(baselines, candidate)
    assert beyond_noise(baselines, _measured(26.5, steady))  # beyond the 3 ms spread
    assert beyond_noise([_measured(29.9, steady), _measured(30.1, steady)], candidate)  # tight baselines
    noisy = [_measured(29.9, 6.0, steps=5), _measured(30.1, 6.0, steps=5)]
    assert not beyond_noise(noisy, candidate)  # tight means, noisy steps
    assert not beyond_noise([_measured(30.0, steady), _measured(30.0, steady)], _measured(29.5, steady))  # < 3%


def test_no_candidate_is_recommended_without_a_second_baseline(tmp_path):
    result = _result(tmp_path, 13.0)
    result.repeats[0] = TrialRun("baseline 2", TrialSetting(), tmp_path, "failed", 1, (), None)
    assert result.best is None and "fewer than two baseline trials" in recommendation(result)


def test_a_larger_batch_is_compared_per_sample():
    from analyzer.run.trial_measure import comparable_ms, vs_baseline

    beyond_noise = beats

    def batch(mean, samples):
        return Measured(steps=20, mean_ms=mean, stdev_ms=0.1, loader_workers=0, end_status=None, samples=samples)

    baselines = [batch(10.0, 8), batch(10.2, 8)]
    doubled = batch(16.0, 16)  # slower per step, 8 ms per 8 samples
    assert comparable_ms(8, doubled) == pytest.approx(8.0)
    assert beyond_noise(baselines, doubled)
    assert vs_baseline(baselines[0], doubled) == pytest.approx(-20.0)
    assert not beyond_noise(baselines, batch(21.0, 16))  # 10.5 ms per 8 samples
    assert comparable_ms(None, doubled) == 16.0


def test_candidates_that_would_overrun_the_time_limit_are_not_started(tmp_path, monkeypatch):
    from analyzer.record.profile_options import ProfileOptions
    from analyzer.run import trials

    started = []

    monkeypatch.chdir(tmp_path)

    def fake_trial(name, setting, directory, trials):
        started.append(name)
        trace = (tmp_path / "trace.arrow",)
        return TrialRun(name, setting, directory, "stopped", 0, trace, _measured(30.0, 1.0), seconds=1000.0)

    monkeypatch.setattr(trials, "run_trial", fake_trial)
    monkeypatch.setattr(trials, "analyze_baseline", lambda path, warmup: (None, "not analysed"))
    result = trials.try_command(["train"], ProfileOptions(), TryOptions(time_limit_s=60), tmp_path / "out")
    assert started == ["baseline"] and result.trials
    assert all(t.outcome == "not_run" and t.directory is None for _, t in result.trials)
    assert any("less than the baseline trial took (1000 s)" in n for n in result.notes)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["trial-0-baseline"]


# -- end to end (spawning) ------------------------------------------------------------------------
SLOW_LOADER = textwrap.dedent("""
    import os, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class SlowDataset(Dataset):
        def __len__(self):
            return 8 * 500

        def __getitem__(self, i):
            time.sleep(0.003)
            g = torch.Generator().manual_seed(i)
            return torch.randn(16, generator=g), torch.randn(1, generator=g)

    with open(sys.argv[1], "a") as f:
        f.write(f"GPUANALYZE_TRIAL={os.environ.get('GPUANALYZE_TRIAL')}\\n")
    print("the script's own output", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(SlowDataset(), batch_size=8, num_workers=0):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with open(sys.argv[1], "a") as f:
        f.write("ran to the end\\n")
""")


def _gpuanalyze(tmp_path, *args, timeout=600):
    """`gpuanalyze run ARGS` in a directory of its own under ``tmp_path`` (a trial that changes a file in
    the working directory stops the trials; these scripts write beside it)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "analyzer.run", *args]
    return subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.slow
def test_try_measures_worker_candidates_on_a_slow_loader(tmp_path):
    script, seen, out = tmp_path / "train.py", tmp_path / "seen.txt", tmp_path / "out"
    script.write_text(SLOW_LOADER)
    (out / "trial-0-baseline").mkdir(parents=True)  # something already there is never reused
    (out / "trial-0-baseline" / "mine.txt").write_text("keep")
    proc = _gpuanalyze(
        tmp_path, "--try", "--try-warmup", "2", "--try-steps", "4", "--json", "--out", str(out), "--",
        sys.executable, str(script), str(seen),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    base, again, *cands = data["trials"]
    assert again["trial"] == "baseline 2" and again["directory"] == str(out.resolve() / "trial-0-baseline2")
    assert (out / "trial-0-baseline" / "mine.txt").read_text() == "keep"
    assert base["directory"] == str(out.resolve() / "trial-0-baseline-1")
    assert "gpuanalyze: baseline: data_loading" in proc.stderr
    workers = [c for c in cands if c["dataloader"].get("num_workers")]
    assert workers and {c["dataloader"]["num_workers"] for c in workers} >= {1, 2}
    assert any(c["dataloader"] == {"batch_size": 16} for c in cands)  # twice the script's batch
    for index, row in [(0, base), (0, again), *enumerate(cands, start=1)]:
        assert row["outcome"] == "stopped", row
        trace = load_any(Path(row["directory"]) / "trace.arrow")
        assert trace.end is not None and trace.end.status == "trial_stop"
        assert trace.end.steps == 6 and trace.frame.height == 6  # warm-up 2 + 4 steps, then stopped
        assert trace.end.loader_workers == row["dataloader"].get("num_workers", 0)  # the setting took effect
        assert row["measured_samples"] == row["dataloader"].get("batch_size", 8)
        assert row["loader_workers"] == trace.end.loader_workers and row["measured_steps"] == 4
        assert Path(row["directory"]).name.startswith(f"trial-{index}-{trace.tags['gpuanalyze_trial']}")
    assert any("num_workers 0 -> 2" in line for c in workers for line in c["loaders_changed"])
    assert base["loaders_changed"] == [] and base["setting"] == "current settings"
    projected = [c for c in cands if c["source"] == "projection"]
    assert projected and projected[0]["projected_ms"] > 0 and projected[0]["trial"] == "candidate 1"
    lines = seen.read_text().splitlines()
    assert lines == ["GPUANALYZE_TRIAL=1"] * (2 + len(cands))  # every trial saw it; none ran to the end
    assert any("no accelerator" in n for n in data["notes"])
    assert data["recommendation"]


FIXED_COST_LOOP = textwrap.dedent("""
    import os, time, torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    accumulate = int(os.environ.get("GPUANALYZE_TRIAL_ACCUMULATE", "1"))
    for i, (x, y) in enumerate(DataLoader(data, batch_size=8)):
        time.sleep(0.02)  # a fixed cost per micro-batch, whatever its size
        torch.nn.functional.mse_loss(model(x), y).backward()
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()
""")


@pytest.mark.slow
def test_try_measures_a_batch_size_candidate_per_sample_against_two_baselines(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FIXED_COST_LOOP)
    proc = _gpuanalyze(
        tmp_path, "--try", "--try-warmup", "2", "--try-steps", "6", "--json", "--out", str(tmp_path / "o"),
        "--candidates", "batch_size=16", "--candidates", "batch_size=4,accumulate=2", "--",
        sys.executable, str(script),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    first, second, larger, micro = data["trials"]
    assert first["outcome"] == second["outcome"] == "stopped" and second["trial"] == "baseline 2"
    assert data["baseline_spread_pct"] is not None and data["baseline_spread_pct"] >= 0
    assert first["measured_samples"] == 8 and larger["measured_samples"] == 16 and micro["measured_samples"] == 8
    assert larger["vs_baseline_pct"] < -25  # the same fixed cost over twice the samples: about -50%
    assert micro["vs_baseline_pct"] > 25  # two fixed costs per 8 samples: about +100%
    assert micro["script"] == {"accumulate": 2}
    assert data["recommended"]["dataloader"] == {"batch_size": 16}
    assert any("learning rate" in n for n in data["notes"])


@pytest.mark.slow
def test_try_leaves_no_process_of_a_trial_running(tmp_path):
    pids = tmp_path / "pids"
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import subprocess, sys, threading, time, torch

        def spawn(tag, **kw):  # a sleeper that holds the caller's stdout and stderr
            p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], **kw)
            with open(sys.argv[1], "a") as f:
                f.write(f"{tag} {p.pid}\\n")

        spawn("setsid", start_new_session=True)  # leaves the trial's process group and session
        threading.Thread(target=lambda: (spawn("thread"), time.sleep(300)), daemon=True).start()
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(40):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    """)
    )
    proc = _gpuanalyze(
        tmp_path, "--try", "--try-warmup", "1", "--try-steps", "3", "--candidates", "num_workers=1",
        "--out", str(tmp_path / "o"), "--", sys.executable, str(script), str(pids), timeout=200,
    )  # fmt: skip  # capture_output: returns only once every holder of the pipes has gone
    assert proc.returncode == 0, proc.stderr
    started = [int(line.split()[1]) for line in pids.read_text().splitlines()]
    assert len(started) == 6  # two baselines and one candidate, two sleepers each
    for pid in started:
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "zombie" in status.read_text().lower(), pid


@pytest.mark.slow
def test_try_prints_the_table_and_a_recommendation(tmp_path):
    script, seen, out = tmp_path / "train.py", tmp_path / "seen.txt", tmp_path / "out"
    script.write_text(SLOW_LOADER)
    proc = _gpuanalyze(
        tmp_path, "--try", "--try-warmup", "2", "--try-steps", "4", "--candidates", "num_workers=1", "--out", str(out),
        "--width", "160", "--", sys.executable, str(script), str(seen),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 160
    (said,) = [line for line in proc.stderr.splitlines() if line.startswith("gpuanalyze: baseline:")]
    assert len(said) <= 160  # the baseline's verdict line follows --width too (was one line of 236 in a log)
    assert "projected ms" in proc.stdout and "measured ms" in proc.stdout
    assert "baseline" in proc.stdout and "num_workers=1" in proc.stdout and "candidate 1" in proc.stdout
    assert "num_workers 0 -> 1" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gpuanalyze: recommended: num_workers=1") or "keep the current settings" in last


@pytest.mark.slow
def test_a_failing_baseline_passes_its_status_on_and_tries_nothing(tmp_path):
    proc = _gpuanalyze(
        tmp_path, "--try", "--out", str(tmp_path / "o"), "--", sys.executable, "-c", "import sys; sys.exit(3)"
    )
    assert proc.returncode == 3, proc.stderr
    assert "no recommendation: the baseline trial failed (exit status 3)" in proc.stdout
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["trial-0-baseline"]


@pytest.mark.slow
def test_a_trial_past_the_time_limit_is_killed_with_its_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    hang = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    started = time.monotonic()
    proc = _gpuanalyze(
        tmp_path,
        "--try",
        "--try-time-limit",
        "4",
        "--json",
        "--out",
        str(tmp_path / "o"),
        "--",
        sys.executable,
        "-c",
        hang,
    )
    assert time.monotonic() - started < 100
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["trials"][0]["outcome"] == "time_limit" and "time limit" in data["recommendation"]
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{grandchild}").exists() and time.monotonic() < deadline:
        if "zombie" in Path(f"/proc/{grandchild}/status").read_text().lower():
            break
        time.sleep(0.2)
    status = Path(f"/proc/{grandchild}/status")
    assert not status.exists() or "zombie" in status.read_text().lower()  # the whole group was killed


CHILD = textwrap.dedent("""
    import json, os, sys, torch
    from torch.utils.data import DataLoader
    from analyzer.run import trial_child

    trial_child.start(os.environ, None, lambda: print("trace closed", flush=True))
    model = torch.nn.Linear(4, 2)
    out = {
        "forward_dtype": str(model(torch.randn(3, 4)).dtype),
        "outside_dtype": str((torch.randn(3, 4) @ torch.randn(4, 2)).dtype),
        "tf32": torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32,
        "workers": DataLoader(list(range(8)), num_workers=0).num_workers,
        "prefetch": DataLoader(list(range(8)), num_workers=0).prefetch_factor,
    }
    print(json.dumps(out), flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for step in range(10):
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
            print("stepped", step, flush=True)
    except SystemExit:
        print("caught the stop")
    finally:
        open(sys.argv[1], "w").write("saved in finally")
    print("after the loop")
""")


@pytest.mark.slow
def test_the_child_applies_its_setting_and_stops_without_the_scripts_exit_handlers(tmp_path):
    log, saved = tmp_path / "log.jsonl", tmp_path / "ckpt.pt"
    setting = parse_setting("num_workers=2,prefetch_factor=3,autocast=bf16,tf32=1")
    token = trial_env.new_token(tmp_path)
    env = {**os.environ, **trial_env.env_for(setting, stop_after=3, log=str(log), token=token)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(saved)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    out = json.loads(lines[0])
    assert out["forward_dtype"] == "torch.bfloat16"  # the outermost forward ran under autocast (CPU here)
    assert out["outside_dtype"] == "torch.float32"  # and only the forward
    assert out["tf32"] is True
    assert out["workers"] == 2 and out["prefetch"] == 3  # what the script passed is overridden
    assert lines[1:] == ["stepped 0", "stepped 1", "trace closed"]  # stopped in the 3rd step, the trace closed
    assert not saved.exists()  # no finally block, no except, no code after the loop ran
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in entries if e["event"] != "warning"] == ["loader", "loader", "stop"]
    assert entries[0]["changed"] == {"num_workers": [0, 2], "prefetch_factor": [None, 3]}
    assert proc.stderr == ""
    forged = {**env, trial_env.TOKEN: "0" * 32 + token[32:]}  # another value, the same file
    plain = subprocess.run([sys.executable, "-c", CHILD, str(saved)], env=forged, capture_output=True, text=True,
                           timeout=300, check=False)  # fmt: skip
    assert plain.returncode == 0 and "stepped 9" in plain.stdout and saved.read_text() == "saved in finally"
    assert json.loads(plain.stdout.splitlines()[0])["workers"] == 0  # nothing applied
    (note,) = plain.stderr.splitlines()
    assert "GPUANALYZE_TRIAL, GPUANALYZE_TRY_LOG, GPUANALYZE_TRY_SETTING" in note and "ignored" in note


DDP_LOADER = textwrap.dedent("""
    import time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 4000

        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.randn(16), torch.randn(1)

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Slow(), batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_try_under_torchrun_stops_and_measures_every_rank(tmp_path):
    script, out = tmp_path / "ddp.py", tmp_path / "out"
    script.write_text(DDP_LOADER)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)]
    proc = _gpuanalyze(
        tmp_path, "--try", "--try-warmup", "2", "--try-steps", "3", "--candidates", "num_workers=1", "--json",
        "--out", str(out), "--", *torchrun,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    base, again, cand = json.loads(proc.stdout)["trials"]
    for row, workers in ((base, 0), (again, 0), (cand, 1)):
        assert row["outcome"] == "stopped" and row["measured_steps"] == 3, row
        for rank in (0, 1):
            end = load_trace(Path(row["directory"]) / f"trace.rank{rank}.arrow").end  # this rank's own file
            assert end is not None and end.status == "trial_stop" and end.steps == 5 and end.loader_workers == workers
    assert len(cand["loaders_changed"]) == 2  # one loader per rank


SLOW_STEPS = textwrap.dedent("""
    import time, torch
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        time.sleep(0.2)
""")


@pytest.mark.slow
def test_a_signal_to_the_launcher_reaches_the_trial_and_stops_the_trials(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "analyzer.run", "--try", "--try-steps", "1000", "--json", "--out", str(out), "--",
         sys.executable, "-c", SLOW_STEPS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / "trial-0-baseline" / "trace.arrow").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    data = json.loads(stdout)
    assert [t["outcome"] for t in data["trials"]] == ["interrupted"]  # and no candidate started
    assert "interrupted" in data["recommendation"]
