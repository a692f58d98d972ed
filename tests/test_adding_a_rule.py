"""Every rule in RULES is in each place docs/adding-a-rule.md lists (its name, headline, where its fix runs,
its thresholds and its documentation), and the doc lists exactly those places."""

from __future__ import annotations

import re

import pytest

from analyzer.analysis import thresholds as T
from analyzer.analysis.findings import BOTTLENECKS
from analyzer.analysis.judge import FIX_ON_HOST
from analyzer.analysis.rules import RULES
from analyzer.render.words import VERDICT
from tests.conftest import ROOT

NOT_RULES = ("none", "unknown")
DOC = (ROOT / "docs" / "adding-a-rule.md").read_text()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.bottleneck)
def test_each_rule_is_in_every_place(rule) -> None:
    name = rule.bottleneck
    assert name in BOTTLENECKS
    assert name in VERDICT
    assert FIX_ON_HOST.get(name) in ("always", "cpu_runs", "never")
    sources = {v.source for v in vars(T).values() if isinstance(v, T.Threshold)}
    assert rule.high.source in sources, "its high threshold comes from thresholds.py"
    thresholds_doc = (ROOT / "docs" / "thresholds.md").read_text()
    assert re.search(rf"^\| `{name}` \|", thresholds_doc, re.M), "a row of docs/thresholds.md's rules table"
    json_doc = (ROOT / "docs" / "json.md").read_text()
    verdicts = next(line for line in json_doc.splitlines() if line.startswith("| `bottleneck` |"))
    assert f"`{name}`" in verdicts
    for cause, metrics in rule.defining.items():
        assert cause and metrics, "a defining test names its evidence"


def test_every_name_but_none_and_unknown_has_its_rule() -> None:
    assert sorted(BOTTLENECKS) == sorted({r.bottleneck for r in RULES} | set(NOT_RULES))
    assert set(VERDICT) == set(BOTTLENECKS) == set(FIX_ON_HOST)


def test_the_doc_lists_each_place_the_test_checks() -> None:
    for place in (
        "analyzer/analysis/thresholds.py",
        "scripts/thresholds_table.py",
        "analyzer/analysis/findings.py",
        "analyzer/analysis/rules/<name>.py",
        "analyzer/analysis/rules/__init__.py",
        "analyzer/render/words.py",
        "analyzer/analysis/judge.py",
        "docs/thresholds.md",
        "docs/json.md",
        "tests/test_rules.py",
    ):
        assert place in DOC, place
    assert (ROOT / "scripts" / "thresholds_table.py").is_file()
