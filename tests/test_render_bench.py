"""The bench report reads at 80 columns (and narrower): no value is ever cut."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.machine.ceilings_store import Fingerprint
from analyzer.render.bench import num, render_bench, short
from gpuanalyze.kernels.result import BenchReport, BenchResult, SuiteOutcome

M = 2**20


def _r(benchmark: str, variant: str, value: float, unit: str, **kw) -> BenchResult:
    lo, hi = kw.pop("spread", (value * 0.98, value * 1.01))
    return BenchResult(
        benchmark=benchmark,
        backend="cupy",
        device="NVIDIA H200",
        variant=variant,
        value=value,
        unit=unit,
        repeats=50,
        min=lo,
        median=value,
        max=hi,
        **kw,
    )


def _report() -> BenchReport:
    """A full H200 report with the widest values each benchmark produces."""
    suites = {
        "matmul": [
            _r("matmul", "8192x8192x8192", v, "TFLOP/s", dtype=d, size_bytes=384 * M)
            for d, v in (("float32", 51.2), ("tf32", 378.9), ("bfloat16", 771.2), ("float8", 1480.7))
        ],
        "allreduce": [
            _r("allreduce", f"nccl {mode}", 356.77, "GB/s busbw", dtype="float32", size_bytes=256 * M, world_size=8)
            for mode in ("out-of-place", "in-place")
        ],
    }
    return BenchReport(
        "cupy",
        "NVIDIA H200",
        Fingerprint(backend="cupy", device="NVIDIA H200", host="gpu-node-17"),
        False,
        tuple(SuiteOutcome(name, tuple(rows)) for name, rows in suites.items()),
        {},
        123.4,
        ("a note the suite left",),
    )


def _render(width: int) -> str:
    console = Console(width=width, record=True, highlight=False, color_system=None)
    console.print(render_bench(_report()))
    return console.export_text()


def _whole(token: str, text: str) -> bool:
    return re.search(rf"(?<![\w.,]){re.escape(token)}(?![\w,]|\.\d)", text) is not None


@pytest.mark.parametrize("width", [80, 60, 40])
def test_every_value_is_shown_whole_at_any_width(width):
    text = _render(width)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    for r in _report().results:
        assert _whole(num(r.value), text), (num(r.value), width)
    for header in ("matmul", "all-reduce"):
        assert header in text


def test_at_80_columns_every_column_is_kept():
    text = _render(80)
    for token in ("1,481", "78%", "busbw GB/s", "ranks", "nccl out-of-place", "bf16", "384 MiB"):
        assert token in text, token
    assert _whole(f"{short(51.2 * 0.98)}..{short(51.2 * 1.01)}", text)  # min..max of the fp32 matmul
    assert "a note the suite left" in text


def test_a_narrow_table_drops_the_spread_before_anything_else():
    text = _render(60)
    assert "min..max" not in text.split("all-reduce")[1]
    assert "busbw GB/s" in text and "ranks" in text


def test_number_formats():
    assert [num(v) for v in (1234567.8, 771.24, 3.7654, 0.029861, 0.0)] == [
        "1,234,568",
        "771.2",
        "3.765",
        "0.0299",
        "0",
    ]
    assert [short(v) for v in (12110.0, 2.5e6, 30.62)] == ["12.1k", "2.5M", "30.6"]


@pytest.mark.slow  # spawns processes (the marker's definition, pyproject.toml)
def test_bench_honours_width_and_columns():
    pytest.importorskip("torch")
    runner = CliRunner()
    for args, env, width in (
        (["--width", "44"], {}, 44),
        ([], {"COLUMNS": "80"}, 80),
    ):
        result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick", *args], env=env)
        assert result.exit_code == 0, result.output
        table = result.stdout.split("saved matmul")[0]
        assert "…" not in table and max(len(line) for line in table.splitlines()) <= width
        assert "TFLOP/s" in table or "TFLOP/s" in result.stdout
