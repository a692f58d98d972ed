"""sample_traces/README.md says what the tool says of each bundled trace today, and lists every trace."""

import importlib.util

from tests.conftest import ROOT, SAMPLES


def _script():
    spec = importlib.util.spec_from_file_location("sample_traces_readme", ROOT / "scripts" / "sample_traces_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_what_the_tool_says_today():
    readme = (SAMPLES / "README.md").read_text()
    assert readme == _script().render(), "stale: run python scripts/sample_traces_readme.py and read the diff"


def test_every_bundled_trace_is_described():
    described = {name.replace("{0,1}", r) for name in _script().SCENARIOS for r in "01"}
    assert {p.name for p in SAMPLES.glob("*.arrow")} <= described
