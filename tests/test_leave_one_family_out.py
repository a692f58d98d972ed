"""Leave-one-family-out validation chooses the fitted constants without the held-out family and projects
that family with them (benchmarks/leave_one_family_out.py)."""

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import leave_one_family_out as L


@dataclasses.dataclass
class _Pair:
    family: str
    measured_ms: float
    before_ms: float = 20.0
    group: str | None = "removal"
    finding: tuple[str, str] | None = ("host", "unattributed_host")
    error: float | None = 0.0
    projected_ms: float | None = None
    low_ms: float | None = None
    high_ms: float | None = None
    inside: bool | None = None
    note: str = ""
    before_path: str = ""


GRID = {"removal": [{"BATCH_UNMEASURED_FIXED": 0.1}, {"BATCH_UNMEASURED_FIXED": 0.3}]}
PRIORS = {"removal": {"BATCH_UNMEASURED_FIXED": 0.0}}


def test_the_held_out_family_is_projected_with_constants_fitted_without_it(monkeypatch):
    # families B and C are exact with the first constant, A with the second
    exact = {"A": 1, "B": 0, "C": 0, "W": 0}
    pairs = [_Pair("A", 10.0), _Pair("B", 10.0), _Pair("B", 12.0), _Pair("C", 11.0), _Pair("W", 9.0, group=None)]

    def reproject(pair, values):
        j = 0 if values.get("BATCH_UNMEASURED_FIXED", 0.1) == 0.1 else 1  # W: no fitted constant
        point = pair.measured_ms * (1.0 if j == exact[pair.family] else 1.2)
        return point, point * 0.9, point * 1.1

    monkeypatch.setattr(L, "reproject", reproject)
    held, chosen, *_ = L.lofo(pairs, GRID, PRIORS)
    by_family = {c["held_out"]: c["removal"] for c in chosen}
    assert by_family["A"] == {"BATCH_UNMEASURED_FIXED": 0.1}  # chosen on B and C
    a = next(p for p in held if p.family == "A")
    assert a.error == pytest.approx(0.2) and a.inside is False  # out of sample, A is 20% off and outside
    assert all(p.error == pytest.approx(0.0) for p in held if p.family in ("B", "C"))
    w = next(p for p in held if p.family == "W")
    assert w.projected_ms == 9.0 and w.error == 0.0  # no fitted constant: the same point as in sample
    assert len(held) == len(pairs)


def test_a_group_with_one_family_takes_its_prior_not_the_in_sample_choice(monkeypatch):
    # the micro-batch group has pairs of family M only: held out, nothing else fits it
    grid = {**GRID, "micro": [{"MICRO": 0.5}, {"MICRO": 0.8}]}
    priors = {**PRIORS, "micro": {"MICRO": 0.5}}
    pairs = [_Pair("M", 10.0, group="micro"), _Pair("B", 10.0), _Pair("C", 10.0)]
    seen = []

    def reproject(pair, values):
        seen.append((pair.family, {k: v for k, v in values.items() if k != "MODEL_ERROR"}))
        point = pair.measured_ms * (1.0 if values.get("MICRO") == 0.8 or "BATCH_UNMEASURED_FIXED" in values else 1.5)
        return point, point, point

    monkeypatch.setattr(L, "reproject", reproject)
    from analyzer.analysis import thresholds as T

    monkeypatch.setattr(T, "MICRO", 0.8, raising=False)  # the in-sample value in place: it must not leak
    held, chosen, *_ = L.lofo(pairs, grid, priors)
    m = next(p for p in held if p.family == "M")
    assert ("M", {"MICRO": 0.5}) in seen  # 0.8 would project M exactly: fitted on M itself
    assert m.error == pytest.approx(0.5) and "prior" in m.note
    assert next(c for c in chosen if c["held_out"] == "M")["prior"] == ["micro"]


def test_constants_are_restored_after_the_block():
    from analyzer.analysis import thresholds as T

    before = T.BATCH_UNMEASURED_FIXED
    with pytest.raises(RuntimeError), L.constants({"BATCH_UNMEASURED_FIXED": 0.99}):
        assert T.BATCH_UNMEASURED_FIXED == 0.99
        raise RuntimeError
    assert before == T.BATCH_UNMEASURED_FIXED


def test_without_windows_the_profiled_steps_measure_nothing_and_it_is_restored(monkeypatch):
    from analyzer.analysis.rules import cpu_precision

    class _Ctx:
        gpu = False

    before = cpu_precision.window_ms
    with pytest.raises(RuntimeError), L.without_windows():
        assert cpu_precision.window_ms(_Ctx(), "cpu_op_ms") is None
        raise RuntimeError
    assert cpu_precision.window_ms is before


def test_the_conformal_error_is_the_calibrated_rank_of_the_scores_and_never_shrinks_a_range():
    scores = [-0.2, -0.1, 0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9]  # n = 9: the ceil(10 x 0.8) = 8th smallest
    assert L.conformal_error(scores) == 0.7
    assert L.conformal_error([-0.3, -0.2, -0.1, -0.05]) == 0.0  # all inside already: not narrowed
    assert L.conformal_error([0.1, 0.2, 0.3]) is None  # too few to reach 80%: the rank is beyond n
    assert L.conformity(10.0, 8.0, 12.0, 13.0) == pytest.approx(0.1)  # 1 ms above the high end of a 10 ms point
    assert L.conformity(10.0, 8.0, 12.0, 9.0) == pytest.approx(-0.1)  # inside, 1 ms from the low end


def test_the_held_out_family_is_widened_by_the_error_of_the_other_families_only(monkeypatch):
    # family A's pair falls 50% above its range; the others 10%; the error A is judged with must not see A
    pairs = [_Pair(f, 10.0, group=None) for f in ("A", "B", "C", "D", "E")]
    miss = {"A": 0.5, "B": 0.1, "C": 0.1, "D": 0.1, "E": 0.1}
    seen = []

    def reproject(pair, values):
        seen.append(values["MODEL_ERROR"])
        high = pair.measured_ms / (1 + miss[pair.family])  # point = high = 10 / (1 + miss)
        return high, high * 0.9, high

    monkeypatch.setattr(L, "reproject", reproject)
    held, chosen, shipped, scores = L.lofo(pairs, {}, {})
    assert set(seen) == {0.0}  # scored on ranges without the model error
    error = {c["held_out"]: c["model_error"] for c in chosen}
    assert error["A"] == pytest.approx(0.1)  # from B..E only: 4 scores, rank ceil(5 x 0.8) = 4
    assert error["B"] == pytest.approx(0.5)  # A among its 4 scores, the 4th smallest
    a = next(p for p in held if p.family == "A")
    point = 10.0 / 1.5
    assert a.high_ms == pytest.approx(point * 1.1) and a.inside is False  # widened by 0.1 of its point: not enough
    b = next(p for p in held if p.family == "B")
    assert b.inside is True
    assert shipped == pytest.approx(0.5)  # 5 scores: rank ceil(6 x 0.8) = 5, the largest
    assert sorted(scores) == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.5])  # each family's pair, out of sample
