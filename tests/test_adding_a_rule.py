"""Every rule in RULES is in each of the five places docs/adding-a-rule.md lists (its thresholds, its module with
its headline and where its fix runs, its registration, its documentation), and the doc lists exactly those."""

from __future__ import annotations

import re

import pytest

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import BOTTLENECKS, Finding
from analyzer.analysis.judge import cpu_side
from analyzer.analysis.rules import RULE_OF, RULES
from analyzer.analysis.rules.rule import FixRunsOn
from analyzer.render.words import NOT_A_RULE
from tests.conftest import ROOT

DOC = (ROOT / "docs" / "adding-a-rule.md").read_text()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.bottleneck)
def test_each_rule_is_in_every_place(rule) -> None:
    name = rule.bottleneck
    assert name in BOTTLENECKS and RULE_OF[name] is rule
    assert rule.headline.startswith(name.replace("_", " ").upper() + ": ")
    assert rule.cpu_headline is None or rule.cpu_headline.startswith(name.replace("_", " ").upper() + ": ")
    assert isinstance(rule.fix_runs_on, FixRunsOn)
    sources = {v.source for v in vars(T).values() if isinstance(v, T.Threshold)}
    assert rule.high.source in sources, "its high threshold comes from thresholds.py"
    thresholds_doc = (ROOT / "docs" / "thresholds.md").read_text()
    assert re.search(rf"^\| `{name}` \|", thresholds_doc, re.M), "a row of docs/thresholds.md's rules table"
    json_doc = (ROOT / "docs" / "json.md").read_text()
    verdicts = next(line for line in json_doc.splitlines() if line.startswith("- `bottleneck` `"))
    assert f"`{name}`" in verdicts, "docs/json.md's verdicts: run python scripts/json_schema.py"
    for cause, metrics in rule.defining.items():
        assert cause and metrics, "a defining test names its evidence"


def test_every_name_but_none_and_unknown_has_its_rule() -> None:
    assert sorted(BOTTLENECKS) == sorted({r.bottleneck for r in RULES} | set(NOT_A_RULE))
    assert set(NOT_A_RULE) == {"none", "unknown"}


@pytest.mark.parametrize(
    ("bottleneck", "cause", "on_gpu", "on_cpu"),
    [
        ("data_loading", "input_pipeline", True, True),  # FixRunsOn.HOST
        ("data_loading", "copies", False, False),  # a device cause of a host rule
        ("kernels", "fp32_math", False, True),  # FixRunsOn.HOST_ON_CPU_RUNS
    ],
)
def test_where_a_fix_runs_comes_from_its_rule(bottleneck, cause, on_gpu, on_cpu) -> None:
    f = Finding.__new__(Finding)
    object.__setattr__(f, "bottleneck", bottleneck)
    object.__setattr__(f, "cause", cause)
    assert (cpu_side(f, True), cpu_side(f, False)) == (on_gpu, on_cpu)


def test_the_doc_lists_at_most_five_places_and_each_file_the_test_checks() -> None:
    places = DOC.split("## The places, in order", 1)[1].split("\n\n## ", 1)[0]
    numbered = re.findall(r"^(\d+)\. ", places, re.M)
    assert numbered == [str(i) for i in range(1, len(numbered) + 1)] and len(numbered) <= 5
    for place in (
        "analyzer/analysis/thresholds.py",
        "scripts/thresholds_table.py",
        "analyzer/analysis/rules/<name>.py",
        "analyzer/analysis/findings.py",
        "analyzer/analysis/rules/__init__.py",
        "docs/thresholds.md",
        "tests/test_rules.py",
    ):
        assert place in DOC, place
        assert "<name>" in place or (ROOT / place).is_file()
    for word in ("headline", "cpu_headline", "fix_runs_on", "device_causes"):
        assert f"`{word}`" in DOC
