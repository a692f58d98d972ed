import io

from rich.cells import cell_len
from rich.console import Console

from analyzer.planning.compare import Comparison, RunOption
from analyzer.render.planning import render_compare


def printed(renderable, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False, markup=False).print(renderable)
    return out.getvalue()


def _options() -> Comparison:
    parts = {"data_wait_ms": 51.86, "forward_ms": 8.1, "backward_ms": 0.91, "other_ms": 0.55}
    opts = tuple(
        RunOption(
            name=name,
            hours_per_run=hours,
            gpus=8,
            price_per_gpu_hour=price,
            per_run_usd=hours * 8 * price,
            step_time_mean_ms=step,
            samples_per_s=123456.0,
            breakdown_ms={k: v * (i + 1) for k, v in parts.items()},
            bottleneck="data_loading",
        )
        for i, (name, hours, price, step) in enumerate(
            [
                ("H100 80GB SXM on-demand (us-east-1, reserved 1 year)", 1205.5, 2.49, 61.79),
                ("B200 spot cluster in another region", 601.25, 4.25, 20.86),
                ("an-extremely-long-single-word-server-name-without-spaces-at-all", 99.0, 1.0, 2.5),
            ]
        )
    )
    return Comparison(opts, "an-extremely-long-single-word-server-name-without-spaces-at-all", 100.0)


def test_compare_at_80_columns_never_cuts_a_value():
    c = _options()
    out = printed(render_compare(c), 80)
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    first_column = "".join(line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│"))
    first_column = "".join(first_column.split())
    for o in c.options:
        assert o.per_run_usd is not None
        assert f"${o.per_run_usd:,.2f}" in out and f"{o.hours_per_run:,.2f}" in out
        assert "".join(o.name.split()) in first_column  # wrapped, not cut
        for v in o.breakdown_ms.values():
            assert f"{v:.2f}" in out
    assert "left out at 80 columns: samples/s" in " ".join(out.split())


def test_compare_at_full_width_shows_every_column():
    out = printed(render_compare(_options()), 220)
    assert "samples/s" in out and "left out" not in out and "123,456" in out
