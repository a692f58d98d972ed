"""Regenerate the report screenshots in docs/ (shown in the README).

    python scripts/report_screenshots.py [--browser /usr/bin/chromium]

Renders `gpuanalyze report` for two bundled sample traces and photographs each page in headless
Chromium (Debian's package, driven by Playwright; nothing is downloaded).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from analyzer.api import ReadOptions, analyze
from analyzer.planning.cost import CostInputs
from analyzer.render.html_report import render_html
from gpuanalyze.ingest.sources import load_any

ROOT = Path(__file__).resolve().parent.parent
#: Screenshot -> (sample trace, cost inputs, pixels of the page kept from the top).
SHOTS = {
    "report-ddp-straggler.png": (
        "cpu_ddp_straggler.rank0.arrow",
        CostInputs(steps_per_run=100_000, price_per_gpu_hour=2.0),
        3500,
    ),
    "report-h200-small-batch.png": (
        "h200_small_batch.arrow",
        CostInputs(steps_per_run=500_000, price_per_gpu_hour=3.5),
        2500,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--browser", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.browser, args=["--no-sandbox", "--disable-gpu"])
        for shot, (sample, cost, keep) in SHOTS.items():
            trace = load_any(Path("sample_traces") / sample)  # relative: the page shows the path
            page_file = Path(tmp) / "report.html"
            page_file.write_text(render_html(analyze(trace, ReadOptions(cost=cost)), trace))
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(page_file.as_uri(), wait_until="load")
            page.wait_for_timeout(1000)
            height = min(keep, int(page.evaluate("document.documentElement.scrollHeight")))
            page.screenshot(
                path=str(ROOT / "docs" / shot), full_page=True, clip={"x": 0, "y": 0, "width": 1200, "height": height}
            )
            page.close()
            print(f"docs/{shot}: {sample}, {height} px")
        browser.close()


if __name__ == "__main__":
    main()
