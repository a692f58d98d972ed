"""The HTML report in a real headless browser: no console errors, no network, every chart drawn.

Needs Debian's `chromium` (CI installs it: .ci/run) and Playwright's Python package (the test
extra); Playwright drives the system browser through ``executable_path`` and downloads nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from analyzer.api import ReadOptions, analyze
from analyzer.planning.cost import CostInputs
from gpuanalyze.ingest.sources import load_any
from tests.conftest import SAMPLES
from tests.report_helpers import synthetic_trace

pytestmark = pytest.mark.slow

pytest.importorskip("plotly", reason="the report extra (plotly) is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

from analyzer.render.html_report import render_html  # noqa: E402


def browser_path() -> str | None:
    for candidate in (os.environ.get("GPUANALYZE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (found := shutil.which(candidate)):
            return found
    return None


#: What each chart holds once plotly has drawn it: traces on the cartesian layer, a heatmap image, bars.
DRAWN = ".cartesianlayer .trace path[d]:not([d='']), .hm image, .barlayer .point path"


@pytest.fixture(scope="module")
def browser():
    path = browser_path()
    if path is None:
        pytest.skip("no chromium installed (apt-get install chromium; CI installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _pages(tmp: Path) -> dict[str, tuple[Path, set[str]]]:
    out = {}
    cpu = SAMPLES / "cpu_data_loading.arrow"
    ddp = SAMPLES / "cpu_ddp_straggler.rank0.arrow"
    big = synthetic_trace(ranks=256, steps=300, straggler=17)
    cases = [
        ("cpu", load_any(cpu), None, {"steps", "distribution"}),
        ("ddp", load_any(ddp), CostInputs(steps_per_run=1e5, price_per_gpu_hour=2.0), {"heat-step", "savings"}),
        ("ranks256", big, None, {"steps", "distribution", "gpu", "heat-step", "heat-wait"}),
    ]
    for name, trace, cost, expected in cases:
        page = render_html(analyze(trace, ReadOptions(cost=cost)), trace)
        path = tmp / f"{name}.html"
        path.write_text(page)
        out[name] = (path, expected)
    return out


def test_reports_render_offline_without_errors(browser, tmp_path):
    for name, (path, expected) in _pages(tmp_path).items():
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.on("request", lambda r, requests=requests: requests.append(r.url))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_function(
            f"[...document.querySelectorAll('.chart')].every(c => c.querySelector({DRAWN!r}))", timeout=30_000
        )
        drawn = page.eval_on_selector_all(
            ".chart",
            f"""els => els.map(e => [e.dataset.chart, e.getBoundingClientRect().height,
                                     e.querySelectorAll({DRAWN!r}).length])""",
        )
        page.close()
        assert errors == [], (name, errors)
        assert requests == [path.as_uri()], (name, requests)  # the page itself, nothing else
        found = {chart for chart, height, marks in drawn if height > 100 and marks > 0}
        assert expected <= found, (name, drawn)
        assert len(found) == len(drawn), (name, drawn)
