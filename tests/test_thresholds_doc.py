"""docs/thresholds.md quotes every number of analyzer/analysis/thresholds.py as it is, and the rules
compare against no number of their own."""

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("thresholds_table", ROOT / "scripts" / "thresholds_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_doc_table_is_thresholds_py():
    s = _script()
    doc = (ROOT / "docs" / "thresholds.md").read_text()
    assert s.documented(doc) == s.table(), "run: python scripts/thresholds_table.py"


def test_the_table_holds_every_threshold():
    from analyzer.analysis import thresholds as T

    names = {n for n, _, _ in _script().rows()}
    for name in ("DATA_WAIT_HIGH", "KERNELS_HIGH", "RELAXED", "MAX_WORKERS", "CONFIDENCE_HIGH", "STABLE_VERDICT"):
        assert name in names and hasattr(T, name)


def _literals(path: Path) -> list[tuple[int, float]]:
    """Float literals compared against or used as cut-offs in a rule module (0 and 1 are not thresholds)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and isinstance(side.value, float) and side.value not in (0.0, 1.0):
                    found.append((node.lineno, side.value))
        if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Constant):
            v = node.body.value
            if isinstance(v, float) and v not in (0.0, 1.0):
                found.append((node.lineno, v))
    return found


def test_rules_compare_against_no_literal_of_their_own():
    rules = sorted((ROOT / "analyzer" / "analysis" / "rules").glob("*.py"))
    rules += [
        ROOT / "analyzer" / "analysis" / n
        for n in ("steady.py", "stability.py", "judge.py", "spikes.py", "batch_split.py")
    ]
    offenders = {p.name: lits for p in rules if p.exists() and (lits := _literals(p))}
    assert offenders == {}


def test_no_threshold_names_the_issue_that_set_it():
    """Sources and their notes are shown to users (docs/thresholds.md, `--json` evidence): they say why the number
    holds, not which piece of work chose it."""
    import re

    from analyzer.analysis import thresholds as T

    sources = [v.source for v in vars(T).values() if isinstance(v, T.Threshold)]
    doc = (ROOT / "docs" / "thresholds.md").read_text()
    assert sources and not [s for s in sources if re.search(r"\bissue \d", s, re.I)]
    assert not re.search(r"\bissue \d", doc, re.I)
