"""Format an EnvCheck for the terminal."""

from __future__ import annotations

from rich.table import Table

from analyzer.machine.environment import EnvCheck
from analyzer.render.safe import text


def render_env(env: EnvCheck) -> Table:
    table = Table(title="gpuanalyze env", show_header=False, title_justify="left")
    table.add_column("key")
    table.add_column("value")
    table.add_row("torch", text(env.torch or "not installed"))
    table.add_row("CUDA build", text(env.cuda_build or "none (CPU build)"))
    table.add_row("cuda.is_available()", str(env.cuda_available))
    table.add_row("driver", text(env.driver or "unknown"))
    table.add_row("CuPy", text(env.cupy or "not installed"))
    for d in env.devices:
        precisions = (
            ", ".join(p for p, ok in (("tf32", d.tf32), ("bf16", d.bf16), ("fp8", d.fp8)) if ok) or "fp32/fp16 only"
        )
        table.add_row(
            f"GPU {d.index}",
            text(
                f"{d.name}, compute capability {d.compute_capability}, "
                f"{d.memory_bytes / 1e9:.1f} GB; tensor-core precisions: {precisions}"
            ),
        )
    if env.smoke_test:
        table.add_row("smoke test", text(env.smoke_test))
    for m in env.messages:
        table.add_row("note", text(m))
    return table
